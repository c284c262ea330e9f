"""History rows: the period/interval vocabulary and caps, Binance paging on the simulator, Yahoo on a stub."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from engine.bars import Bars
from engine.market_data.errors import MarketDataError
from engine.market_data.history import (
    BINANCE_OF,
    INTERVALS,
    MAX_ROWS,
    PERIODS,
    HistoryArgumentError,
    HistorySource,
    binance_interval,
    check_cap,
    default_interval,
    expected_rows,
    parse_yahoo_rows,
    period_start,
)
from engine.market_data.source import MarketData
from simulator import INTERVAL_MS, RunningSimulator
from testkit.http_stub import http_stub

DAY = 86_400
NOW = datetime(2026, 11, 23, 21, 0, tzinfo=UTC).timestamp()


# --- vocabulary --------------------------------------------------------------------------------
@given(st.sampled_from(INTERVALS))
def test_every_interval_maps_to_binance_or_is_refused_naming_alternatives(interval: str) -> None:
    if interval in ("2m", "90m", "5d", "3mo"):
        with pytest.raises(HistoryArgumentError, match="instead") as err:
            binance_interval(interval)
        alternatives = str(err.value).split("use ")[1].removesuffix(" instead").split(" or ")
        assert all(a in BINANCE_OF for a in alternatives)
    else:
        assert binance_interval(interval) in INTERVAL_MS


def test_yahoo_names_become_binance_names() -> None:
    assert {i: binance_interval(i) for i in ("60m", "1h", "1wk", "1mo", "1d")} == {
        "60m": "1h",
        "1h": "1h",
        "1wk": "1w",
        "1mo": "1M",
        "1d": "1d",
    }


@given(st.sampled_from(PERIODS))
def test_the_default_interval_of_every_period_is_answerable_for_crypto(period: str) -> None:
    iv = default_interval(period)
    assert iv in INTERVALS
    binance_interval(iv)
    check_cap(period, iv, NOW)  # never refused


@given(
    st.sampled_from([p for p in PERIODS if p != "max"]),
    st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC)),
)
def test_period_start_is_calendar_based_and_before_now(period: str, now: datetime) -> None:
    ts = now.timestamp()
    start = period_start(period, ts)
    assert start is not None and start <= ts
    begun = datetime.fromtimestamp(start, UTC)
    days = (ts - start) / DAY
    if period == "ytd":
        assert (begun.month, begun.day, begun.hour, begun.minute) == (1, 1, 0, 0)
    elif period in ("1d", "5d"):
        assert days == int(period[0])
    elif period.endswith("mo"):
        months = int(period[:-2])
        assert 28 * months - 3 <= days <= 31 * months + 1
        assert begun.day <= now.day  # the same day of the month, or the month's last day
    else:
        years = int(period[:-1])
        assert 365 * years <= days <= 366 * years + 1


@given(st.sampled_from([p for p in PERIODS if p != "max"]), st.sampled_from(list(BINANCE_OF)))
def test_cap_refuses_beyond_max_rows_and_its_suggestion_fits(period: str, interval: str) -> None:
    n = expected_rows(period, interval, NOW)
    if n <= MAX_ROWS:
        check_cap(period, interval, NOW)
        return
    with pytest.raises(HistoryArgumentError, match=f"cap of {MAX_ROWS}") as err:
        check_cap(period, interval, NOW)
    suggested = str(err.value).split("interval=")[1].split(")")[0]
    check_cap(period, suggested, NOW)


def test_expected_rows_counts_the_forming_bar() -> None:
    assert expected_rows("1d", "1h", NOW) == 25
    assert expected_rows("5d", "5m", NOW) == 5 * 288 + 1


# --- Binance paging on the simulator -----------------------------------------------------------
@pytest.fixture
async def market(sim: RunningSimulator) -> AsyncIterator[MarketData]:
    async with aiohttp.ClientSession() as session:
        yield MarketData(session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9", timeout_s=5)


def _sim_rows(sim: RunningSimulator, interval: str, start_ms: int) -> list[tuple[float, float]]:
    """The simulator's own klines from ``start_ms`` to now: (open time s, close)."""
    ex = sim.exchange
    step = INTERVAL_MS[interval]
    out: list[tuple[float, float]] = []
    cursor = start_ms
    while True:
        page = ex.markets["BTCUSDT"].kline_window(interval, ex.now_ms(), start=cursor, end=None, limit=1000)
        out += [(k.open_time / 1000, k.close) for k in page]
        if len(page) < 1000:
            return out
        cursor = page[-1].open_time + step


async def test_5d_at_5m_is_paged_forward_in_two_requests_from_the_period_start(
    sim: RunningSimulator, market: MarketData
) -> None:
    src = HistorySource(market, None)
    before = sim.exchange.requests["GET /api/v3/klines"]
    got = await src.history("btcusdt", "5d", "5m")
    now_ms = sim.exchange.now_ms()
    start_ms = (now_ms - 5 * DAY * 1000) // 300_000 * 300_000
    assert [(r.timestamp, r.close) for r in got.rows] == _sim_rows(sim, "5m", start_ms)
    assert len(got.rows) == 5 * 288 + 1
    assert np.all(np.diff([r.timestamp for r in got.rows]) == 300)
    assert all(r.adjusted_close == r.close for r in got.rows)
    assert sim.exchange.requests["GET /api/v3/klines"] - before == 2
    klines = [r for r in got.refs if r.startswith("binance:GET /api/v3/klines?")]
    assert len(klines) == 2
    assert f"startTime={start_ms}" in klines[0] and "limit=1000" in klines[0] and "interval=5m" in klines[0]


async def test_1mo_daily_rows_match_the_simulator(sim: RunningSimulator, market: MarketData) -> None:
    got = await HistorySource(market, None).history("BTCUSDT", "1mo", "1d")
    now = sim.exchange.now_ms() / 1000
    start = period_start("1mo", now)
    assert start is not None
    expected = _sim_rows(sim, "1d", int(start // DAY * DAY) * 1000)
    assert [(r.timestamp, r.close) for r in got.rows] == expected
    assert got.symbol == "BTCUSDT" and got.interval == "1d"


async def test_max_keeps_the_newest_rows_and_says_so(sim: RunningSimulator, market: MarketData) -> None:
    src = HistorySource(market, None, max_rows=2500)
    got = await src.history("BTCUSDT", "max", "1h")
    assert len(got.rows) == 2500
    now_ms = sim.exchange.now_ms()
    assert got.rows[-1].timestamp * 1000 == now_ms // 3_600_000 * 3_600_000
    assert np.all(np.diff([r.timestamp for r in got.rows]) == 3600)
    assert "note:period max is capped at the newest 2500 rows" in got.refs
    assert sum(r.startswith("binance:GET /api/v3/klines") for r in got.refs) == 3


async def test_unknown_pair_and_unavailable_interval(sim: RunningSimulator, market: MarketData) -> None:
    src = HistorySource(market, None)
    with pytest.raises(MarketDataError, match="unknown symbol NOPEUSDT") as err:
        await src.history("NOPEUSDT", "1mo", "1d")
    assert err.value.status == 400
    before = sum(sim.exchange.requests.values())
    with pytest.raises(HistoryArgumentError, match="use 1h instead"):
        await src.history("BTCUSDT", "1y", "90m")
    with pytest.raises(HistoryArgumentError, match="cap of 5000"):
        await src.history("BTCUSDT", "1y", "1m")
    assert sum(sim.exchange.requests.values()) - before <= 1  # at most the clock


class _Engine:
    """A live engine following BTCUSDT 1d with a window reaching back ``days`` days."""

    def __init__(self, now_s: int, days: int) -> None:
        self.times = np.array([now_s // DAY * DAY - i * DAY for i in range(days, -1, -1)], dtype=np.int64)

    def follows(self, symbol: str, interval: str) -> bool:
        return (symbol, interval) == ("BTCUSDT", "1d")

    def is_stale(self, symbol: str, interval: str) -> bool:
        return False

    def window_bars(self, symbol: str, interval: str, n: int | None = None, *, include_open: bool = False) -> Bars:
        closes = self.times.astype(np.float64) / 1e5
        return Bars(open=closes, high=closes + 1, low=closes - 1, close=closes, volume=closes * 0 + 7, times=self.times)


async def test_a_followed_window_covering_the_period_answers_without_rest(
    sim: RunningSimulator, market: MarketData
) -> None:
    now_s = sim.exchange.now_ms() // 1000
    src = HistorySource(market, _Engine(now_s, 40))
    await src.exchange_now()
    before = sim.exchange.requests["GET /api/v3/klines"]
    got = await src.history("BTCUSDT", "1mo", "1d")
    assert sim.exchange.requests["GET /api/v3/klines"] == before
    assert got.refs[0].startswith("engine:BTCUSDT/1d@")
    start = period_start("1mo", now_s)
    assert start is not None
    assert got.rows[0].timestamp == start // DAY * DAY and got.rows[-1].timestamp == now_s // DAY * DAY
    # a window that does not reach back far enough: REST
    src = HistorySource(market, _Engine(now_s, 10))
    got = await src.history("BTCUSDT", "1mo", "1d")
    assert got.refs[0].startswith("binance:GET /api/v3/klines")


# --- Yahoo on a loopback stub ------------------------------------------------------------------
def _yahoo_body(times: list[int], closes: list[float | None], adj: list[float | None] | None) -> dict[str, Any]:
    indicators: dict[str, Any] = {
        "quote": [
            {
                "open": closes,
                "high": [None if c is None else c + 1 for c in closes],
                "low": [None if c is None else c - 1 for c in closes],
                "close": closes,
                "volume": [None if c is None else 100 for c in closes],
            }
        ]
    }
    if adj is not None:
        indicators["adjclose"] = [{"adjclose": adj}]
    return {"chart": {"result": [{"meta": {}, "timestamp": times, "indicators": indicators}], "error": None}}


@pytest.fixture
async def yahoo() -> AsyncIterator[tuple[MarketData, dict[str, Any]]]:
    state: dict[str, Any] = {"status": 200, "body": None, "seen": []}

    async def chart(request: web.Request) -> web.Response:
        state["seen"].append((request.match_info["symbol"], dict(request.query)))
        return web.json_response(state["body"], status=state["status"])

    async with http_stub({"/v8/finance/chart/{symbol}": chart}) as url, aiohttp.ClientSession() as session:
        yield MarketData(session, binance_rest_url="http://127.0.0.1:9", yahoo_url=url), state


async def test_yahoo_rows_use_adjclose_and_drop_null_rows(yahoo: tuple[MarketData, dict[str, Any]]) -> None:
    market, state = yahoo
    t0 = 1_763_000_000
    state["body"] = _yahoo_body([t0, t0 + DAY, t0 + 2 * DAY], [10.0, None, 12.0], [9.5, None, 11.5])
    got = await HistorySource(market, None).history("AAPL", "1y")
    assert state["seen"] == [("AAPL", {"range": "1y", "interval": "1d"})]
    assert [(r.timestamp, r.close, r.adjusted_close, r.volume) for r in got.rows] == [
        (t0, 10.0, 9.5, 100.0),
        (t0 + 2 * DAY, 12.0, 11.5, 100.0),
    ]
    assert got.refs[0].startswith("yahoo:GET /v8/finance/chart/AAPL?range=1y&interval=1d@")
    assert not any(r.startswith("note:") for r in got.refs)


async def test_yahoo_without_adjclose_falls_back_to_close_and_says_so(
    yahoo: tuple[MarketData, dict[str, Any]],
) -> None:
    market, state = yahoo
    state["body"] = _yahoo_body([1_763_000_000, 1_763_000_300], [10.0, 10.5], None)
    got = await HistorySource(market, None).history("MSFT", "1d", "5m")
    assert [r.adjusted_close for r in got.rows] == [10.0, 10.5]
    assert any("adjusted_close equals close" in r for r in got.refs)


@given(
    st.lists(st.one_of(st.none(), st.floats(min_value=0.01, max_value=1e6, allow_nan=False)), min_size=0, max_size=40),
    st.booleans(),
)
def test_parse_keeps_exactly_the_rows_with_prices(closes: list[float | None], with_adj: bool) -> None:
    times = [1_700_000_000 + 60 * i for i in range(len(closes))]
    adj = [None if c is None else c * 0.9 for c in closes] if with_adj else None
    body = _yahoo_body(times, closes, adj)["chart"]["result"][0]
    rows, adjusted = parse_yahoo_rows(body)
    kept = [(t, c) for t, c in zip(times, closes, strict=True) if c is not None]
    assert [(r.timestamp, r.close) for r in rows] == kept
    assert adjusted == with_adj
    for r in rows:
        assert math.isclose(r.adjusted_close, r.close * (0.9 if with_adj else 1.0))


async def test_yahoo_errors(yahoo: tuple[MarketData, dict[str, Any]]) -> None:
    market, state = yahoo
    src = HistorySource(market, None)
    state["status"] = 404
    state["body"] = {"chart": {"result": None, "error": {"code": "Not Found", "description": "No data found"}}}
    with pytest.raises(MarketDataError, match="unknown symbol 'NOPE'") as err:
        await src.history("NOPE", "1mo", "1d")
    assert err.value.status == 404
    state["status"] = 422
    state["body"] = {"chart": {"result": None, "error": {"description": "Only 60 days of 15m data"}}}
    with pytest.raises(HistoryArgumentError, match="Only 60 days"):
        await src.history("AAPL", "1mo", "15m")
    seen = len(state["seen"])
    with pytest.raises(HistoryArgumentError, match="only for the last 7 days"):
        await src.history("AAPL", "1mo", "1m")  # refused before asking Yahoo
    assert len(state["seen"]) == seen
