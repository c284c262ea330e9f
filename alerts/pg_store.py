"""The alert store on PostgreSQL (asyncpg): the same operations as alerts/store.py's SQLite
:class:`~alerts.store.AlertStore`, safe with several processes writing one database at once.

Exactly-once across processes.  :meth:`PgAlertStore.fire` locks the alerts it fires with
``SELECT … ORDER BY id FOR UPDATE`` and removes them with ``DELETE … RETURNING`` in the
transaction that records their audit rows and queues their notifications and push frames.  A
second process firing an overlapping set waits on the row locks; when the first commits, the
rows are gone and the second fires only what is left (READ COMMITTED re-checks a locked row
after the wait).  A rolled-back firing leaves every alert in place.  Locks are always taken in
the same order (alert ids, then principals, ascending), so two firings never deadlock each
other; a deadlock or serialization failure with anything else is retried (the transaction did
nothing).

Per principal, ``principal_counters`` hands out push sequence numbers in commit order and keeps
upper bounds of the queue sizes for the caps (alerts/pg_schema.py says why a PostgreSQL
sequence would not do).  The caps behave as SQLite's: a queue is cut back to its cap once past
``QueueLimits.trim_above(cap)``.

PostgreSQL unreachable: every write raises :class:`~storage.postgres.StorageUnavailable` saying what
was not done (``alert not set``, ``firing not confirmed``, …); a transaction that did not commit
changed nothing, and one whose commit's answer was lost is found done by the next call (an alert
that fired is gone), so repeating the call once the server is back is always safe.

Alert actions: :meth:`PgAlertStore.fire` runs an *async* ``commit_action`` (a cluster worker's
records the order intent, daemon/parts/cluster_actions.py) per fired action alert inside the firing
transaction; alerts/pg_actions.py says how, and when their push frames are queued.  Notification
channels: the firing transaction writes the outbox rows (alerts/pg_outbox.py) of ``routing``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg
import orjson

from alerts.action_store import PlannedAction
from alerts.models import Alert, Firing, Subscription, notification_payload, push_frame
from alerts.outbox_store import ChannelRouting, outbox_rows
from alerts.pg_actions import PgCommitAction, commit_actions
from alerts.pg_changes import notify_gone, notify_reload, notify_set
from alerts.pg_firing_sql import RECORD as _RECORD
from alerts.pg_firing_sql import TAKE as _TAKE
from alerts.pg_outbox import enqueue as enqueue_outbox
from alerts.pg_push import by_principal, notify_pushed
from alerts.pg_schema import PG_MIGRATIONS
from alerts.store import ALERT_COLUMNS, Fired, QueueLimits, alert_of, alert_row, dumps
from alerts.subscription_store import QueuedFrame, subscription_of, subscription_row
from storage import RETRYABLE_SQLSTATES, PostgresDatabase, rowcount, unreachable_as

__all__ = ["PG_MIGRATIONS", "PgAlertStore"]

T = TypeVar("T")
_RETRIES = 5

_INSERT_ALERT = (
    "INSERT INTO alerts (id, principal, symbol, interval, kind, record, created_at, expires_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
)


class PgAlertStore:
    """Persistence of alerts, notifications and push queues in PostgreSQL (several writers)."""

    def __init__(
        self,
        db: PostgresDatabase,
        limits: QueueLimits | None = None,
        routing: ChannelRouting | None = None,
        *,
        announce_push: Callable[[dict[str, list[int]]], None] | None = None,
    ) -> None:
        self.db = db
        self.routing = routing or ChannelRouting()
        self.limits = limits or QueueLimits()
        self.announce_push = announce_push
        """None: the firing transaction announces new push frames by ``NOTIFY`` (bus = "local");
        else called after each commit with every principal's new sequence numbers (bus = "nats")."""
        self.on_enqueued: Callable[[], None] | None = None

    async def retrying(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], refused: str) -> T:
        """Run ``fn`` in a transaction, again when PostgreSQL aborted it for a deadlock or serialization;
        PostgreSQL unreachable → :class:`StorageUnavailable` ``refused`` (the transaction did nothing)."""
        for attempt in range(_RETRIES):
            try:
                with unreachable_as(refused, self.db.where):
                    async with self.db.transaction() as conn:
                        return await fn(conn)
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) not in RETRYABLE_SQLSTATES or attempt == _RETRIES - 1:
                    raise
                await asyncio.sleep(0)  # let the other transaction finish before the next attempt
        raise AssertionError("unreachable")

    # --- alerts ----------------------------------------------------------------------
    async def insert(self, alert: Alert) -> None:
        async def insert(conn: asyncpg.Connection) -> None:
            await conn.execute(_INSERT_ALERT, *alert_row(alert))
            await notify_set(conn, alert)

        await self.retrying(insert, "alert not set")

    async def insert_capped(self, alert: Alert, max_per_principal: int) -> bool:
        """Insert unless the owner already has ``max_per_principal`` active alerts.

        A per-owner advisory lock around count + insert: no two processes can take an owner past
        the cap.  Returns False (nothing written) when at the cap."""

        async def insert(conn: asyncpg.Connection) -> bool:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('alerts/' || $1, 0))", alert.principal)
            n = await conn.fetchval("SELECT COUNT(*) FROM alerts WHERE principal = $1", alert.principal)
            if n >= max_per_principal:
                return False
            await conn.execute(_INSERT_ALERT, *alert_row(alert))
            await notify_set(conn, alert)
            return True

        return await self.retrying(insert, "alert not set")

    async def insert_many(self, alerts: Sequence[Alert]) -> None:
        """Bulk insert (benchmarks, imports): one COPY in one transaction."""
        async with self.db.transaction() as conn:
            await conn.copy_records_to_table("alerts", records=[alert_row(a) for a in alerts], columns=ALERT_COLUMNS)
            await notify_reload(conn)

    async def active_batches(self, size: int = 10_000) -> AsyncIterator[list[Alert]]:
        after = ""
        while True:
            rows = await self.db.fetch("SELECT id, record FROM alerts WHERE id > $1 ORDER BY id LIMIT $2", after, size)
            if not rows:
                return
            yield [alert_of(r["record"]) for r in rows]
            after = rows[-1]["id"]

    async def active_in(self, markets: Iterable[tuple[str, str]]) -> list[Alert]:
        """The armed alerts of these (symbol, interval) markets (a cluster worker's share)."""
        pairs = list(markets)
        symbols, intervals = zip(*pairs, strict=True) if pairs else ((), ())
        rows = await self.db.fetch(
            "SELECT a.record FROM alerts a JOIN unnest($1::text[], $2::text[]) AS m(symbol, interval)"
            " ON a.symbol = m.symbol AND a.interval = m.interval",
            list(symbols),
            list(intervals),
        )
        return [alert_of(r["record"]) for r in rows]

    async def active(self) -> list[Alert]:
        return [alert_of(r["record"]) for r in await self.db.fetch("SELECT record FROM alerts ORDER BY created_at")]

    async def of_principal(self, principal: str) -> list[Alert]:
        rows = await self.db.fetch("SELECT record FROM alerts WHERE principal = $1 ORDER BY created_at", principal)
        return [alert_of(r["record"]) for r in rows]

    async def count_of(self, principal: str) -> int:
        return int(await self.db.fetchval("SELECT COUNT(*) FROM alerts WHERE principal = $1", principal))

    async def remove(self, principal: str | None, alert_id: str, outcome: str, now: float) -> Alert | None:
        """Cancel or expire one alert (``principal`` None = any owner); None if it is not active."""

        async def remove(conn: asyncpg.Connection) -> Alert | None:
            if principal is None:
                record = await conn.fetchval("DELETE FROM alerts WHERE id = $1 RETURNING record", alert_id)
            else:
                record = await conn.fetchval(
                    "DELETE FROM alerts WHERE id = $1 AND principal = $2 RETURNING record", alert_id, principal
                )
            if record is None:
                return None
            alert = alert_of(record)
            await conn.execute(
                "INSERT INTO alert_events (alert_id, principal, outcome, at, record) VALUES ($1, $2, $3, $4, $5)"
                " ON CONFLICT (alert_id) DO NOTHING",
                alert.id,
                alert.principal,
                outcome,
                now,
                record,
            )
            await notify_gone(conn, alert)
            return alert

        return await self.retrying(remove, f"alert {alert_id} not {outcome}")

    async def expired(self, now: float) -> list[str]:
        rows = await self.db.fetch("SELECT id FROM alerts WHERE expires_at IS NOT NULL AND expires_at <= $1", now)
        return [r["id"] for r in rows]

    async def outcome(self, alert_id: str) -> str | None:
        value = await self.db.fetchval("SELECT outcome FROM alert_events WHERE alert_id = $1", alert_id)
        return None if value is None else str(value)

    # --- firing ----------------------------------------------------------------------
    async def fire(
        self,
        firings: Sequence[Firing],
        plans: Mapping[str, PlannedAction] | None = None,
        commit_action: PgCommitAction | None = None,
    ) -> list[Fired]:
        """Fire every alert of ``firings`` still active, atomically and once across processes; returns
        what fired, in the order given.  Commits are durable when this returns (PostgreSQL's default)."""
        if not firings:
            return []
        fired = await self.retrying(
            lambda conn: self._fire_tx(conn, firings, plans or {}, commit_action),
            "firing not confirmed: fire again once PostgreSQL is back (an alert fires at most once)",
        )
        if self.announce_push is not None and (seqs := by_principal((f.alert.principal, f.push_seq) for f in fired)):
            self.announce_push(seqs)
        return fired

    async def fire_synced_later(self, firings: Sequence[Firing]) -> tuple[list[Fired], asyncio.Future[None]]:
        """:meth:`fire`: a PostgreSQL commit is already on disk, so the second value is done."""
        fired = await self.fire(firings)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return fired, done

    def wake_senders(self, fired: Sequence[Fired]) -> None:
        """Nothing to do: the firing transaction's ``NOTIFY chartgen_outbox`` wakes the sender."""

    async def _fire_tx(
        self,
        conn: asyncpg.Connection,
        firings: Sequence[Firing],
        plans: Mapping[str, PlannedAction] | None = None,
        commit_action: PgCommitAction | None = None,
    ) -> list[Fired]:
        """The firing transaction: :data:`_TAKE`, the actions' intents, then :data:`_RECORD`."""
        by_id = {f.alert_id: f for f in firings}
        rows = await conn.fetch(_TAKE, sorted(by_id))
        if not rows:
            return []
        records = {r["id"]: r["record"] for r in rows}
        subs = {r["principal"]: subscription_of(r) for r in rows if r["subscribed"]}
        live = [aid for aid in by_id if aid in records]
        alerts = {aid: alert_of(records[aid]) for aid in live}
        principals = sorted({a.principal for a in alerts.values()})
        with_action = {aid: alerts[aid] for aid in live if alerts[aid].action is not None}
        actions = await commit_actions(
            conn, with_action, plans or {}, commit_action, max(f.triggered_at for f in firings)
        )
        pushed = [
            aid
            for aid in live
            if (s := subs.get(alerts[aid].principal)) is not None
            and s.matches(alerts[aid])
            and actions.get(aid, {}).get("status") != "Pending"  # its frame waits for the outcome
        ]
        pushes = dict.fromkeys(principals, 0)
        for aid in pushed:
            pushes[alerts[aid].principal] += 1
        polls = dict.fromkeys(principals, 0)
        for aid in live:
            polls[alerts[aid].principal] += 1
        now = max(f.triggered_at for f in firings)
        frames = {aid: dumps(push_frame(alerts[aid], by_id[aid], actions.get(aid))) for aid in pushed}
        result = await conn.fetch(
            _RECORD,
            principals,
            [pushes[p] for p in principals],
            [polls[p] for p in principals],
            live,
            [alerts[aid].principal for aid in live],
            [by_id[aid].triggered_at for aid in live],
            [by_id[aid].value for aid in live],
            [by_id[aid].bar_time for aid in live],
            [records[aid] for aid in live],
            [dumps(notification_payload(alerts[aid], by_id[aid], actions.get(aid))) for aid in live],
            now,
            pushed,
            [frames[aid] for aid in pushed],
        )
        seqs = {r["alert_id"]: int(r["seq"]) for r in result if r["alert_id"] is not None}
        if self.announce_push is None:
            await notify_pushed(conn, by_principal((alerts[aid].principal, seq) for aid, seq in seqs.items()))
        out = [Fired(alerts[aid], by_id[aid], seqs.get(aid), frames.get(aid), actions.get(aid)) for aid in live]
        await enqueue_outbox(conn, outbox_rows(self.routing, out, subs, now, dumps))
        for r in result:
            if r["alert_id"] is None:
                await self._trim(conn, r["principal"], int(r["push_queued"]), int(r["poll_queued"]))
        return out

    async def _trim(self, conn: asyncpg.Connection, principal: str, push_queued: int, poll_queued: int) -> None:
        """Past :meth:`QueueLimits.trim_above`, keep the newest ``push_cap`` frames / ``poll_cap``
        notifications and store the recount (the counters row is locked by this transaction)."""
        limits = self.limits
        if push_queued > QueueLimits.trim_above(limits.push_cap):
            await conn.execute(
                "DELETE FROM push_queue WHERE principal = $1 AND seq <= ("
                " SELECT seq FROM push_queue WHERE principal = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2)",
                principal,
                limits.push_cap,
            )
            await conn.execute(
                "UPDATE principal_counters SET push_queued = (SELECT COUNT(*) FROM push_queue WHERE principal = $1)"
                " WHERE principal = $1",
                principal,
            )
        if poll_queued > QueueLimits.trim_above(limits.poll_cap):
            await conn.execute(
                "DELETE FROM notifications WHERE principal = $1 AND id <= ("
                " SELECT id FROM notifications WHERE principal = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
                principal,
                limits.poll_cap,
            )
            await conn.execute(
                "UPDATE principal_counters SET poll_queued = (SELECT COUNT(*) FROM notifications WHERE principal = $1)"
                " WHERE principal = $1",
                principal,
            )

    # --- poll queue --------------------------------------------------------------------
    async def drain(self, principal: str) -> list[dict[str, Any]]:
        """Take every queued notification of ``principal`` (oldest first) and remove them, atomically."""
        with unreachable_as("notifications not taken", self.db.where):
            rows = await self.db.fetch(
                "DELETE FROM notifications WHERE principal = $1 RETURNING id, payload", principal
            )
        return [orjson.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["id"])]

    async def poll_queue_size(self, principal: str) -> int:
        return int(await self.db.fetchval("SELECT COUNT(*) FROM notifications WHERE principal = $1", principal))

    async def queue_sizes(self) -> tuple[int, int]:
        with unreachable_as("queue sizes not read", self.db.where):
            row = await self.db.fetchrow(
                "SELECT (SELECT COUNT(*) FROM push_queue WHERE NOT delivered) AS push,"
                " (SELECT COUNT(*) FROM notifications) AS poll"
            )
        return (int(row["push"]), int(row["poll"])) if row is not None else (0, 0)

    # --- push subscriptions and queue ---------------------------------------------------
    async def subscribe(self, sub: Subscription, now: float) -> None:
        with unreachable_as("subscription not changed", self.db.where):
            await self._subscribe(sub, now)

    async def _subscribe(self, sub: Subscription, now: float) -> None:
        await self.db.execute(
            "INSERT INTO push_subscriptions (principal, symbols, alert_types, channels, updated_at)"
            " VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT (principal) DO UPDATE SET symbols = excluded.symbols,"
            " alert_types = excluded.alert_types, channels = excluded.channels, updated_at = excluded.updated_at",
            *subscription_row(sub, now),
        )

    async def unsubscribe(self, principal: str) -> bool:
        with unreachable_as("subscription not removed", self.db.where):
            return await self._unsubscribe(principal)

    async def _unsubscribe(self, principal: str) -> bool:
        async with self.db.transaction() as conn:
            removed = rowcount(await conn.execute("DELETE FROM push_subscriptions WHERE principal = $1", principal))
            await conn.execute("DELETE FROM push_queue WHERE principal = $1", principal)
        return removed > 0

    async def subscription(self, principal: str) -> Subscription | None:
        row = await self.db.fetchrow("SELECT * FROM push_subscriptions WHERE principal = $1", principal)
        return None if row is None else subscription_of(row)

    async def queued(self, principal: str, *, after_seq: int | None, now: float) -> list[QueuedFrame]:
        """Frames to send a new stream: those after ``after_seq`` (Last-Event-ID), else the undelivered ones."""
        horizon = now - self.limits.push_ttl_s
        if after_seq is None:
            rows = await self.db.fetch(
                "SELECT seq, alert_id, frame, enqueued_at FROM push_queue"
                " WHERE principal = $1 AND NOT delivered AND enqueued_at > $2 ORDER BY seq",
                principal,
                horizon,
            )
        else:
            rows = await self.db.fetch(
                "SELECT seq, alert_id, frame, enqueued_at FROM push_queue"
                " WHERE principal = $1 AND seq > $2 AND enqueued_at > $3 ORDER BY seq",
                principal,
                after_seq,
                horizon,
            )
        return [QueuedFrame(int(r["seq"]), r["alert_id"], r["frame"], float(r["enqueued_at"])) for r in rows]

    async def offline_size(self, principal: str, now: float) -> int:
        return int(
            await self.db.fetchval(
                "SELECT COUNT(*) FROM push_queue WHERE principal = $1 AND NOT delivered AND enqueued_at > $2",
                principal,
                now - self.limits.push_ttl_s,
            )
        )

    async def mark_delivered(self, principal: str, seqs: Iterable[int]) -> None:
        wanted = list(seqs)
        if wanted:
            await self.db.execute(
                "UPDATE push_queue SET delivered = TRUE WHERE principal = $1 AND seq = ANY($2::bigint[])",
                principal,
                wanted,
            )

    async def sweep(self, now: float) -> int:
        """Drop push frames older than the TTL; returns how many."""
        return rowcount(
            await self.db.execute("DELETE FROM push_queue WHERE enqueued_at <= $1", now - self.limits.push_ttl_s)
        )
