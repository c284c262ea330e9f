"""Yahoo chart client: parsing, honest 4h aggregation and error reporting, against a loopback stub."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from engine.market_data.errors import MarketDataError
from engine.market_data.yahoo import YahooChart

DAY = 86400
OPEN = 1_700_000_000 - (1_700_000_000 % DAY) + 14 * 3600 + 1800  # a 14:30 UTC session open


def _chart(times: list[int], closes: list[float | None]) -> dict[str, Any]:
    return {
        "chart": {
            "result": [
                {
                    "timestamp": times,
                    "indicators": {
                        "quote": [
                            {
                                "open": closes,
                                "high": [None if c is None else c + 1 for c in closes],
                                "low": [None if c is None else c - 1 for c in closes],
                                "close": closes,
                                "volume": [10 if c is not None else None for c in closes],
                            }
                        ]
                    },
                }
            ],
            "error": None,
        }
    }


@pytest.fixture
async def yahoo() -> AsyncIterator[tuple[YahooChart, dict[str, Any]]]:
    state: dict[str, Any] = {"status": 200, "body": None, "seen": []}

    async def chart(request: web.Request) -> web.Response:
        state["seen"].append((request.match_info["symbol"], dict(request.query)))
        return web.json_response(state["body"], status=state["status"])

    app = web.Application()
    app.router.add_get("/v8/finance/chart/{symbol}", chart)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession() as session:
        yield YahooChart(session, f"http://127.0.0.1:{port}", timeout_s=5), state
    await runner.cleanup()


async def test_daily_bars_are_parsed_and_null_rows_skipped(yahoo: tuple[YahooChart, dict[str, Any]]) -> None:
    """Rows with a null price are dropped, and only the newest `bars` bars are kept."""
    client, state = yahoo
    times = [OPEN + i * DAY for i in range(5)]
    state["body"] = _chart(times, [10.0, None, 12.0, 13.0, 14.0])
    bars = await client.fetch("AAPL", "1d", 3)
    assert bars.close.tolist() == [12.0, 13.0, 14.0]
    assert bars.times is not None and bars.times.tolist() == times[2:]
    assert state["seen"][0] == ("AAPL", {"interval": "1d", "range": "1y"})


async def test_4h_bars_never_straddle_two_sessions(yahoo: tuple[YahooChart, dict[str, Any]]) -> None:
    """Seven hourly bars a day become a 4-hour and a 3-hour bar per day, each within its day."""
    client, state = yahoo
    times = [OPEN + d * DAY + h * 3600 for d in range(2) for h in range(7)]
    closes = [float(i) for i in range(14)]
    state["body"] = _chart(times, closes)
    bars = await client.fetch("AAPL", "4h", 100)
    assert bars.times is not None
    assert bars.times.tolist() == [OPEN, OPEN + 4 * 3600, OPEN + DAY, OPEN + DAY + 4 * 3600]
    assert bars.close.tolist() == [3.0, 6.0, 10.0, 13.0]
    assert bars.volume.tolist() == [40.0, 30.0, 40.0, 30.0]
    assert state["seen"][0][1]["interval"] == "1h"


async def test_yahoo_error_is_reported_with_its_description(yahoo: tuple[YahooChart, dict[str, Any]]) -> None:
    """A 404 with Yahoo's error object names the status and Yahoo's description."""
    client, state = yahoo
    state["status"] = 404
    state["body"] = {"chart": {"result": None, "error": {"code": "Not Found", "description": "No data found"}}}
    with pytest.raises(MarketDataError, match="status 404: No data found"):
        await client.fetch("NOPE", "1d", 10)


async def test_unreachable_yahoo_is_a_clear_error() -> None:
    """A refused connection names the host it tried."""
    async with aiohttp.ClientSession() as session:
        client = YahooChart(session, "http://127.0.0.1:9", timeout_s=2)
        with pytest.raises(MarketDataError, match="cannot reach Yahoo Finance"):
            await client.fetch("AAPL", "1d", 10)
