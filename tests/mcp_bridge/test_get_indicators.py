"""get_indicators and generate_chart with real (simulated Binance) market data."""

from __future__ import annotations

import json
from typing import Any

from mcp_bridge.server import ToolRouter


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[-1].text)


async def test_get_indicators_fetches_bars_and_reports_how_many_it_used(router: ToolRouter) -> None:
    result = await router.call(
        "get_indicators",
        {"symbol": "BTCUSDT", "interval": "1h", "indicators": ["rsi", {"name": "macd", "fast": 8}], "bars": 300},
    )
    payload = _payload(result)
    assert payload["source"] == "fetched"
    assert payload["bars"] == 300
    assert payload["symbol"] == "BTCUSDT" and payload["interval"] == "1h"
    assert set(payload["indicators"]) == {"rsi", "macd"}
    assert payload["indicators"]["rsi"]["lines"][0]["last_value"] is not None


async def test_get_indicators_accepts_ticker_and_timeframe_aliases(router: ToolRouter) -> None:
    payload = _payload(
        await router.call("get_indicators", {"ticker": "ETHUSDT", "timeframe": "4h", "indicators": ["bb"]})
    )
    assert payload["indicators"]["bb"]["label"] == "BB"


async def test_get_indicators_checks_arguments_in_chartgens_order(router: ToolRouter) -> None:
    r = await router.call("get_indicators", {"indicators": ["rsi"]})
    assert r.is_error and r.content[0].text == "symbol is required"
    r = await router.call("get_indicators", {"symbol": "BTCUSDT"})
    assert r.is_error and r.content[0].text == "indicators array is required and must not be empty"
    r = await router.call("get_indicators", {"symbol": "BTCUSDT", "indicators": ["rsi", "zzz"]})
    assert r.is_error
    assert r.content[0].text == "Unknown indicator(s): zzz. Call list_indicators to see available indicators."


async def test_chart_of_an_unknown_symbol_is_an_error_naming_the_cause_not_sample_data(router: ToolRouter) -> None:
    r = await router.call("generate_chart", {"ticker": "NOPEUSDT", "format": "summary"})
    assert r.is_error
    assert r.content[0].text.startswith("Failed to fetch data:")
    assert "Invalid symbol" in r.content[0].text


async def test_summary_with_a_real_ticker_has_unix_second_dates(router: ToolRouter) -> None:
    payload = _payload(
        await router.call(
            "generate_chart",
            {"ticker": "BTCUSDT", "timeframe": "1wk", "bars": 20, "format": "summary", "indicators": ["rsi"]},
        )
    )
    assert payload["symbol"] == "BTCUSDT" and payload["interval"] == "1wk"
    assert payload["price"]["last"]["date"].isdigit()


async def test_both_format_returns_image_then_summary(router: ToolRouter) -> None:
    r = await router.call(
        "generate_chart", {"bars": 40, "format": "both", "width": 400, "height": 300, "indicators": ["rsi"]}
    )
    assert not r.is_error
    assert [c.type for c in r.content] == ["image", "text"]
