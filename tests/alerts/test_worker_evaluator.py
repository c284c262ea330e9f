"""A cluster worker's evaluator keeps the ticks it evaluated for a few seconds, so an alert that
reaches its worker by notification after such a tick (it was set at a front a moment before)
is still fired for it — once, whether the record or a later live tick gets there first."""

from __future__ import annotations

import time
import uuid

from alerts.models import Alert
from alerts.push import PushHub
from alerts.store import AlertStore
from alerts.worker_evaluator import RECENT_S, WorkerEvaluator
from daemon import missed_by_trades
from engine import Tick, TradePrint
from storage import Database
from testkit.null_market import NullMarket


def above(level: float, armed_ms: int) -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal="p",
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=level,
        created_at=armed_ms / 1000,
        armed_at=armed_ms / 1000,
    )


def tick(price: float, time_ms: int) -> Tick:
    return Tick("BTCUSDT", "1m", price, time_ms, time_ms // 60_000 * 60)


async def test_an_alert_indexed_after_a_tick_that_reached_it_fires_once_for_that_tick(db: Database) -> None:
    store = AlertStore(db)
    evaluator = WorkerEvaluator(store, NullMarket(), PushHub())
    await evaluator.on_ticks([tick(100.0, 1_000), tick(105.0, 2_000), tick(101.0, 3_000)])
    assert evaluator.recent_prices("BTCUSDT") == [
        TradePrint(1_000, 100.0),
        TradePrint(2_000, 105.0),
        TradePrint(3_000, 101.0),
    ]

    late = above(104.0, 1_500)  # armed before the 105 tick, indexed after it
    too_late = above(104.0, 2_500)  # armed after it: nothing reached it since
    for a in (late, too_late):
        await store.insert(a)
        evaluator.index(a)
    missed = missed_by_trades([late, too_late], evaluator.recent_prices("BTCUSDT"), None)
    assert [(a.id, price, t) for a, price, t in missed] == [(late.id, 105.0, 2_000)]

    fired = await evaluator.fire_missed(missed)
    assert [f.alert.id for f in fired] == [late.id]
    assert await evaluator.fire_missed(missed) == []  # out of the book: never twice
    assert await store.outcome(late.id) == "fired" and await store.outcome(too_late.id) is None

    # A live tick reaching the other one fires it; the record of it cannot fire it again.
    assert [f.alert.id for f in await evaluator.on_ticks([tick(104.5, 4_000)])] == [too_late.id]
    again = missed_by_trades([too_late], evaluator.recent_prices("BTCUSDT"), None)
    assert again and await evaluator.fire_missed(again) == []


async def test_the_record_keeps_only_the_last_seconds(db: Database) -> None:
    evaluator = WorkerEvaluator(AlertStore(db), NullMarket(), PushHub())
    span_ms = int(RECENT_S * 1000)
    now_ms = int(time.time() * 1000)
    await evaluator.on_ticks([tick(100.0 + i, now_ms + i * 1_000) for i in range(int(RECENT_S) * 3)])
    kept = evaluator.recent_prices("BTCUSDT")
    newest = kept[-1].time_ms
    assert kept[0].time_ms >= newest - span_ms and len(kept) == int(RECENT_S) + 1
    assert evaluator.recent_prices("ETHUSDT") == []
