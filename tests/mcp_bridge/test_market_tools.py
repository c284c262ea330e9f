"""get_quotes and get_history: in process through the router (convention, fields, codes, cache) and end to
end through a daemon on the simulator with the official SDK client (prices checked against the simulator)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import MarketData, period_start
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import market as market_tools
from mcp_bridge.tools.agent_calls import RESULT_CACHE
from mcp_bridge.tools.context import Services
from simulator import HttpErrorFault, RunningSimulator, start_simulator
from testkit.daemon_proc import create_token, mcp_client
from testkit.http_stub import http_stub
from testkit.sim_daemon import sim_env, start_on_sim, tool_json

DAY_MS = 86_400_000
FIELDS = ["price", "change", "change_percent", "volume", "timestamp"]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Engine:
    """The live engine as QuoteSource and HistorySource read it: BTCUSDT followed at 1m."""

    def __init__(self, price: float, at_ms: int) -> None:
        self.price, self.at_ms = price, at_ms
        self.markets = [("BTCUSDT", "1m")]

    def last_price(self, symbol: str) -> float | None:
        return self.price if symbol == "BTCUSDT" else None

    def exchange_time_ms(self, symbol: str) -> int | None:
        return self.at_ms if symbol == "BTCUSDT" else None

    def follows(self, symbol: str, interval: str) -> bool:
        return (symbol, interval) == ("BTCUSDT", "1m")

    def is_stale(self, symbol: str, interval: str) -> bool:
        return True


@pytest.fixture
async def router(sim: RunningSimulator) -> AsyncIterator[ToolRouter]:
    RESULT_CACHE.clear()
    async with aiohttp.ClientSession() as session:
        services = Services(charts=cast(Any, None))
        services.market = MarketData(session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9", timeout_s=5)
        services.engine = cast(Any, Engine(71_234.5, sim.exchange.now_ms() - 250))
        yield ToolRouter(services)
    RESULT_CACHE.clear()


def _schema(name: str) -> dict[str, Any]:
    unit = next(u for u in market_tools.UNITS if u.name == name)
    schema = unit.listing().output_schema
    assert schema is not None
    return schema


async def _ok(router: ToolRouter, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await router.call(name, args)
    assert not result.is_error, result.content[0].text
    body = result.structured_content
    assert body is not None and json.loads(result.content[0].text) == body
    jsonschema.validate(body, _schema(name))
    return body


async def _code(router: ToolRouter, name: str, args: dict[str, Any]) -> str:
    result = await router.call(name, args)
    assert result.is_error
    body = result.structured_content
    assert body is not None and set(body) == {"tool_call_id", "error"}
    assert body["error"]["message"]
    return str(body["error"]["code"])


def test_units_are_declared_as_the_catalog_expects() -> None:
    assert [u.name for u in market_tools.UNITS] == ["get_quotes", "get_history"]
    for u in market_tools.UNITS:
        assert u.group == "portfolio"
        ann = u.listing().annotations
        assert ann is not None and ann.read_only_hint and not ann.destructive_hint and ann.open_world_hint
        assert "source_refs" in u.description and "tool_call_id" in u.description


async def test_followed_and_not_followed_quotes_with_the_convention(router: ToolRouter, sim: RunningSimulator) -> None:
    ex = sim.exchange
    body = await _ok(router, "get_quotes", {"symbols": ["BTCUSDT", "ETHUSDT"], "tool_call_id": "q_001"})
    assert body["tool_call_id"] == "q_001"
    btc, eth = body["data"]["quotes"]
    refs = body["data"]["source_refs"]
    assert refs[0] == "q_001"
    assert any(r.startswith("engine:BTCUSDT/1m@") for r in refs)
    assert any(r.startswith("binance:GET /api/v3/ticker/24hr?symbols=") for r in refs)
    open_btc = ex.markets["BTCUSDT"].path.price_at(ex.now_ms() - DAY_MS)
    assert btc["price"] == 71_234.5 and btc["timestamp"] == _iso(ex.now_ms() - 250)
    assert math.isclose(btc["change_percent"], (71_234.5 - open_btc) / open_btc * 100, rel_tol=1e-7)
    assert math.isclose(eth["price"], ex.markets["ETHUSDT"].last_price(ex.now_ms()), rel_tol=1e-9)
    assert eth["timestamp"] == _iso(ex.now_ms())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=5, unique=True))
async def test_fields_keep_only_symbol_and_those_fields(router: ToolRouter, fields: list[str]) -> None:
    body = await _ok(router, "get_quotes", {"symbols": ["ETHUSDT", "BTCUSDT"], "fields": fields})
    for q in body["data"]["quotes"]:
        assert set(q) == {"symbol", *fields}
    assert body["data"]["source_refs"][0] == body["tool_call_id"]


async def test_history_cites_each_request_and_is_cached(router: ToolRouter, sim: RunningSimulator) -> None:
    ex = sim.exchange
    args = {"symbol": "ETHUSDT", "period": "1mo", "interval": "1d"}
    first = await _ok(router, "get_history", {**args, "tool_call_id": "h_1"})
    rows = first["data"]["history"]
    start = period_start("1mo", ex.now_ms() / 1000)
    assert start is not None
    expected = ex.markets["ETHUSDT"].kline_window("1d", ex.now_ms(), start=int(start) * 1000, end=None, limit=1000)
    assert [(r["timestamp"], r["close"]) for r in rows] == [(_iso(k.open_time), k.close) for k in expected]
    assert all(r["adjusted_close"] == r["close"] for r in rows)
    refs = first["data"]["source_refs"]
    assert refs[0] == "h_1" and refs[1].startswith("binance:GET /api/v3/klines?symbol=ETHUSDT&interval=1d&limit=1000")
    before = ex.requests["GET /api/v3/klines"]
    again = await _ok(router, "get_history", {**args, "tool_call_id": "h_2"})
    assert ex.requests["GET /api/v3/klines"] == before
    assert again["data"]["history"] == rows
    assert again["data"]["source_refs"][:3] == ["h_2", "cache:h_1", "h_1"]


async def test_default_interval_and_stale_engine_window_use_rest(router: ToolRouter) -> None:
    body = await _ok(router, "get_history", {"symbol": "BTCUSDT", "period": "1d"})
    rows = body["data"]["history"]
    assert len(rows) == 289  # 5m bars of a day, the forming one included
    assert all(r.startswith(("get_history_", "binance:")) for r in body["data"]["source_refs"])


async def test_error_codes(router: ToolRouter, sim: RunningSimulator) -> None:
    assert await _code(router, "get_quotes", {"symbols": ["NOPEUSDT"]}) == "INVALID_SYMBOL"
    assert await _code(router, "get_history", {"symbol": "NOPEUSDT", "period": "1mo"}) == "INVALID_SYMBOL"
    assert await _code(router, "get_history", {"symbol": "BTCUSDT", "period": "1y", "interval": "90m"}) == (
        "INVALID_ARGUMENT"
    )
    assert await _code(router, "get_history", {"symbol": "BTCUSDT", "period": "2y", "interval": "5m"}) == (
        "INVALID_ARGUMENT"
    )
    assert await _code(router, "get_quotes", {"symbols": []}) == "INVALID_ARGUMENT"
    assert await _code(router, "get_quotes", {"symbols": ["X"] * 101}) == "INVALID_ARGUMENT"
    assert await _code(router, "get_quotes", {"symbols": ["BTCUSDT"], "fields": ["bid"]}) == "INVALID_ARGUMENT"
    assert await _code(router, "get_history", {"symbol": "BTCUSDT", "period": "7d"}) == "INVALID_ARGUMENT"
    sim.exchange.faults.http_errors.append(HttpErrorFault(status=429, retry_after=30, count=1, path=None))
    assert await _code(router, "get_quotes", {"symbols": ["SOLUSDT"]}) == "RATE_LIMITED"
    assert await _code(router, "get_quotes", {"symbols": ["AAPL"]}) == "NETWORK_ERROR"  # Yahoo unreachable
    router.services.market = None
    assert await _code(router, "get_quotes", {"symbols": ["BTCUSDT"]}) == "NOT_AVAILABLE"


# --- end to end: a daemon on the simulator, the official SDK client -----------------------------
@pytest.fixture
async def e2e_sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", symbols=["BTCUSDT", "ETHUSDT"])
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def yahoo_url() -> AsyncIterator[str]:
    meta = {
        "regularMarketPrice": 190.0,
        "previousClose": 200.0,
        "regularMarketVolume": 1_000_000,
        "regularMarketTime": 1_763_928_000,
    }

    async def chart(request: web.Request) -> web.Response:
        body = {"chart": {"result": [{"meta": {**meta, "symbol": request.match_info["symbol"]}}], "error": None}}
        return web.json_response(body)

    async with http_stub({"/v8/finance/chart/{symbol}": chart}) as url:
        yield url


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_quotes_and_history_through_the_daemon(e2e_sim: RunningSimulator, yahoo_url: str, tmp_path: Path) -> None:
    sim, ex = e2e_sim, e2e_sim.exchange
    token = await create_token(tmp_path, "agent", "charts")
    daemon = await start_on_sim(sim, tmp_path, sim_env(sim, CHARTGEN_YAHOO_URL=yahoo_url))
    try:
        async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, token) as client:
            async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "70123.45"}) as r:
                posted = float((await r.json())["price"])
            async with asyncio.timeout(30):  # the engine sees the trade on its stream: ask until it has
                while True:
                    got = await tool_json(client, "get_quotes", {"symbols": ["BTCUSDT"], "tool_call_id": "wait"})
                    if got["data"]["quotes"][0]["price"] == posted:
                        break
            body = await tool_json(
                client, "get_quotes", {"symbols": ["BTCUSDT", "ETHUSDT", "AAPL"], "tool_call_id": "quote_001"}
            )
            assert body["tool_call_id"] == "quote_001"
            btc, eth, aapl = body["data"]["quotes"]
            refs = body["data"]["source_refs"]
            assert refs[0] == "quote_001"
            assert any(r.startswith("engine:BTCUSDT/1m@") for r in refs)
            assert any(r.startswith("yahoo:GET /v8/finance/chart/AAPL?range=1d&interval=1d@") for r in refs)
            now = ex.now_ms()
            open_btc = ex.markets["BTCUSDT"].path.price_at(now - DAY_MS)
            assert btc["price"] == posted and btc["timestamp"] == _iso(now)
            assert math.isclose(btc["change"], posted - open_btc, abs_tol=1e-6)
            assert math.isclose(btc["change_percent"], (posted - open_btc) / open_btc * 100, rel_tol=1e-7)
            last_eth, open_eth = (
                ex.markets["ETHUSDT"].last_price(now),
                ex.markets["ETHUSDT"].path.price_at(now - DAY_MS),
            )
            assert math.isclose(eth["price"], last_eth, rel_tol=1e-9)
            assert math.isclose(eth["change_percent"], round((last_eth - open_eth) / open_eth * 100, 3), abs_tol=1e-9)
            assert (aapl["price"], aapl["change"], aapl["change_percent"]) == (190.0, -10.0, -5.0)

            hist = await tool_json(
                client, "get_history", {"symbol": "BTCUSDT", "period": "1mo", "interval": "1d", "tool_call_id": "h1"}
            )
            assert hist["tool_call_id"] == "h1" and hist["data"]["source_refs"][0] == "h1"
            assert hist["data"]["source_refs"][1].startswith("binance:GET /api/v3/klines?symbol=BTCUSDT&interval=1d")
            start = period_start("1mo", now / 1000)
            assert start is not None
            klines = ex.markets["BTCUSDT"].kline_window("1d", now, start=int(start) * 1000, end=None, limit=1000)
            rows = hist["data"]["history"]
            assert [(r["timestamp"], r["open"], r["close"]) for r in rows] == [
                (_iso(k.open_time), k.open, k.close) for k in klines
            ]
            assert rows[-1]["close"] == posted

            bad = await client.call_tool("get_quotes", {"symbols": ["NOPEUSDT"], "tool_call_id": "bad_1"})
            assert bad.is_error
            err = json.loads(bad.content[0].text)
            assert err["tool_call_id"] == "bad_1" and err["error"]["code"] == "INVALID_SYMBOL"
            assert "NOPEUSDT" in err["error"]["message"]
    finally:
        await daemon.stop()
