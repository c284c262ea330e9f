"""Quotes: the 24 h ticker on the simulator (one request, cached for followed pairs), the live engine's
price, Yahoo's chart meta on a loopback stub, and the errors an agent maps to its codes."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.market_data.errors import MarketDataError, RateLimited
from engine.market_data.quotes import QuoteSource, normalise
from engine.market_data.source import MarketData
from simulator import HttpErrorFault, RunningSimulator, start_simulator
from testkit.http_stub import http_stub

SYMBOLS = [f"S{i:02d}USDT" for i in range(50)]
TICKER = "GET /api/v3/ticker/24hr"


@pytest.fixture
async def sim50() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(symbols=["BTCUSDT", "ETHUSDT", *SYMBOLS])
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def market(sim50: RunningSimulator) -> AsyncIterator[MarketData]:
    async with aiohttp.ClientSession() as session:
        yield MarketData(session, binance_rest_url=sim50.url, yahoo_url="http://127.0.0.1:9", timeout_s=5)


class Engine:
    """What QuoteSource reads from the live engine: prices and event times of followed symbols."""

    def __init__(self, prices: dict[str, tuple[float, int]]) -> None:
        self.prices = prices

    @property
    def markets(self) -> list[tuple[str, str]]:
        return [(s, "1m") for s in self.prices]

    def last_price(self, symbol: str) -> float | None:
        p = self.prices.get(symbol)
        return None if p is None else p[0]

    def exchange_time_ms(self, symbol: str) -> int | None:
        p = self.prices.get(symbol)
        return None if p is None else p[1]


def _open_24h(sim: RunningSimulator, symbol: str) -> float:
    """The simulator's price 24 h ago (its ticker's openPrice), straight from its price path."""
    ex = sim.exchange
    return float(f"{ex.markets[symbol].path.price_at(ex.now_ms() - 86_400_000):.8f}")


async def test_a_pair_not_followed_is_quoted_from_the_24h_ticker(sim50: RunningSimulator, market: MarketData) -> None:
    ex = sim50.exchange
    q = await QuoteSource(market, None).quote("ethusdt")
    last, first = ex.markets["ETHUSDT"].last_price(ex.now_ms()), _open_24h(sim50, "ETHUSDT")
    assert q.symbol == "ETHUSDT"
    assert math.isclose(q.price, last, rel_tol=1e-9)
    assert math.isclose(q.change, last - first, abs_tol=1e-6)
    assert math.isclose(q.change_percent, round((last - first) / first * 100, 3), abs_tol=1e-9)
    assert q.timestamp == ex.now_ms() / 1000
    assert q.market_open is None
    assert q.source_ref.startswith('binance:GET /api/v3/ticker/24hr?symbols=["ETHUSDT"]@')


async def test_50_followed_pairs_cost_one_ticker_request_then_none(sim50: RunningSimulator, market: MarketData) -> None:
    ex = sim50.exchange
    now = ex.now_ms()
    engine = Engine({s: (1.0 + i, now - 5) for i, s in enumerate(SYMBOLS)})
    src = QuoteSource(market, engine)
    before = ex.requests[TICKER]
    first = await src.quotes(SYMBOLS)
    assert ex.requests[TICKER] - before == 1
    for _ in range(20):
        again = await src.quotes(SYMBOLS)
    assert ex.requests[TICKER] - before == 1
    assert again == first
    for i, (s, q) in enumerate(zip(SYMBOLS, first, strict=True)):
        live, ref = 1.0 + i, _open_24h(sim50, s)
        assert (q.symbol, q.price, q.timestamp) == (s, live, (now - 5) / 1000)
        assert math.isclose(q.change, live - ref, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(q.change_percent, (live - ref) / ref * 100, rel_tol=1e-9)
        assert q.source_ref == f"engine:{s}/1m@" + q.source_ref.split("@")[1]
        assert q.extra_refs and q.extra_refs[0].startswith("binance:GET /api/v3/ticker/24hr?symbols=")


async def test_expired_rows_are_refetched_in_one_request_for_all(sim50: RunningSimulator, market: MarketData) -> None:
    ex = sim50.exchange
    src = QuoteSource(market, Engine({"BTCUSDT": (70_000.0, ex.now_ms())}), ticker_ttl_s=0.0, price_ttl_s=0.0)
    before = ex.requests[TICKER]
    await src.quotes(["BTCUSDT", "ETHUSDT"])
    await src.quotes(["BTCUSDT", "ETHUSDT"])
    assert ex.requests[TICKER] - before == 2


async def test_a_pair_that_is_not_followed_is_refreshed_after_price_ttl(
    sim50: RunningSimulator, market: MarketData
) -> None:
    """Followed pairs keep their ticker row (60 s); a pair quoted from the ticker needs a fresh one."""
    ex = sim50.exchange
    src = QuoteSource(market, Engine({"BTCUSDT": (70_000.0, ex.now_ms())}), price_ttl_s=0.0)
    await src.quotes(["BTCUSDT", "ETHUSDT"])
    before = ex.requests[TICKER]
    await src.quotes(["BTCUSDT"])
    assert ex.requests[TICKER] == before
    await src.quotes(["ETHUSDT"])
    assert ex.requests[TICKER] == before + 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["BTCUSDT", "ethusdt", "S01USDT", " S02USDT "]), min_size=1, max_size=8))
async def test_order_and_duplicates_are_kept(market: MarketData, symbols: list[str]) -> None:
    got = await QuoteSource(market, None).quotes(symbols)
    assert [q.symbol for q in got] == [normalise(s) for s in symbols]


async def test_an_unknown_pair_in_a_batch_is_named(sim50: RunningSimulator, market: MarketData) -> None:
    src = QuoteSource(market, None)
    with pytest.raises(MarketDataError, match="unknown symbol NOPEUSDT: Binance has no such spot pair") as err:
        await src.quotes(["BTCUSDT", "NOPEUSDT", "ETHUSDT"])
    assert err.value.status == 400
    assert str(err.value).split(":")[0] == "unknown symbol NOPEUSDT"


async def test_rate_limit_and_unreachable_exchange(sim50: RunningSimulator, market: MarketData) -> None:
    sim50.exchange.faults.http_errors.append(HttpErrorFault(status=429, retry_after=30, count=1, path=None))
    with pytest.raises(RateLimited):
        await QuoteSource(market, None).quote("BTCUSDT")
    async with aiohttp.ClientSession() as session:
        dead = MarketData(session, binance_rest_url="http://127.0.0.1:9", yahoo_url="http://127.0.0.1:9", timeout_s=2)
        with pytest.raises(MarketDataError, match="cannot reach Binance") as err:
            await QuoteSource(dead, None).quote("BTCUSDT")
        assert err.value.status is None
        with pytest.raises(MarketDataError, match="cannot reach Yahoo") as err:
            await QuoteSource(dead, None).quote("AAPL")
        assert err.value.status is None


# --- Yahoo ---------------------------------------------------------------------------------------
def _meta(price: float, prev: float | None, chart_prev: float, start: int, end: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "symbol": "AAPL",
        "regularMarketPrice": price,
        "chartPreviousClose": chart_prev,
        "regularMarketVolume": 51_234_567,
        "regularMarketTime": 1_763_928_000,
        "currentTradingPeriod": {"regular": {"start": start, "end": end, "timezone": "EST", "gmtoffset": -18000}},
    }
    if prev is not None:
        meta["previousClose"] = prev
    return {"chart": {"result": [{"meta": meta, "timestamp": [], "indicators": {"quote": [{}]}}], "error": None}}


@pytest.fixture
async def yahoo() -> AsyncIterator[tuple[MarketData, dict[str, Any]]]:
    state: dict[str, Any] = {"bodies": {}, "seen": []}

    async def chart(request: web.Request) -> web.Response:
        sym = request.match_info["symbol"]
        state["seen"].append((sym, dict(request.query)))
        if sym not in state["bodies"]:
            err = {"code": "Not Found", "description": "No data found, symbol may be delisted"}
            return web.json_response({"chart": {"result": None, "error": err}}, status=404)
        return web.json_response(state["bodies"][sym])

    async with http_stub({"/v8/finance/chart/{symbol}": chart}) as url, aiohttp.ClientSession() as session:
        yield MarketData(session, binance_rest_url="http://127.0.0.1:9", yahoo_url=url), state


async def test_stock_quote_from_yahoo_meta(yahoo: tuple[MarketData, dict[str, Any]]) -> None:
    market, state = yahoo
    now = int(time.time())
    state["bodies"]["AAPL"] = _meta(190.0, 200.0, 180.0, now - 3600, now + 3600)
    state["bodies"]["MSFT"] = _meta(420.0, None, 400.0, now - 7200, now - 3600)
    aapl, msft = await QuoteSource(market, None).quotes(["AAPL", "MSFT"])
    assert (aapl.price, aapl.change, aapl.change_percent) == (190.0, -10.0, -5.0)
    assert (aapl.volume, aapl.timestamp, aapl.market_open) == (51_234_567.0, 1_763_928_000.0, True)
    assert aapl.source_ref.startswith("yahoo:GET /v8/finance/chart/AAPL?range=1d&interval=1d@")
    assert (msft.change, msft.change_percent, msft.market_open) == (20.0, 5.0, False)  # chartPreviousClose
    assert sorted(s for s, _ in state["seen"]) == ["AAPL", "MSFT"]


async def test_unknown_stock_is_a_404_naming_it(yahoo: tuple[MarketData, dict[str, Any]]) -> None:
    market, _ = yahoo
    with pytest.raises(MarketDataError, match="unknown symbol 'ZZZZQ'") as err:
        await QuoteSource(market, None).quote("ZZZZQ")
    assert err.value.status == 404
