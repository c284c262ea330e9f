"""The alert store: exactly-once firing, per-principal queues, caps, TTL and Last-Event-ID replay.

Every test runs against both implementations of alerts.repository.AlertRepository: SQLite
(alerts/store.py) and PostgreSQL (alerts/pg_store.py, on a real server: testkit/postgres.py).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.models import Alert, Firing, Subscription
from alerts.pg_store import PG_MIGRATIONS, PgAlertStore
from alerts.repository import AlertRepository
from alerts.store import AlertStore, QueueLimits
from daemon import ALL_MIGRATIONS
from storage import Database, PostgresDatabase

STORAGES = ("sqlite", pytest.param("postgres", marks=[pytest.mark.servers, pytest.mark.process]))


@contextlib.asynccontextmanager
async def open_store(kind: str, limits: QueueLimits, server: Any = None) -> AsyncIterator[AlertRepository]:
    """A fresh, migrated store of ``kind`` (``server``: the session's PostgreSQL, for "postgres")."""
    if kind == "sqlite":
        db = await Database.open(":memory:")
        await db.migrate(ALL_MIGRATIONS)
        try:
            yield AlertStore(db, limits)
        finally:
            await db.close()
        return
    pg = await PostgresDatabase.open(await server.new_database())
    await pg.migrate([PG_MIGRATIONS])
    try:
        yield PgAlertStore(pg, limits)
    finally:
        await pg.close()


@pytest.fixture(params=STORAGES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[AlertRepository]:
    server = request.getfixturevalue("postgres") if request.param == "postgres" else None
    async with open_store(request.param, QueueLimits(push_cap=3, push_ttl_s=60.0, poll_cap=4), server) as s:
        yield s


def alert(principal: str = "a", level: float = 100.0, symbol: str = "BTCUSDT") -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal=principal,
        symbol=symbol,
        interval="1h",
        kind="price_above",
        threshold=level,
        created_at=time.time(),
    )


def firing(a: Alert, at: float | None = None) -> Firing:
    return Firing(alert_id=a.id, value=(a.threshold or 0) + 1, triggered_at=at or time.time(), bar_time=None)


async def test_an_alert_fires_once_however_often_it_is_fired(store: AlertRepository) -> None:
    """A second fire of the same id (a race, a replay after restart) changes nothing."""
    a = alert()
    await store.insert(a)
    assert [f.alert.id for f in await store.fire([firing(a)])] == [a.id]
    assert await store.fire([firing(a)]) == []
    assert [n["alert_id"] for n in await store.drain("a")] == [a.id]
    assert await store.drain("a") == []
    assert await store.outcome(a.id) == "fired"


async def test_a_cancelled_alert_cannot_fire(store: AlertRepository) -> None:
    """cancel wins over a later fire; the audit records the cancellation."""
    a = alert()
    await store.insert(a)
    assert await store.remove("a", a.id, "cancelled", time.time()) is not None
    assert await store.fire([firing(a)]) == []
    assert await store.outcome(a.id) == "cancelled"


async def test_push_frames_only_for_a_matching_subscription_of_the_owner(store: AlertRepository) -> None:
    """Filters by symbol and type; another principal's subscription never receives it."""
    await store.subscribe(Subscription(principal="b", symbols=None, alert_types=None), time.time())
    await store.subscribe(Subscription(principal="a", symbols=("ETHUSDT",), alert_types=None), time.time())
    a1, a2 = alert("a", symbol="BTCUSDT"), alert("a", symbol="ETHUSDT")
    await store.insert(a1)
    await store.insert(a2)
    fired = {f.alert.id: f for f in await store.fire([firing(a1), firing(a2)])}
    assert fired[a1.id].push_seq is None and fired[a2.id].push_seq is not None
    assert [q.alert_id for q in await store.queued("a", after_seq=None, now=time.time())] == [a2.id]
    assert await store.queued("b", after_seq=None, now=time.time()) == []


async def test_caps_keep_the_newest_and_sequence_numbers_keep_rising(store: AlertRepository) -> None:
    """push_cap 3 and poll_cap 4: older entries go; seq never repeats after trimming."""
    await store.subscribe(Subscription(principal="a"), time.time())
    alerts = [alert(level=100 + i) for i in range(6)]
    for a in alerts:
        await store.insert(a)
    seqs = []
    for a in alerts:
        seqs += [f.push_seq for f in await store.fire([firing(a)])]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    queued = await store.queued("a", after_seq=None, now=time.time())
    assert [q.alert_id for q in queued] == [a.id for a in alerts[-3:]]
    assert [n["alert_id"] for n in await store.drain("a")] == [a.id for a in alerts[-4:]]


@given(
    steps=st.lists(
        st.one_of(st.integers(min_value=1, max_value=7), st.just("drain"), st.just("unsubscribe")),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("kind", STORAGES)
async def test_caps_are_cut_back_in_steps_and_never_exceeded(
    kind: str, steps: list[int | str], request: pytest.FixtureRequest
) -> None:
    """push_cap 32 and poll_cap 48 are cut back once past cap + cap/16 (34, 51): whatever
    sequence of firings (in batches), drains and unsubscribes, the queues never hold more, and
    what is kept is always the newest."""
    server = request.getfixturevalue("postgres") if kind == "postgres" else None
    async with open_store(kind, QueueLimits(push_cap=32, push_ttl_s=3600.0, poll_cap=48), server) as store:
        await store.subscribe(Subscription(principal="a"), time.time())
        polled: list[str] = []  # every alert id fired since the last drain, oldest first
        pushed: list[str] = []  # likewise for push frames since the last unsubscribe
        level = 0
        for step in steps:
            if step == "drain":
                got = [n["alert_id"] for n in await store.drain("a")]
                assert got == polled[-len(got) :] and len(got) >= min(len(polled), 48)
                polled = []
                continue
            if step == "unsubscribe":
                await store.unsubscribe("a")
                await store.subscribe(Subscription(principal="a"), time.time())
                pushed = []
                continue
            batch = [alert(level=1000 + level + i) for i in range(int(step))]
            level += int(step)
            await store.insert_many(batch)
            await store.fire([firing(a) for a in batch])
            polled += [a.id for a in batch]
            pushed += [a.id for a in batch]
            kept_frames = [q.alert_id for q in await store.queued("a", after_seq=None, now=time.time())]
            assert len(kept_frames) <= 34
            assert kept_frames == pushed[-len(kept_frames) :] and len(kept_frames) >= min(len(pushed), 32)
            assert await store.poll_queue_size("a") <= 51


async def test_ttl_expires_offline_frames_and_sweep_deletes_them(store: AlertRepository) -> None:
    """A frame older than push_ttl_s is neither replayed nor counted, and sweep removes it."""
    await store.subscribe(Subscription(principal="a"), time.time())
    old, new = alert(level=1), alert(level=2)
    await store.insert(old)
    await store.insert(new)
    await store.fire([firing(old, at=time.time() - 120)])
    await store.fire([firing(new)])
    now = time.time()
    assert [q.alert_id for q in await store.queued("a", after_seq=None, now=now)] == [new.id]
    assert await store.offline_size("a", now) == 1
    assert await store.sweep(now) == 1


async def test_last_event_id_replays_delivered_frames_after_it(store: AlertRepository) -> None:
    """Undelivered-only without Last-Event-ID; everything after the id with it."""
    await store.subscribe(Subscription(principal="a"), time.time())
    alerts = [alert(level=10 + i) for i in range(3)]
    for a in alerts:
        await store.insert(a)
    fired = await store.fire([firing(a) for a in alerts])
    seqs = [f.push_seq for f in fired]
    await store.mark_delivered("a", seqs)
    now = time.time()
    assert await store.queued("a", after_seq=None, now=now) == []
    assert [q.seq for q in await store.queued("a", after_seq=seqs[0], now=now)] == seqs[1:]


async def test_unsubscribe_drops_the_queue(store: AlertRepository) -> None:
    """unsubscribe removes the subscription and its pending frames; a second call finds nothing."""
    await store.subscribe(Subscription(principal="a"), time.time())
    a = alert()
    await store.insert(a)
    await store.fire([firing(a)])
    assert await store.unsubscribe("a") is True
    assert await store.queued("a", after_seq=0, now=time.time()) == []
    assert await store.unsubscribe("a") is False


async def test_concurrent_inserts_never_take_an_owner_past_the_cap(store: AlertRepository) -> None:
    import asyncio

    results = await asyncio.gather(*(store.insert_capped(alert("capped", 100.0 + i), 3) for i in range(12)))
    assert sorted(results) == [False] * 9 + [True] * 3
    assert await store.count_of("capped") == 3
    assert await store.insert_capped(alert("other"), 3)  # the cap is per owner
