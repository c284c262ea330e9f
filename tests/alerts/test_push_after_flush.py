"""A firing is pushed only once it is on disk, and the flush is shared and off the connection.

``Database.run_transaction_synced_later`` commits with NORMAL and hands the fsync of the WAL to
``WalSync``'s thread; the evaluator (pipelined, as its ``run`` loop sets it) returns after the
commit and pushes the frames when the flush is done.  ``os.fdatasync`` is replaced by a gate
the test opens, so "not yet on disk" is a state the test holds, not a race.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from alerts.evaluator import AlertEvaluator
from alerts.models import Alert, Firing, Subscription
from alerts.push import PushHub
from alerts.store import AlertStore
from daemon import ALL_MIGRATIONS
from engine import Tick
from storage import LOOP_TRANSACTION_MAX_ITEMS, Database, WalSyncError
from testkit.null_market import NullMarket


class GatedFlush:
    """Stands in for os.fdatasync: each call waits until the test lets it through."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Semaphore(0)
        self.allowed = threading.Semaphore(0)
        self.fail = False

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.release()
        self.allowed.acquire()
        if self.fail:
            raise OSError(5, "Input/output error")
        os.fsync(fd)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.acquire, True, 10), "no flush started"

    def let_through(self, n: int = 1) -> None:
        for _ in range(n):
            self.allowed.release()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> GatedFlush:
    g = GatedFlush()
    monkeypatch.setattr(os, "fdatasync", g)  # storage's WAL flush calls os.fdatasync
    return g


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "state.db")
    await database.migrate(ALL_MIGRATIONS)
    try:
        yield database
    finally:
        await database.close()


class RecordingHub(PushHub):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[int] = []

    def publish(self, principal: str, seq: int, data: str) -> int:
        self.frames.append(seq)
        return super().publish(principal, seq, data)


def above(level: float) -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal="a",
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=level,
        created_at=time.time(),
    )


async def armed(
    db: Database, alerts: list[Alert], *, pipelined: bool
) -> tuple[AlertStore, RecordingHub, AlertEvaluator]:
    """A store with ``alerts`` armed in an evaluator whose frames go to a recording hub; principal "a" subscribed."""
    store = AlertStore(db)
    hub = RecordingHub()
    evaluator = AlertEvaluator(store, NullMarket(), hub)
    evaluator.pipelined = pipelined
    await store.subscribe(Subscription(principal="a"), time.time())
    await store.insert_many(alerts)
    for a in alerts:
        evaluator.index(a)
    return store, hub, evaluator


async def test_a_file_database_gets_a_wal_flusher_and_memory_does_not(db: Database) -> None:
    assert db.wal_sync is not None and db.wal_sync.wal_path.name == "state.db-wal"
    memory = await Database.open(":memory:")
    try:
        assert memory.wal_sync is None
        _, done = await memory.run_transaction_synced_later(lambda conn: conn.execute("SELECT 1").fetchone())
        assert done.done()  # no WAL: the commit was a FULL one
    finally:
        await memory.close()


async def test_the_commit_returns_before_the_flush_and_one_flush_answers_every_waiting_commit(
    db: Database, gate: GatedFlush
) -> None:
    """Commits made while a flush runs are answered together by the next one (group commit)."""
    await db.execute("CREATE TABLE t (x INTEGER)")
    _, first = await db.run_transaction_synced_later(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
    await gate.wait_entered()
    later = []
    for x in range(2, 6):  # the connection is free while the first flush is held
        _, done = await db.run_transaction_synced_later(lambda conn, x=x: conn.execute(f"INSERT INTO t VALUES ({x})"))
        later.append(done)
    assert not first.done() and not any(f.done() for f in later)
    gate.let_through()
    await first
    await gate.wait_entered()
    assert not any(f.done() for f in later)
    gate.let_through()
    await asyncio.gather(*later)
    assert gate.calls == 2
    assert db.wal_sync is not None and db.wal_sync.flushes == 2
    row = await db.fetchone("SELECT COUNT(*) FROM t")
    assert row is not None and row[0] == 5


async def test_a_failed_flush_is_reported_to_every_commit_waiting_on_it(db: Database, gate: GatedFlush) -> None:
    await db.execute("CREATE TABLE t (x INTEGER)")
    gate.fail = True
    _, done = await db.run_transaction_synced_later(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
    gate.let_through()
    with pytest.raises(WalSyncError, match="fdatasync of the WAL failed"):
        await done


async def test_pipelined_firings_are_pushed_after_their_flush_in_sequence_order(db: Database, gate: GatedFlush) -> None:
    alerts = [above(100.0 + i) for i in range(3)]
    store, hub, evaluator = await armed(db, alerts, pipelined=True)

    first = await evaluator.on_tick(Tick("BTCUSDT", "1m", 100.5, 0, 0))
    assert [f.alert.id for f in first] == [alerts[0].id]
    await gate.wait_entered()
    assert hub.frames == []  # committed, not on disk: nothing pushed
    second = await evaluator.on_tick(Tick("BTCUSDT", "1m", 102.5, 0, 0))
    assert {f.alert.id for f in second} == {alerts[1].id, alerts[2].id}
    assert hub.frames == []
    last = evaluator._unsynced
    assert last is not None
    gate.let_through(2)
    await asyncio.wait_for(asyncio.wait({last}), 10)  # its push callback was registered first, so it has run
    assert len(hub.frames) == 3
    assert hub.frames == sorted(hub.frames)
    assert await store.outcome(alerts[0].id) == "fired"


async def test_a_firing_whose_flush_failed_is_not_pushed_live_but_stays_queued(db: Database, gate: GatedFlush) -> None:
    alert = above(100.0)
    store, hub, evaluator = await armed(db, [alert], pipelined=True)
    gate.fail = True
    await evaluator.on_tick(Tick("BTCUSDT", "1m", 100.5, 0, 0))
    gate.let_through()
    assert db.wal_sync is not None
    waiting = evaluator._unsynced
    assert waiting is not None
    await asyncio.wait({waiting})  # the evaluator's callback was registered first, so it has run
    assert hub.frames == []
    queued = await store.queued("a", after_seq=None, now=time.time())
    assert [q.alert_id for q in queued] == [alert.id]


async def test_a_direct_call_waits_for_the_flush_before_returning(db: Database, gate: GatedFlush) -> None:
    """Outside the run loop (pipelined False) on_tick returns with the frame already pushed."""
    alert = above(100.0)
    _, hub, evaluator = await armed(db, [alert], pipelined=False)
    call = asyncio.ensure_future(evaluator.on_tick(Tick("BTCUSDT", "1m", 100.5, 0, 0)))
    await gate.wait_entered()
    assert not call.done() and hub.frames == []
    gate.let_through()
    await call
    assert len(hub.frames) == 1


async def test_small_firings_run_on_the_loop_and_large_ones_on_the_database_thread(db: Database) -> None:
    store = AlertStore(db)
    await store.subscribe(Subscription(principal="a"), time.time())
    alerts = [above(100.0 + i) for i in range(LOOP_TRANSACTION_MAX_ITEMS + 2)]
    await store.insert_many(alerts)
    assert db.loop_writer is not None

    def firing(group: list[Alert]) -> list[Firing]:
        return [Firing(alert_id=a.id, value=a.threshold or 0.0, triggered_at=time.time()) for a in group]

    fired, synced = await store.fire_synced_later(firing(alerts[:1]))
    await synced
    assert [f.alert.id for f in fired] == [alerts[0].id] and db.loop_writer.transactions == 1
    rest = alerts[1:]
    assert len(rest) > LOOP_TRANSACTION_MAX_ITEMS
    fired, synced = await store.fire_synced_later(firing(rest))
    await synced
    assert len(fired) == len(rest) and db.loop_writer.transactions == 1  # that one ran on the database thread
    assert [f.push_seq for f in fired] == list(range(2, len(alerts) + 1))
    assert await db.fetchall("SELECT id FROM alerts") == []
