"""Notification channels on a cluster: the outbox on PostgreSQL (alerts/pg_outbox.py) and its one
deliverer at a time (daemon/worker/channels.py).

The single node's delivery tests (tests/alerts/test_outbox_delivery.py) and rate, digest and
refusal tests (tests/alerts/test_channels_rate.py) run unchanged on the PostgreSQL outbox; here
besides: rows are written by the firing transaction, once, with the owner's
own channels when its subscription matches; an action's final outcome reaches the undelivered rows;
two workers competing for the channel lease deliver each notification once between them; a holder
that dies is replaced and nothing is lost; a holder past its lease's local deadline sends nothing."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from alerts import (
    OUTBOX_CHANNEL,
    ChannelRouting,
    Outbox,
    OutboxRow,
    OutboxSender,
    PgActionOutcomes,
    PgAlertStore,
    PgOutboxStore,
    Subscription,
    enqueue,
    set_action,
)
from config import Settings, WebhookChannel
from daemon import LEASE_NAME, ChannelDelivery
from storage import PostgresDatabase
from testkit.channel_receivers import Receiver
from testkit.workers import until
from tests.alerts.test_channels_rate import (  # noqa: F401 - collected here with the PostgreSQL outbox
    test_a_failed_digest_leaves_every_row_pending_then_marks_them_together,
    test_a_flood_goes_as_digests_at_the_channel_rate_nothing_dropped_or_doubled,
    test_a_private_address_is_refused_at_connect_unless_allowed,
    test_a_redirect_fails_at_once_and_the_next_row_goes,
    test_a_telegram_digest_fits_one_message,
    test_another_principal_is_not_delayed_behind_a_flood,
)
from tests.alerts.test_outbox_delivery import (  # noqa: F401 - collected here with the PostgreSQL outbox
    FAILED_SQL,
    clock,
    receivers,
    test_a_receiver_down_for_an_hour_gets_everything_afterwards,
    test_an_action_alert_waits_for_its_order_outcome,
    test_every_notification_reaches_every_channel_once_or_more_in_order,
    test_retry_after_is_honoured,
    test_rows_past_the_age_limit_are_marked_failed_and_the_next_ones_go,
    test_wake_delivers_new_rows_without_polling,
)
from tests.alerts.test_outbox_routing import alert, firing

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.timeout(120)]
ROUTING = ChannelRouting(known=frozenset({"ops", "phone"}), all_principals=("ops",))


class PgOutbox:
    """What the delivery tests do to the outbox, on PostgreSQL."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    def alert_store(self, routing: ChannelRouting) -> Any:
        return PgAlertStore(self.db, routing=routing)

    def outbox(self) -> Outbox:
        return PgOutboxStore(self.db)

    async def failed(self) -> list[tuple[str, str]]:
        return [(r["notification_id"], r["last_error"]) for r in await self.db.fetch(FAILED_SQL)]

    async def enqueue(self, row: OutboxRow) -> None:
        async with self.db.transaction() as conn:
            await enqueue(conn, [row])

    async def set_action(self, alert_id: str, outcome: dict[str, object]) -> None:
        async with self.db.transaction() as conn:
            await set_action(conn, alert_id, outcome)

    @contextlib.asynccontextmanager
    async def waking(self, store: Any, sender: OutboxSender) -> AsyncIterator[None]:
        """The firing commits' ``NOTIFY chartgen_outbox`` wakes ``sender``."""
        listener = self.db.listener(OUTBOX_CHANNEL, lambda _payload: sender.wake())
        assert await listener.ensure()
        try:
            yield
        finally:
            await listener.close()


@pytest.fixture
def backend(cluster: tuple[str, PostgresDatabase]) -> PgOutbox:
    return PgOutbox(cluster[1])


async def outbox_rows(db: PostgresDatabase) -> list[tuple[str, str, str]]:
    found = await db.fetch("SELECT channel, notification_id, principal FROM outbox ORDER BY id")
    return [(r["channel"], r["notification_id"], r["principal"]) for r in found]


async def test_the_firing_writes_one_row_per_channel_once_with_the_owners_matching_channels(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    db = cluster[1]
    store = PgAlertStore(db, routing=ROUTING)
    await store.subscribe(Subscription(principal="a", symbols=("ETHUSDT",), channels=("phone",)), time.time())
    btc, eth, other = alert("a", "BTCUSDT"), alert("a", "ETHUSDT"), alert("b", "ETHUSDT")
    for a in (btc, eth, other):
        await store.insert(a)
    await asyncio.gather(store.fire([firing(btc), firing(eth)]), store.fire([firing(eth), firing(other)]))
    assert sorted(await outbox_rows(db)) == sorted(
        [("ops", btc.id, "a"), ("ops", eth.id, "a"), ("phone", eth.id, "a"), ("ops", other.id, "b")]
    )
    payload = orjson.loads(await db.fetchval("SELECT payload FROM outbox WHERE notification_id = $1", btc.id))
    assert payload["method"] == "notifications/alert_triggered" and payload["params"]["alert_id"] == btc.id
    assert await PgAlertStore(db).fire([firing(btc)]) == []  # fired once: nothing more is written
    assert len(await outbox_rows(db)) == 4


async def test_without_channels_nothing_is_written(cluster: tuple[str, PostgresDatabase]) -> None:
    db = cluster[1]
    store = PgAlertStore(db)
    a = alert()
    await store.insert(a)
    assert len(await store.fire([firing(a)])) == 1
    assert await outbox_rows(db) == []


async def test_an_action_outcome_made_final_reaches_the_undelivered_rows(cluster: tuple[str, PostgresDatabase]) -> None:
    db = cluster[1]
    store = PgAlertStore(db, routing=ROUTING)
    a = alert()
    await store.insert(a)
    await store.fire([firing(a)])
    await db.execute(
        "INSERT INTO alert_actions (alert_id, principal, client_order_id, state, outcome, at)"
        " VALUES ($1, 'a', 'cid', 'pending', '{}', 0)",
        a.id,
    )
    await PgActionOutcomes(store).record(a.id, {"type": "place_order", "status": "FILLED", "order_id": "cid"})
    payload = orjson.loads(await db.fetchval("SELECT payload FROM outbox"))
    assert payload["params"]["action"]["status"] == "FILLED"


def channel_settings(receiver: Receiver) -> Settings:
    return Settings(
        channels={
            "ops": WebhookChannel(  # a rate that never coalesces: these tests are about the lease
                kind="webhook",
                url=receiver.url,
                secret="s",
                timeout_s=2.0,
                allow_private_address=True,
                max_per_minute=60_000,
            )
        },
        notify_all_channels=["ops"],
    )


async def test_one_worker_delivers_at_a_time_and_a_dead_holder_is_replaced(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    dsn, db = cluster
    receiver = await Receiver("webhook", clock=time.time).start()
    pools = [await PostgresDatabase.open(dsn, min_size=1, max_size=4) for _ in range(2)]
    workers = [ChannelDelivery(p, channel_settings(receiver), f"worker-{i}", ttl_s=1.5) for i, p in enumerate(pools)]
    stores = [PgAlertStore(p, routing=ChannelRouting(known=frozenset({"ops"}), all_principals=("ops",))) for p in pools]
    try:
        await asyncio.gather(*(w.step() for w in workers))
        assert sorted(w.delivering for w in workers) == [False, True]
        holder, standby = (workers[0], workers[1]) if workers[0].delivering else (workers[1], workers[0])
        fired: list[str] = []

        async def fire(n: int, start: int) -> None:
            for i in range(start, start + n):
                a = alert(f"p{i % 3}")
                await stores[i % 2].insert(a)
                await stores[(i + 1) % 2].fire([firing(a)])  # fired by the other worker than set it
                fired.append(a.id)

        await fire(20, 0)
        await until(lambda: _delivered(receiver, fired), 30)
        assert sorted(r.key for r in receiver.requests) == sorted(fired)  # each once: the standby sent nothing
        await standby.step()
        assert not standby.delivering

        # The holder dies (no release: its lease runs out); firings meanwhile wait in the outbox.
        assert holder._task is not None
        holder._task.cancel()
        await asyncio.gather(holder._task, return_exceptions=True)
        await holder.listener.close()
        await fire(10, 20)

        async def taken() -> bool:
            await standby.step()
            return standby.delivering

        await until(taken, 30)
        await until(lambda: _delivered(receiver, fired), 30)
        assert sorted(r.key for r in receiver.requests) == sorted(fired)
        assert (await db.fetchrow("SELECT holder, token FROM cluster_leases WHERE name = $1", LEASE_NAME))[
            "holder"
        ] == standby.member_id

        async def marked() -> dict[str, Any] | None:
            # a row is marked delivered after the receiver answered: the last marks may still be on their way
            status = await standby.status()
            return status if status["channels"]["ops"]["delivered"] >= 30 else None

        status = await until(marked, 30)
        assert status["delivering"] and status["channels"]["ops"]["delivered"] == 30
        assert status["channels"]["ops"]["pending"] == 0
    finally:
        for w in workers:
            await w.close()
        for p in pools:
            await p.close()
        await receiver.close()


async def test_a_holder_past_its_local_deadline_sends_nothing(cluster: tuple[str, PostgresDatabase]) -> None:
    db = cluster[1]
    receiver = await Receiver("webhook", clock=time.time).start()
    worker = ChannelDelivery(db, channel_settings(receiver), "worker-paused", ttl_s=60.0)
    try:
        await worker.step()
        assert worker.delivering and worker.lease is not None
        worker.lease.deadline = 0.0  # as after a pause longer than the lease: it may have lapsed
        store = PgAlertStore(db, routing=ChannelRouting(known=frozenset({"ops"}), all_principals=("ops",)))
        a = alert()
        await store.insert(a)
        await store.fire([firing(a)])
        worker.sender.wake()

        async def gate_shut() -> bool:  # the sender read the row, found the gate shut and waits
            return worker.sender.states["ops"].next_attempt_at is not None

        await until(gate_shut, 30)
        assert receiver.requests == []
        assert await db.fetchval("SELECT state FROM outbox WHERE notification_id = $1", a.id) == "pending"
        await worker.step()  # renewal: the lease is still this worker's, so it sends again
        await until(lambda: _delivered(receiver, [a.id]), 30)
    finally:
        await worker.close()
        await receiver.close()
    assert await db.fetchval(
        "SELECT expires_at <= clock_timestamp() FROM cluster_leases WHERE name = $1", LEASE_NAME
    ), "a clean stop gives the lease up"


async def _delivered(receiver: Receiver, ids: list[str]) -> bool:
    return set(ids) <= {r.key for r in receiver.requests if r.ok}
