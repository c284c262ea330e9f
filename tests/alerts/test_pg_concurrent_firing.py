"""Exactly-once firing with several writers on one PostgreSQL database (alerts/pg_store.py).

Each "process" is a :class:`PgAlertStore` with a pool of its own (separate server sessions, as
separate processes would have); they fire overlapping sets of alerts at once while others are
cancelled.  Whatever the interleaving, every alert ends exactly once, each fired alert has one
notification and, for a subscribed owner, one push frame whose sequence numbers run 1, 2, 3 …
without a repeat, and one outbox row per notification channel it goes to.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

import pytest

from alerts.models import Subscription
from alerts.outbox_store import ChannelRouting
from alerts.pg_store import PG_MIGRATIONS, PgAlertStore
from alerts.store import QueueLimits
from storage import PostgresDatabase
from tests.alerts.test_store import alert, firing

pytestmark = [pytest.mark.servers, pytest.mark.process]

WRITERS = 4
ROUTING = ChannelRouting(known=frozenset({"ops", "phone"}), all_principals=("ops",))
ALERTS = 400


async def _stores(postgres: Any, n: int) -> tuple[list[PostgresDatabase], list[PgAlertStore]]:
    dsn = await postgres.new_database()
    dbs = [await PostgresDatabase.open(dsn, min_size=1, max_size=4) for _ in range(n)]
    await asyncio.gather(*(db.migrate([PG_MIGRATIONS]) for db in dbs))  # concurrent starts migrate once
    limits = QueueLimits(push_cap=100_000, push_ttl_s=3600.0, poll_cap=100_000)
    return dbs, [PgAlertStore(db, limits, ROUTING) for db in dbs]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_overlapping_firings_from_several_writers_fire_each_alert_once(postgres: Any, seed: int) -> None:
    dbs, stores = await _stores(postgres, WRITERS)
    try:
        rng = random.Random(seed)
        principals = ["p0", "p1", "p2"]
        for p in principals[:2]:
            own = ("phone",) if p == "p0" else None
            await stores[0].subscribe(Subscription(principal=p, channels=own), time.time())
        alerts = [alert(principals[i % 3], 100.0 + i) for i in range(ALERTS)]
        await stores[0].insert_many(alerts)
        cancelled_ids = {a.id for a in rng.sample(alerts, 40)}

        async def writer(store: PgAlertStore, batches: list[list[Any]]) -> list[str]:
            fired: list[str] = []
            for batch in batches:
                fired += [f.alert.id for f in await store.fire([firing(a) for a in batch])]
            return fired

        plans = []
        for _ in range(WRITERS):
            order = rng.sample(alerts, len(alerts))  # every writer tries every alert, in its own order
            batches = []
            while order:
                size = rng.randint(1, 25)
                batches.append(order[:size])
                order = order[size:]
            plans.append(batches)

        async def canceller() -> list[str]:
            done = []
            for a in alerts:
                if a.id in cancelled_ids and await stores[-1].remove(None, a.id, "cancelled", time.time()) is not None:
                    done.append(a.id)
            return done

        *fired_lists, cancelled = await asyncio.gather(
            *(writer(s, p) for s, p in zip(stores, plans, strict=True)), canceller()
        )
        fired = Counter(aid for lst in fired_lists for aid in lst)
        assert max(fired.values()) == 1, "an alert fired twice"
        assert set(fired) | set(cancelled) == {a.id for a in alerts}
        assert not set(fired) & set(cancelled)
        db = dbs[0]
        assert await db.fetchval("SELECT COUNT(*) FROM alerts") == 0
        outcomes = dict(await db.fetch("SELECT outcome, COUNT(*) FROM alert_events GROUP BY outcome"))
        assert outcomes.get("fired") == len(fired) and outcomes.get("cancelled", 0) == len(cancelled)
        assert await db.fetchval("SELECT COUNT(*) FROM notifications") == len(fired)
        by_owner = {a.id: a.principal for a in alerts}
        for p in principals:
            seqs = [r["seq"] for r in await db.fetch("SELECT seq FROM push_queue WHERE principal = $1 ORDER BY seq", p)]
            expected = sum(1 for aid in fired if by_owner[aid] == p) if p != "p2" else 0
            assert seqs == list(range(1, expected + 1)), p
            drained = [n["alert_id"] for n in await stores[1].drain(p)]
            assert sorted(drained) == sorted(aid for aid in fired if by_owner[aid] == p)
        rows = Counter((r["channel"], r["notification_id"]) for r in await db.fetch("SELECT * FROM outbox"))
        assert max(rows.values()) == 1
        assert set(rows) == {("ops", aid) for aid in fired} | {("phone", aid) for aid in fired if by_owner[aid] == "p0"}
    finally:
        await asyncio.gather(*(db.close() for db in dbs))


async def test_a_rolled_back_firing_leaves_every_alert_armed(postgres: Any) -> None:
    """A firing transaction that fails after removing its alerts (a crash, a lost connection) undoes
    everything; the next firing fires them, once."""
    dbs, (store,) = await _stores(postgres, 1)
    try:
        alerts = [alert("a", 10.0 + i) for i in range(5)]
        await store.insert_many(alerts)
        with pytest.raises(RuntimeError, match="crash"):
            async with dbs[0].transaction() as conn:
                assert len(await store._fire_tx(conn, [firing(a) for a in alerts])) == 5
                raise RuntimeError("crash before commit")
        assert await store.count_of("a") == 5 and await store.drain("a") == []
        assert [f.alert.id for f in await store.fire([firing(a) for a in alerts])] == [a.id for a in alerts]
        assert await store.fire([firing(a) for a in alerts]) == []
    finally:
        await dbs[0].close()


async def test_postgres_away_refuses_writes_clearly_and_nothing_is_lost() -> None:
    """The server stopped: setting and firing alerts raise StorageUnavailable naming what was not done
    (and never the password); back on the same port, the pool reconnects by itself and the same
    firing fires each alert once."""
    from storage import StorageUnavailable
    from testkit.postgres import postgres_server

    own = postgres_server()  # a server of its own: this test stops it
    server = await asyncio.to_thread(own.__enter__)
    try:
        db = await PostgresDatabase.open(await server.new_database(), min_size=1, max_size=2)
        try:
            await db.migrate([PG_MIGRATIONS])
            store = PgAlertStore(db)
            armed = [alert("a", 10.0 + i) for i in range(3)]
            await store.insert_many(armed)
            await asyncio.to_thread(server.stop)
            with pytest.raises(StorageUnavailable, match="alert not set"):
                await store.insert_capped(alert("a", 99.0), 100)
            with pytest.raises(StorageUnavailable, match="firing not confirmed") as refused:
                await store.fire([firing(a) for a in armed])
            assert "postgres_dsn=postgresql://" in str(refused.value)
            await asyncio.to_thread(server.start)
            fired = await store.fire([firing(a) for a in armed])
            assert [f.alert.id for f in fired] == [a.id for a in armed]
            assert await store.fire([firing(a) for a in armed]) == []
            assert [n["alert_id"] for n in await store.drain("a")] == [a.id for a in armed]
        finally:
            await db.close()
    finally:
        await asyncio.to_thread(own.__exit__, None, None, None)
