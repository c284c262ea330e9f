"""Bugs the type checker found (issue 37): GET /metrics read the notification queues through an SQLite
call, so a cluster front (alerts in PostgreSQL) answered every scrape with an AttributeError.

The queue depths now come from the alert store itself (``AlertRepository.queue_sizes``), on either
storage; a front whose PostgreSQL is away still answers, with the last depths it read.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from alerts import PG_MIGRATIONS, Alert, AlertRepository, AlertStore, Firing, PgAlertStore, QueueLimits, Subscription
from daemon.database import ALL_MIGRATIONS
from daemon.metrics import DaemonMetrics
from storage import Database, PostgresDatabase, StorageUnavailable
from tests.daemon.test_metrics import sample

STORAGES = ("sqlite", pytest.param("postgres", marks=[pytest.mark.servers, pytest.mark.process]))


@contextlib.asynccontextmanager
async def open_store(kind: str, server: Any = None) -> AsyncIterator[AlertRepository]:
    if kind == "sqlite":
        db = await Database.open(":memory:")
        await db.migrate(ALL_MIGRATIONS)
        try:
            yield AlertStore(db, QueueLimits())
        finally:
            await db.close()
        return
    pg = await PostgresDatabase.open(await server.new_database())
    await pg.migrate([PG_MIGRATIONS])
    try:
        yield PgAlertStore(pg, QueueLimits())
    finally:
        await pg.close()


class _Index:
    """The evaluator side the metrics read (a front's alert index answers the same)."""

    def status(self) -> dict[str, Any]:
        return {"active": 0, "fired": 0}


def _services(store: Any) -> Any:
    return SimpleNamespace(engine=None, alerts=SimpleNamespace(store=store, evaluator=_Index()), push=None)


def _alert(principal: str) -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal=principal,
        symbol="BTCUSDT",
        interval="1h",
        kind="price_above",
        threshold=100.0,
        created_at=time.time(),
    )


@pytest.mark.parametrize("kind", STORAGES)
async def test_metrics_count_the_queues_of_either_alert_store(kind: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("postgres") if kind == "postgres" else None
    async with open_store(kind, server) as store:
        await store.subscribe(Subscription(principal="a"), time.time())
        alerts = [_alert("a"), _alert("a"), _alert("b")]  # b has no push subscription: no frame
        for a in alerts:
            await store.insert(a)
        now = time.time()
        fired = await store.fire([Firing(alert_id=a.id, value=101.0, triggered_at=now, bar_time=None) for a in alerts])
        assert len(fired) == 3
        assert await store.queue_sizes() == (2, 3)

        metrics = DaemonMetrics(_services(store))
        text = (await metrics.render()).decode()
        assert sample(text, "chartgen_notification_queue_depth", queue="push") == 2.0
        assert sample(text, "chartgen_notification_queue_depth", queue="poll") == 3.0

        seqs = [f.push_seq for f in fired if f.push_seq is not None and f.alert.principal == "a"]
        await store.mark_delivered("a", seqs[:1])
        await store.drain("b")
        assert await store.queue_sizes() == (1, 2)


async def test_metrics_answer_with_the_last_depths_while_postgres_is_away() -> None:
    class Away:
        def __init__(self) -> None:
            self.up = True

        async def queue_sizes(self) -> tuple[int, int]:
            if not self.up:
                raise StorageUnavailable("queue sizes not read: PostgreSQL at postgres_dsn=… cannot be reached")
            return 4, 5

    store = Away()
    metrics = DaemonMetrics(_services(store))
    await metrics.render()
    store.up = False
    text = (await metrics.render()).decode()
    assert sample(text, "chartgen_notification_queue_depth", queue="push") == 4.0
    assert sample(text, "chartgen_notification_queue_depth", queue="poll") == 5.0
