"""fetch_chart_documentation, validate_chart_config and construct_chart_config: the agent convention,
validation by generate_chart's own parser (valid=false is a successful call), warnings, constructed configs
rendered by generate_chart on the simulator, and the three tools through a daemon with the SDK client."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from engine import ChartService, all_indicators
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services
from mcp_bridge.tools.chart_validation import parse_chart, validate
from testkit.daemon_proc import mcp_client, running_daemon


@pytest.fixture
def router(charts: ChartService) -> ToolRouter:
    return ToolRouter(Services(charts=charts, max_bars=5000))


async def call(router: ToolRouter, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await router.call(name, args, principal="alice")
    body = json.loads(result.content[0].text)
    assert body == result.structured_content
    return bool(result.is_error), body


# --- validate_chart_config ---------------------------------------------------------------------


async def test_a_valid_config_is_normalised_with_every_default(router: ToolRouter) -> None:
    config = {"symbol": "BTCUSDT", "interval": "1h", "panels": ["bb", {"name": "rsi", "length": 21}]}
    err, body = await call(router, "validate_chart_config", {"config": config, "tool_call_id": "v1"})
    assert not err and body["tool_call_id"] == "v1"
    data = body["data"]
    assert data["valid"] is True and data["errors"] == []
    assert data["source_refs"][0] == "v1" and "parser:mcp_bridge.tools.charting.chart_request" in data["source_refs"]
    normalized = data["normalized"]
    assert normalized["ticker"] == "BTCUSDT" and normalized["timeframe"] == "1h"
    assert normalized["indicators"] == [
        {"name": "bbands", "period": 20, "std_dev": 2.0},
        {"name": "rsi", "length": 21},
    ]
    assert (normalized["bars"], normalized["width"], normalized["height"]) == (200, 1920, 1080)
    assert (normalized["format"], normalized["source"], normalized["all_signals"]) == ("png", "auto", False)
    assert parse_chart(normalized, 5000).bars == 200  # the normalised config parses again
    assert data["limits"]["indicatorCount"] == 2 and data["limits"]["panelCount"] == 1


async def test_an_invalid_config_is_a_successful_call_naming_each_field(router: ToolRouter) -> None:
    config = {
        "ticker": "BINANCE:BTCUSDT",
        "timeframe": "1h",
        "bars": 9000,
        "width": 50,
        "indicators": ["rsi", "BollingerBands@tv-basicstudies", {"name": "macd", "fast": 0}],
        "studies": [],
        "theme": "light",
    }
    err, body = await call(router, "validate_chart_config", {"config": config, "planLevel": "BASIC"})
    assert not err
    data = body["data"]
    assert data["valid"] is False and data["normalized"] is None
    fields = {(e["field"], e["severity"]) for e in data["errors"]}
    assert {("ticker", "error"), ("bars", "error"), ("width", "error")} <= fields
    assert {("indicators[1]", "error"), ("indicators[2]", "error")} <= fields
    assert {("studies", "warning"), ("theme", "warning")} <= fields
    messages = " ".join(e["message"] for e in data["errors"])
    assert "use 'bbands'" in messages and "between 1 and 5000" in messages and "'fast'" in messages
    assert "drop the exchange prefix: use 'BTCUSDT'" in messages
    assert any("planLevel is ignored" in s for s in data["suggestions"])


async def test_errors_name_the_key_the_caller_used(router: ToolRouter) -> None:
    _, body = await call(router, "validate_chart_config", {"config": {"symbol": "BTC USDT", "interval": "4h"}})
    assert [e["field"] for e in body["data"]["errors"]] == ["symbol"]


async def test_an_interval_the_source_cannot_serve_is_an_error(router: ToolRouter) -> None:
    _, body = await call(router, "validate_chart_config", {"config": {"ticker": "BTCUSDT", "timeframe": "7m"}})
    assert body["data"]["valid"] is False and body["data"]["errors"][0]["field"] == "timeframe"
    _, body = await call(router, "validate_chart_config", {"config": {"ticker": "AAPL", "timeframe": "2h"}})
    assert body["data"]["valid"] is False and "Yahoo" in body["data"]["errors"][0]["message"]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"ticker": "BTCUSDT", "indicators": ["rsi", "macd", "atr", "obv", "cci"], "height": 600}, "panel indicators"),
        ({"ticker": "BTCUSDT", "bars": 1500, "width": 1200}, "under 1.5 px"),
        ({"ticker": "BTCUSDT", "format": "summary", "width": 800}, "ignored"),
        ({"ticker": "AAPL", "indicators": ["funding"]}, "crypto pairs only"),
        ({"indicators": ["rsi"]}, "sample data"),
        ({"ticker": "BTCUSDT", "bars": 10, "indicators": ["rsi"]}, "mostly empty"),
    ],
)
async def test_warnings(router: ToolRouter, config: dict[str, Any], words: str) -> None:
    _, body = await call(router, "validate_chart_config", {"config": config})
    assert body["data"]["valid"] is True
    assert any(words in w for w in body["data"]["warnings"]), body["data"]["warnings"]


async def test_validate_refuses_a_config_that_is_not_an_object(router: ToolRouter) -> None:
    err, body = await call(router, "validate_chart_config", {"config": "BTCUSDT", "tool_call_id": "v_bad"})
    assert err and body["tool_call_id"] == "v_bad" and body["error"]["code"] == "INVALID_ARGUMENT"


# --- construct_chart_config --------------------------------------------------------------------


async def test_construct_answers_config_reasoning_and_warnings(router: ToolRouter) -> None:
    args = {
        "naturalLanguage": "Show Bitcoin with Bollinger Bands and RSI for the last 7 days",
        "exchange": "BINANCE",
        "preferences": {"theme": "dark"},
        "tool_call_id": "c1",
    }
    err, body = await call(router, "construct_chart_config", args)
    assert not err and body["tool_call_id"] == "c1"
    data = body["data"]
    assert data["config"] == {
        "ticker": "BTCUSDT",
        "timeframe": "1h",
        "bars": 168,
        "indicators": ["bbands", "rsi"],
        "width": 1920,
        "height": 1080,
        "format": "png",
        "source": "binance",
    }
    assert "'bitcoin'" in data["reasoning"] and "1–7 days → 1h" in data["reasoning"]
    assert data["warnings"] == []
    assert data["source_refs"][0] == "c1" and any(r.startswith("registry:") for r in data["source_refs"])


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ({"naturalLanguage": "Show Bitcorn with RSI"}, "INVALID_SYMBOL", "Bitcoin"),
        ({"naturalLanguage": "btc last week", "exchange": "NYSEX"}, "INVALID_ARGUMENT", "get_exchanges"),
        ({"naturalLanguage": "btc", "preferences": {"colour": "red"}}, "INVALID_ARGUMENT", "colour"),
        ({"naturalLanguage": ""}, "INVALID_ARGUMENT", "naturalLanguage"),
        ({"naturalLanguage": "btc", "symbol": "!!"}, "INVALID_ARGUMENT", "ticker"),
    ],
)
async def test_construct_errors(router: ToolRouter, args: dict[str, Any], code: str, words: str) -> None:
    err, body = await call(router, "construct_chart_config", {**args, "tool_call_id": "c_bad"})
    assert err and body["tool_call_id"] == "c_bad"
    assert body["error"]["code"] == code and words in body["error"]["message"]


@pytest.mark.parametrize(
    "phrase",
    [
        "ETH last 3 days with macd and rsi 21, 1200x675",
        "SOL past week with cipher b and vwap",
        "BNB 15m with supertrend 10 3 and stochastic, square",
    ],
)
async def test_a_constructed_config_renders_through_generate_chart(router: ToolRouter, phrase: str) -> None:
    _, body = await call(router, "construct_chart_config", {"naturalLanguage": phrase})
    config = body["data"]["config"]
    assert validate(config, 5000).valid
    result = await router.call("generate_chart", config, principal="alice")
    assert not result.is_error, result.content[0]
    png = base64.b64decode(result.content[0].data)
    with Image.open(io.BytesIO(png)) as img:
        assert img.size == (config["width"], config["height"])


# --- fetch_chart_documentation -----------------------------------------------------------------


async def test_documentation_sections(router: ToolRouter) -> None:
    err, body = await call(router, "fetch_chart_documentation", {"section": "indicators", "tool_call_id": "d1"})
    assert not err and body["tool_call_id"] == "d1"
    data = body["data"]
    assert len(data["indicators"]) == len(all_indicators()) and data["chartParameters"] is None
    assert data["cachedAt"].endswith("Z") and any(r.startswith("registry:") for r in data["source_refs"])
    _, body = await call(router, "fetch_chart_documentation", {"section": "parameters"})
    assert body["data"]["chartParameters"]["themes"] == ["dark"] and body["data"]["indicators"] is None
    _, body = await call(router, "fetch_chart_documentation", {"section": "exchanges"})
    assert body["data"]["exchanges"][0]["id"] and body["data"]["limits"] is None
    _, everything = await call(router, "fetch_chart_documentation", {"forceRefresh": True})
    for example in everything["data"]["examples"]:
        assert validate(example["config"], 5000).valid


async def test_documentation_refuses_an_unknown_section(router: ToolRouter) -> None:
    err, body = await call(router, "fetch_chart_documentation", {"section": "studies", "tool_call_id": "d_bad"})
    assert err and body["tool_call_id"] == "d_bad" and body["error"]["code"] == "INVALID_ARGUMENT"


# --- through a daemon ---------------------------------------------------------------------------


@pytest.mark.process
async def test_the_three_tools_through_a_daemon_on_the_simulator(tmp_path: Path) -> None:
    async with running_daemon(["--serve", "--sim"], data_dir=tmp_path) as daemon:
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            result = await client.call_tool("fetch_chart_documentation", {"section": "all", "tool_call_id": "e_doc"})
            assert not result.is_error
            doc = result.structured_content
            assert doc["tool_call_id"] == "e_doc" and doc["data"]["source_refs"][0] == "e_doc"
            assert len(doc["data"]["indicators"]) == len(all_indicators())
            result = await client.call_tool("fetch_chart_documentation", {"section": "nope", "tool_call_id": "e_d2"})
            assert result.is_error and result.structured_content["error"]["code"] == "INVALID_ARGUMENT"

            phrase = "ETH last 3 days with bollinger bands and rsi 21, 800x600"
            result = await client.call_tool(
                "construct_chart_config", {"naturalLanguage": phrase, "tool_call_id": "e_c"}
            )
            assert not result.is_error
            built = result.structured_content
            assert built["tool_call_id"] == "e_c" and built["data"]["source_refs"][0] == "e_c"
            config = built["data"]["config"]
            result = await client.call_tool(
                "construct_chart_config", {"naturalLanguage": "Zorblax", "tool_call_id": "e_c2"}
            )
            assert result.is_error and result.structured_content["error"]["code"] == "INVALID_SYMBOL"

            result = await client.call_tool("validate_chart_config", {"config": config, "tool_call_id": "e_v"})
            assert not result.is_error
            checked = result.structured_content
            assert checked["tool_call_id"] == "e_v" and checked["data"]["valid"] is True
            assert checked["data"]["source_refs"][0] == "e_v"
            result = await client.call_tool("validate_chart_config", {"config": {"bars": 0}, "tool_call_id": "e_v2"})
            assert not result.is_error and result.structured_content["data"]["valid"] is False
            result = await client.call_tool("validate_chart_config", {"tool_call_id": "e_v3"})
            assert result.is_error and result.structured_content["tool_call_id"] == "e_v3"

            result = await client.call_tool("generate_chart", config)
            assert not result.is_error
            png = base64.b64decode(result.content[0].data)
            with Image.open(io.BytesIO(png)) as img:
                assert img.size == (800, 600)
