"""Backfill-then-evaluate pieces: which alerts a gap's trades reached (against a brute-force
oracle), the trade history paged from the simulator (against its tape), hand-over marks that only
move forward, and the alert-change notifications a worker listens to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts import ALERTS_CHANNEL, PG_MIGRATIONS, Alert, AlertChange, PgAlertStore, parse_change
from cluster.marks import MARK_MIGRATIONS, MarketMarks
from daemon import missed_by_closes, missed_by_trades
from engine import Bars, BinanceRest, BinanceTradeHistory, TradePrint
from storage import Listener, PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]


def alert(n: int, above: bool, level: float, armed_ms: int, trigger: str = "touch") -> Alert:
    return Alert(
        id=f"a{n}",
        principal="p",
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above" if above else "price_below",
        threshold=level,
        trigger=trigger,  # type: ignore[arg-type]
        created_at=armed_ms / 1000,
        armed_at=armed_ms / 1000,
    )


prices = st.floats(min_value=90, max_value=110, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    trades=st.lists(st.tuples(st.integers(0, 10_000), prices), max_size=40),
    specs=st.lists(st.tuples(st.booleans(), prices, st.integers(0, 10_000)), max_size=12),
    mark=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_missed_by_trades_matches_a_brute_force_oracle(
    trades: list[tuple[int, float]], specs: list[tuple[bool, float, int]], mark: int | None
) -> None:
    prints = [TradePrint(t, p) for t, p in sorted(trades)]
    alerts = [alert(i, above, level, armed) for i, (above, level, armed) in enumerate(specs)]
    got = {a.id: (p, t) for a, p, t in missed_by_trades(alerts, prints, mark)}
    for a in alerts:
        after = max(int((a.armed_at or 0) * 1000), mark if mark is not None else -1)
        level = a.threshold or 0
        hits = [
            (p, t)
            for t, p in ((x.time_ms, x.price) for x in prints)
            if t > after and (p >= level if a.kind == "price_above" else p <= level)
        ]
        assert got.get(a.id) == (hits[0] if hits else None)


def test_close_alerts_count_only_bars_closed_inside_the_gap() -> None:
    times = np.array([0, 60, 120, 180], dtype=np.int64)
    close = np.array([100.0, 106.0, 99.0, 107.0])
    bars = Bars(close, close, close, close, close, times)
    alerts = [
        alert(1, True, 105, 0, "close"),  # bar 60 closes at 120 s: inside (60 s, 150 s]
        alert(2, True, 105, 130_000, "close"),  # armed after that close; bar 180 closes past the end
        alert(3, False, 99.5, 0, "close"),  # bar 120 closes at 180 s: past the end
        alert(4, True, 105, 0),  # a touch alert: not this function's
    ]
    got = missed_by_closes(alerts, bars, 60_000, 150_000)
    assert [(a.id, p, t) for a, p, t in got] == [("a1", 106.0, 60_000)]


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    from simulator import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0, clock="manual")
    try:
        yield running
    finally:
        await running.close()


async def test_trade_history_pages_through_the_simulators_tape(sim: Any) -> None:
    start = sim.exchange.now_ms()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.url}/sim/v1/advance", json={"seconds": 2400}) as r:
            assert r.status == 200
        async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "70123.45"}) as r:
            assert r.status == 200
        end = sim.exchange.now_ms()
        history = BinanceTradeHistory(BinanceRest(http, sim.url))
        got = await history.trades("BTCUSDT", start, end)
    tape = sim.exchange.tapes["BTCUSDT"].between(start, end, 10**6)
    assert len(got) > 1000, "more than one page"
    assert got == [TradePrint(t.time, float(t.price)) for t in tape]
    assert got[-1].price == pytest.approx(70123.45, abs=0.01)


@pytest.fixture
async def pg(postgres: Any) -> AsyncIterator[tuple[str, PostgresDatabase]]:
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn)
    await db.migrate([PG_MIGRATIONS, MARK_MIGRATIONS])
    try:
        yield dsn, db
    finally:
        await db.close()


async def test_marks_only_move_forward(pg: tuple[str, PostgresDatabase]) -> None:
    _, db = pg
    marks = MarketMarks(db)
    await marks.advance({"BTCUSDT 1m": 2_000, "ETHUSDT 1m": 1_000}, "w1")
    await marks.advance({"BTCUSDT 1m": 1_500, "ETHUSDT 1m": 3_000}, "w2")  # a woken ex-owner's older time
    assert await marks.read(["BTCUSDT 1m", "ETHUSDT 1m", "SOLUSDT 1m"]) == {"BTCUSDT 1m": 2_000, "ETHUSDT 1m": 3_000}
    by_market = {m.market: m for m in await marks.all()}
    assert by_market["BTCUSDT 1m"].member == "w1" and by_market["ETHUSDT 1m"].member == "w2"


async def test_alert_changes_are_announced_at_commit(pg: tuple[str, PostgresDatabase]) -> None:
    dsn, db = pg
    store = PgAlertStore(db)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = Listener(dsn, db.where, ALERTS_CHANNEL, heard.put_nowait)
    assert await listener.ensure()
    try:
        a = alert(1, True, 100.0, 0)
        await store.insert(a)
        assert parse_change(await heard.get()) == AlertChange("set", "BTCUSDT", "1m", "a1")
        assert await store.insert_capped(alert(2, False, 90.0, 0), 10)
        assert parse_change(await heard.get()) == AlertChange("set", "BTCUSDT", "1m", "a2")
        await store.remove(None, "a1", "cancelled", 1.0)
        assert parse_change(await heard.get()) == AlertChange("gone", "BTCUSDT", "1m", "a1")
        await store.insert_many([alert(3, True, 120.0, 0)])
        assert parse_change(await heard.get()) == AlertChange("reload")
        both = await store.active_in([("BTCUSDT", "1m"), ("ETHUSDT", "1m")])
        assert {x.id for x in both} == {"a2", "a3"}
        assert await store.active_in([("BTCUSDT", "4h")]) == []
        assert await store.active_in([]) == []
        assert parse_change("set BTCUSDT") is None and parse_change("future 1 2 3") is None
    finally:
        await listener.close()


class _FakeEvaluator:
    """What hand_over uses of the worker's evaluator: the first tick and fire_missed."""

    def __init__(self, first_tick_ms: int) -> None:
        self.ticks_through: dict[tuple[str, str], int] = {}
        self.first_tick_ms = first_tick_ms
        self.fired: list[tuple[str, float, int]] = []

    async def wait_ticks_past(self, symbol: str, interval: str, after_ms: int | None) -> int:
        return self.first_tick_ms

    async def fire_missed(self, missed: Any) -> list[Any]:
        self.fired.extend((a.id, p, t) for a, p, t in missed)
        return list(missed)


class _FakeHistory:
    def __init__(self, trades: list[TradePrint]) -> None:
        self.trades_ = trades
        self.asked: list[tuple[int, int]] = []

    async def trades(self, symbol: str, start_ms: int, end_ms: int) -> list[TradePrint]:
        self.asked.append((start_ms, end_ms))
        return [t for t in self.trades_ if start_ms <= t.time_ms <= end_ms]


async def test_hand_over_checks_the_gap_after_the_mark_and_closes_once_the_window_is_synced() -> None:
    from daemon import hand_over

    evaluator = _FakeEvaluator(first_tick_ms=200_000)
    history = _FakeHistory([TradePrint(50_000, 120.0), TradePrint(150_000, 106.0), TradePrint(190_000, 99.0)])
    synced = asyncio.Event()
    order: list[str] = []

    def bars_of(symbol: str, interval: str) -> Bars:
        order.append("bars")
        assert synced.is_set(), "the closes were read before the warm-up's bars were in"
        times = np.array([60, 120], dtype=np.int64)
        close = np.array([100.0, 107.0])
        return Bars(close, close, close, close, close, times)

    async def wait_synced() -> None:
        order.append("synced")
        synced.set()

    alerts = [
        alert(1, True, 105, 0),  # touch: 150 s trade reaches it (after the 100 s mark)
        alert(2, True, 110, 0),  # touch: only the 50 s trade (before the mark) reached it
        alert(3, True, 105, 0, "close"),  # bar 120 s closed at 180 s, inside the gap, beyond 105
    ]
    result = await hand_over(
        evaluator,  # type: ignore[arg-type]
        history,
        bars_of,
        "BTCUSDT",
        "1m",
        alerts,
        100_000,
        synced=wait_synced,
    )
    assert history.asked == [(100_001, 200_000)]
    assert evaluator.fired == [("a1", 106.0, 150_000), ("a3", 107.0, 120_000)]
    assert order == ["synced", "bars"]
    assert (result.live_from_ms, result.checked_from_ms, result.fired) == (200_000, 100_000, 2)
