"""The alert engine's SQLite tables and every state change on them, each in one transaction.

Tables: ``alerts`` (active alerts), ``alert_events`` (audit: fired / cancelled / expired,
primary key = alert id, so an alert ends exactly once), ``notifications`` (the poll queue
of each principal, keyed by alert id), ``push_subscriptions`` and ``push_queue`` (each
principal's push frames with their SSE sequence number; undelivered ones are the offline
queue, delivered ones stay for ``Last-Event-ID`` replay until TTL or cap removes them).

:meth:`AlertStore.fire` is the heart: it removes the alerts that still exist, records
their audit rows, enqueues the poll notification and, for a matching subscription, the
push frame — all in one transaction.  An alert that is already gone (fired by an earlier
call, cancelled) is skipped, so firing is idempotent and exactly-once across crashes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from alerts.action_store import CommitAction, PlannedAction, commit_actions_in
from alerts.models import Alert, Firing, Subscription, notification_payload, push_frame
from alerts.outbox_store import ChannelRouting, enqueue_in, outbox_rows
from alerts.schema import MIGRATIONS
from alerts.subscription_store import QueuedFrame, SubscriptionQueries, subscription_of
from storage import LOOP_TRANSACTION_MAX_ITEMS, Database

__all__ = [
    "ALERT_COLUMNS",
    "MIGRATIONS",
    "AlertStore",
    "Fired",
    "QueueLimits",
    "QueuedFrame",
    "alert_of",
    "alert_row",
    "dumps",
]

_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Fired:
    """An alert that fired in a committed transaction, and its push frame if one was queued."""

    alert: Alert
    firing: Firing
    push_seq: int | None
    push_data: str | None
    action: dict[str, Any] | None = None
    """The action's provisional outcome entry (Pending with its order id, or Refused) for an action alert."""


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Bounds of the per-principal queues."""

    push_cap: int = 1000
    push_ttl_s: float = 3600.0
    poll_cap: int = 10_000

    @staticmethod
    def trim_above(cap: int) -> int:
        """The size at which a queue is cut back to ``cap``: ``cap`` plus a sixteenth of it.

        Cutting back costs a scan of ``cap`` index entries; doing it on every firing made the
        cap check 70 % of the firing transaction (1.1 of 1.6 ms for three alerts with 3,000
        notifications queued, AMD EPYC 2 cores), so a queue may hold up to cap + cap/16 entries
        between cuts (exactly ``cap`` for caps under 16).
        """
        return cap + cap // 16


def dumps(obj: Any) -> str:
    """JSON text of ``obj`` (the stored records, payloads and frames of both alert stores)."""
    return orjson.dumps(obj).decode()


def alert_of(record: str) -> Alert:
    return Alert.model_validate_json(record)


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


ALERT_COLUMNS = ("id", "principal", "symbol", "interval", "kind", "record", "created_at", "expires_at")
_INSERT_ALERT = (
    "INSERT INTO alerts (id, principal, symbol, interval, kind, record, created_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def alert_row(alert: Alert) -> tuple[Any, ...]:
    """An ``alerts`` row in :data:`ALERT_COLUMNS` order (both alert stores)."""
    return (
        alert.id,
        alert.principal,
        alert.symbol,
        alert.interval,
        alert.kind,
        alert.model_dump_json(),
        alert.created_at,
        alert.expires_at,
    )


class AlertStore(SubscriptionQueries):
    """Persistence of alerts, notifications and push queues (one database, owned tables)."""

    def __init__(self, db: Database, limits: QueueLimits | None = None, routing: ChannelRouting | None = None) -> None:
        self.db = db
        self.limits = limits or QueueLimits()
        self.routing = routing or ChannelRouting()
        self.on_enqueued: Callable[[], None] | None = None
        """Called after a firing commit that wrote outbox rows (wakes the channel sender)."""
        self._queued: dict[str, list[int]] = {}
        """Per principal, [push frames, poll notifications] queued: an upper bound, never an
        undercount (only firing adds rows; drains, sweeps and rolled-back firings leave it
        high until the next cut recounts).  Touched only inside firing transactions."""

    # --- alerts ----------------------------------------------------------------------
    async def insert(self, alert: Alert) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(_INSERT_ALERT, alert_row(alert))

    async def insert_capped(self, alert: Alert, max_per_principal: int) -> bool:
        """Insert unless the owner already has ``max_per_principal`` active alerts; one transaction, one hop.

        Counting and inserting in the same transaction means concurrent calls can never
        take an owner past the cap.  Returns False (nothing written) when at the cap.
        """
        row = alert_row(alert)

        def insert(conn: sqlite3.Connection) -> bool:
            (n,) = conn.execute("SELECT COUNT(*) FROM alerts WHERE principal = ?", (alert.principal,)).fetchone()
            if n >= max_per_principal:
                return False
            conn.execute(_INSERT_ALERT, row)
            return True

        return await self.db.run_transaction(insert)

    async def insert_many(self, alerts: Sequence[Alert]) -> None:
        """Bulk insert (benchmarks, imports): one transaction."""
        async with self.db.transaction() as tx:
            await tx.executemany(_INSERT_ALERT, [alert_row(a) for a in alerts])

    async def active_batches(self, size: int = 10_000) -> AsyncIterator[list[Alert]]:
        """Every active alert, ``size`` at a time (start-up indexing without holding all records at once)."""
        after = ""
        while True:
            rows = await self.db.fetchall(
                "SELECT id, record FROM alerts WHERE id > ? ORDER BY id LIMIT ?", (after, size)
            )
            if not rows:
                return
            yield [alert_of(r["record"]) for r in rows]
            after = rows[-1]["id"]

    async def active(self) -> list[Alert]:
        rows = await self.db.fetchall("SELECT record FROM alerts ORDER BY created_at")
        return [alert_of(r["record"]) for r in rows]

    async def of_principal(self, principal: str) -> list[Alert]:
        rows = await self.db.fetchall("SELECT record FROM alerts WHERE principal = ? ORDER BY created_at", (principal,))
        return [alert_of(r["record"]) for r in rows]

    async def count_of(self, principal: str) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) AS n FROM alerts WHERE principal = ?", (principal,))
        return int(row["n"]) if row is not None else 0

    async def remove(self, principal: str | None, alert_id: str, outcome: str, now: float) -> Alert | None:
        """Cancel or expire one alert (``principal`` None = any owner); None if it is not active."""
        async with self.db.transaction() as tx:
            sql = "SELECT record FROM alerts WHERE id = ?" + ("" if principal is None else " AND principal = ?")
            args: tuple[Any, ...] = (alert_id,) if principal is None else (alert_id, principal)
            async with tx.execute(sql, args) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            alert = alert_of(row["record"])
            await tx.execute("DELETE FROM alerts WHERE id = ?", (alert_id,))
            await tx.execute(
                "INSERT OR IGNORE INTO alert_events (alert_id, principal, outcome, at, record) VALUES (?, ?, ?, ?, ?)",
                (alert.id, alert.principal, outcome, now, row["record"]),
            )
        return alert

    async def expired(self, now: float) -> list[str]:
        rows = await self.db.fetchall("SELECT id FROM alerts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        return [r["id"] for r in rows]

    # --- firing ----------------------------------------------------------------------
    async def fire(
        self,
        firings: Sequence[Firing],
        plans: Mapping[str, PlannedAction] | None = None,
        commit_action: CommitAction | None = None,
    ) -> list[Fired]:
        """Fire every alert of ``firings`` that is still active, atomically; returns what fired, in order.

        An alert carrying an action has its order intent recorded in the same transaction
        (``plans`` from :meth:`ActionExecutor.prepare`, committed by ``commit_action``)."""
        if not firings:
            return []
        fired = await self.db.run_transaction(
            lambda conn: self._fire_sync(conn, firings, plans or {}, commit_action), durable=True
        )
        self.wake_senders(fired)
        return fired

    async def fire_synced_later(self, firings: Sequence[Firing]) -> tuple[list[Fired], asyncio.Future[None]]:
        """:meth:`fire` for alerts without an action, returning once committed, before the disk flush.

        The second value is done when the firing is on disk (``Database.run_transaction_synced_later``):
        only then may its frames be pushed and its channels woken (:meth:`wake_senders`) — a
        frame that left before a power loss undid its firing would be sent again."""
        return await self.db.run_transaction_synced_later(
            lambda conn: self._fire_sync(conn, firings, {}, None), on_loop=len(firings) <= LOOP_TRANSACTION_MAX_ITEMS
        )

    def wake_senders(self, fired: Sequence[Fired]) -> None:
        """After a durable firing: tell the channel senders their outbox has rows."""
        if fired and self.routing.known and self.on_enqueued is not None:
            self.on_enqueued()

    def _fire_sync(
        self,
        conn: sqlite3.Connection,
        firings: Sequence[Firing],
        plans: Mapping[str, PlannedAction],
        commit_action: CommitAction | None,
    ) -> list[Fired]:
        """The firing transaction (runs on the database thread; see Database.run_transaction)."""
        by_id = {f.alert_id: f for f in firings}
        order = list(by_id)
        records: dict[str, str] = {}
        for chunk in _chunks(order):
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(f"SELECT id, record FROM alerts WHERE id IN ({marks})", list(chunk)):
                records[row[0]] = row[1]
        live = [aid for aid in order if aid in records]
        if not live:
            return []
        alerts = {aid: alert_of(records[aid]) for aid in live}
        principals = sorted({a.principal for a in alerts.values()})
        subs: dict[str, Subscription] = {}
        for chunk in _chunks(principals):
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(f"SELECT * FROM push_subscriptions WHERE principal IN ({marks})", list(chunk)):
                subs[row["principal"]] = subscription_of(row)
        matched = {aid for aid in live if (s := subs.get(alerts[aid].principal)) is not None and s.matches(alerts[aid])}
        pushed = [aid for aid in live if aid in matched]
        seqs: dict[str, int] = {}
        if pushed:
            row = conn.execute(
                "UPDATE alert_counters SET value = value + ? WHERE name = 'push_seq' RETURNING value", (len(pushed),)
            ).fetchone()
            last = int(row[0])
            seqs = {aid: last - len(pushed) + 1 + i for i, aid in enumerate(pushed)}
        now = max(f.triggered_at for f in firings)
        actions = commit_actions_in(conn, alerts, plans, commit_action, now)
        out: list[Fired] = []
        for aid in live:
            a, f, act = alerts[aid], by_id[aid], actions.get(aid)
            data = dumps(push_frame(a, f, act)) if aid in seqs else None
            out.append(Fired(a, f, seqs.get(aid), data, act))
        for chunk in _chunks(live):
            marks = ",".join("?" * len(chunk))
            conn.execute(f"DELETE FROM alerts WHERE id IN ({marks})", list(chunk))
        conn.executemany(
            "INSERT INTO alert_events (alert_id, principal, outcome, at, value, bar_time, record)"
            " VALUES (?, ?, 'fired', ?, ?, ?, ?)",
            [
                (
                    x.alert.id,
                    x.alert.principal,
                    x.firing.triggered_at,
                    x.firing.value,
                    x.firing.bar_time,
                    records[x.alert.id],
                )
                for x in out
            ],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO notifications (alert_id, principal, payload, created_at) VALUES (?, ?, ?, ?)",
            [
                (x.alert.id, x.alert.principal, dumps(notification_payload(x.alert, x.firing, x.action)), now)
                for x in out
            ],
        )
        enqueue_in(conn, outbox_rows(self.routing, out, subs, now, dumps))
        if seqs:
            conn.executemany(
                "INSERT OR IGNORE INTO push_queue (seq, principal, alert_id, frame, enqueued_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(x.push_seq, x.alert.principal, x.alert.id, x.push_data, now) for x in out if x.push_seq is not None],
            )
        added: dict[str, list[int]] = {p: [0, 0] for p in principals}
        for x in out:
            counts = added[x.alert.principal]
            counts[0] += x.push_seq is not None
            counts[1] += 1
        for principal, (n_pushed, n_notified) in added.items():
            self._trim_sync(conn, principal, n_pushed, n_notified)
        return out

    def _trim_sync(self, conn: sqlite3.Connection, principal: str, pushed: int, notified: int) -> None:
        """Enforce the caps: past :meth:`QueueLimits.trim_above`, keep the newest ``push_cap``
        frames and ``poll_cap`` notifications (then recount)."""
        counts = self._queued.get(principal)
        if counts is None:
            counts = self._queued[principal] = [
                conn.execute("SELECT COUNT(*) FROM push_queue WHERE principal = ?", (principal,)).fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM notifications WHERE principal = ?", (principal,)).fetchone()[0],
            ]
        else:
            counts[0] += pushed
            counts[1] += notified
        limits = self.limits
        if counts[0] > QueueLimits.trim_above(limits.push_cap):
            conn.execute(
                "DELETE FROM push_queue WHERE principal = ? AND seq <= ("
                " SELECT seq FROM push_queue WHERE principal = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (principal, principal, limits.push_cap),
            )
            counts[0] = conn.execute("SELECT COUNT(*) FROM push_queue WHERE principal = ?", (principal,)).fetchone()[0]
        if counts[1] > QueueLimits.trim_above(limits.poll_cap):
            conn.execute(
                "DELETE FROM notifications WHERE principal = ? AND rowid <= ("
                " SELECT rowid FROM notifications WHERE principal = ? ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
                (principal, principal, limits.poll_cap),
            )
            counts[1] = conn.execute("SELECT COUNT(*) FROM notifications WHERE principal = ?", (principal,)).fetchone()[
                0
            ]

    async def outcome(self, alert_id: str) -> str | None:
        row = await self.db.fetchone("SELECT outcome FROM alert_events WHERE alert_id = ?", (alert_id,))
        return None if row is None else str(row["outcome"])

    # --- poll queue --------------------------------------------------------------------
    async def drain(self, principal: str) -> list[dict[str, Any]]:
        """Take every queued notification of ``principal`` (oldest first) and remove them, atomically."""
        async with self.db.transaction() as tx:
            async with tx.execute(
                "SELECT rowid, payload FROM notifications WHERE principal = ? ORDER BY rowid", (principal,)
            ) as cur:
                rows = list(await cur.fetchall())
            if rows:
                await tx.execute(
                    "DELETE FROM notifications WHERE principal = ? AND rowid <= ?", (principal, rows[-1][0])
                )
        return [orjson.loads(r["payload"]) for r in rows]

    async def poll_queue_size(self, principal: str) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) AS n FROM notifications WHERE principal = ?", (principal,))
        return int(row["n"]) if row is not None else 0

    async def queue_sizes(self) -> tuple[int, int]:
        row = await self.db.fetchone(
            "SELECT (SELECT COUNT(*) FROM push_queue WHERE delivered = 0) AS push,"
            " (SELECT COUNT(*) FROM notifications) AS poll",
            (),
        )
        return (int(row["push"]), int(row["poll"])) if row is not None else (0, 0)


def now_s() -> float:
    return time.time()
