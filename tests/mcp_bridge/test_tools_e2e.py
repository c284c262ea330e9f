"""The charting tools end to end through the official MCP SDK client, over HTTP and stdio."""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION
from PIL import Image

from mcp_bridge.tools.catalog import TOOL_NAMES

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "data" / "generate_chart_summary_rsi_30.json"
CHARTGEN_ORDER = [
    "generate_chart",
    "list_indicators",
    "get_indicators",
    "place_order",
    "cancel_order",
    "get_orders",
    "get_positions",
    "get_balance",
    "set_alert",
    "list_alerts",
    "cancel_alert",
    "get_notifications",
    "subscribe_notifications",
    "unsubscribe_notifications",
    "list_subscriptions",
]


def _stdio_params() -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_")}
    # No network in tests: any fetch would go to a closed loopback port.
    env.update(CHARTGEN_BINANCE_REST_URL="http://127.0.0.1:9", CHARTGEN_YAHOO_URL="http://127.0.0.1:9")
    return StdioServerParameters(command=sys.executable, args=["-m", "daemon", "--mcp"], env=env)


@pytest.fixture(params=["http", pytest.param("stdio", marks=pytest.mark.process)])
def target(request: pytest.FixtureRequest, mcp_url: str) -> Any:
    """Where the SDK client connects: our HTTP app, or `chartgen --mcp` as a subprocess."""
    return f"{mcp_url}/mcp" if request.param == "http" else _stdio_params()


def connect(target: Any) -> Client:
    # entered inside each test: the SDK's anyio cancel scopes must open and close in one task
    return Client(target, mode="legacy", read_timeout_seconds=60)


def _text(result: Any) -> str:
    assert not result.is_error, result.content[0].text
    return result.content[-1].text


async def test_tools_list_has_the_15_tools_in_chartgens_order(target: Any) -> None:
    async with connect(target) as client:
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        assert [n for n in names if n in CHARTGEN_ORDER] == CHARTGEN_ORDER and names == list(TOOL_NAMES)
        assert client.protocol_version == LATEST_HANDSHAKE_VERSION


async def test_png_without_ticker_has_exactly_the_requested_size(target: Any) -> None:
    async with connect(target) as client:
        result = await client.call_tool(
            "generate_chart", {"width": 800, "height": 450, "bars": 60, "indicators": ["rsi"]}
        )
        assert not result.is_error
        image = result.content[0]
        assert image.type == "image" and image.mime_type == "image/png"
        with Image.open(io.BytesIO(base64.b64decode(image.data))) as img:
            assert img.size == (800, 450)


async def test_summary_of_30_sample_bars_reproduces_the_golden_price_block(target: Any) -> None:
    async with connect(target) as client:
        result = await client.call_tool("generate_chart", {"bars": 30, "indicators": ["rsi"], "format": "summary"})
        text = _text(result)
        golden = json.loads(GOLDEN.read_text())
        ours = json.loads(text)
        assert ours.keys() == golden.keys()
        assert ours["indicators"]["rsi"].keys() == golden["indicators"]["rsi"].keys()
        assert json.dumps(ours["price"], indent=2, sort_keys=True) == json.dumps(
            golden["price"], indent=2, sort_keys=True
        )
        # the price block appears verbatim in our text, byte for byte
        golden_price = GOLDEN.read_text().split('"price": ')[1].split(',\n  "symbol"')[0]
        assert golden_price in text


async def test_series_arrays_have_one_entry_per_bar_and_null_before_warm_up(target: Any) -> None:
    async with connect(target) as client:
        result = await client.call_tool(
            "generate_chart", {"bars": 50, "indicators": ["rsi", "macd"], "format": "series"}
        )
        payload = json.loads(_text(result))
        assert len(payload["bars"]) == 50
        rsi = payload["indicators"]["rsi"]["lines"][0]["values"]
        assert len(rsi) == 50
        assert rsi[0] is None and rsi[13] is None and rsi[14] is not None
        for line in payload["indicators"]["macd"]["lines"]:
            assert len(line["values"]) == 50


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"indicators": ["nope"]}, "Unknown indicator(s): nope"),
        ({"indicators": [{"name": "rsi", "length": 0}], "format": "summary"}, "parameter 'length'"),
        ({"bars": -5}, "bars must be between 1 and"),
        ({"format": "gif"}, "Unknown format: expected 'png', 'summary', 'both', or 'series'."),
        ({"ticker": "A" * 10_000_000}, "ticker must be a ticker like"),
    ],
)
async def test_bad_arguments_get_a_clear_is_error_and_the_server_keeps_serving(
    target: Any, args: dict[str, Any], needle: str
) -> None:
    async with connect(target) as client:
        result = await client.call_tool("generate_chart", args)
        assert result.is_error
        assert needle in result.content[0].text
        assert len(result.content[0].text) < 300
        again = await client.call_tool("list_indicators", {})
        assert json.loads(_text(again))["total"] == 38


async def test_trading_tools_say_the_engine_is_not_running(target: Any) -> None:
    async with connect(target) as client:
        result = await client.call_tool(
            "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 1}
        )
        assert result.is_error
        assert result.content[0].text == "Trading engine not running. Start with --trade to enable trading tools."


async def test_http_client_in_auto_mode_negotiates_the_newest_protocol(mcp_url: str) -> None:
    async with Client(f"{mcp_url}/mcp", read_timeout_seconds=30) as c:
        assert c.protocol_version == LATEST_PROTOCOL_VERSION
        tools = await c.list_tools()
        names = [t.name for t in tools.tools]
        assert [n for n in names if n in CHARTGEN_ORDER] == CHARTGEN_ORDER and names == list(TOOL_NAMES)
