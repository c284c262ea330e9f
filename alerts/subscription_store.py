"""Push subscriptions and the per-principal push queue (the SSE offline queue and replay log).

A mixin of :class:`alerts.store.AlertStore` (same database, same tables of alerts.schema): the
subscription a principal set with subscribe_notifications (filters and its own notification
channels), the frames queued for it with their SSE sequence numbers, delivered marks, TTL sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from alerts.models import Subscription
from storage import Database


@dataclass(frozen=True, slots=True)
class QueuedFrame:
    seq: int
    alert_id: str
    data: str
    enqueued_at: float


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


class SubscriptionQueries:
    """subscribe / unsubscribe / queued frames; needs ``self.db`` and ``self.limits.push_ttl_s``."""

    db: Database
    limits: Any

    async def subscribe(self, sub: Subscription, now: float) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO push_subscriptions (principal, symbols, alert_types, channels, updated_at)"
                " VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (principal) DO UPDATE SET symbols = excluded.symbols,"
                " alert_types = excluded.alert_types, channels = excluded.channels, updated_at = excluded.updated_at",
                subscription_row(sub, now),
            )

    async def unsubscribe(self, principal: str) -> bool:
        async with self.db.transaction() as tx:
            cur = await tx.execute("DELETE FROM push_subscriptions WHERE principal = ?", (principal,))
            removed = cur.rowcount > 0
            await tx.execute("DELETE FROM push_queue WHERE principal = ?", (principal,))
        return removed

    async def subscription(self, principal: str) -> Subscription | None:
        row = await self.db.fetchone("SELECT * FROM push_subscriptions WHERE principal = ?", (principal,))
        return None if row is None else subscription_of(row)

    async def queued(self, principal: str, *, after_seq: int | None, now: float) -> list[QueuedFrame]:
        """Frames to send a new stream: those after ``after_seq`` (Last-Event-ID), else the undelivered ones."""
        horizon = now - self.limits.push_ttl_s
        if after_seq is None:
            sql = (
                "SELECT seq, alert_id, frame, enqueued_at FROM push_queue"
                " WHERE principal = ? AND delivered = 0 AND enqueued_at > ? ORDER BY seq"
            )
            args: tuple[Any, ...] = (principal, horizon)
        else:
            sql = (
                "SELECT seq, alert_id, frame, enqueued_at FROM push_queue"
                " WHERE principal = ? AND seq > ? AND enqueued_at > ? ORDER BY seq"
            )
            args = (principal, after_seq, horizon)
        rows = await self.db.fetchall(sql, args)
        return [QueuedFrame(int(r["seq"]), r["alert_id"], r["frame"], float(r["enqueued_at"])) for r in rows]

    async def offline_size(self, principal: str, now: float) -> int:
        row = await self.db.fetchone(
            "SELECT COUNT(*) AS n FROM push_queue WHERE principal = ? AND delivered = 0 AND enqueued_at > ?",
            (principal, now - self.limits.push_ttl_s),
        )
        return int(row["n"]) if row is not None else 0

    async def mark_delivered(self, principal: str, seqs: Iterable[int]) -> None:
        rows = [(principal, s) for s in seqs]
        if rows:
            async with self.db.transaction() as tx:
                await tx.executemany("UPDATE push_queue SET delivered = 1 WHERE principal = ? AND seq = ?", rows)

    async def sweep(self, now: float) -> int:
        """Drop push frames older than the TTL; returns how many."""
        async with self.db.transaction() as tx:
            cur = await tx.execute("DELETE FROM push_queue WHERE enqueued_at <= ?", (now - self.limits.push_ttl_s,))
            return cur.rowcount


def subscription_row(sub: Subscription, now: float) -> tuple[Any, ...]:
    """A ``push_subscriptions`` row: principal, symbols, alert_types, channels (JSON or NULL), updated_at."""
    return (
        sub.principal,
        None if sub.symbols is None else _dumps(list(sub.symbols)),
        None if sub.alert_types is None else _dumps(list(sub.alert_types)),
        None if sub.channels is None else _dumps(list(sub.channels)),
        now,
    )


def subscription_of(row: Any) -> Subscription:
    symbols = row["symbols"]
    types = row["alert_types"]
    channels = row["channels"]
    return Subscription(
        principal=row["principal"],
        symbols=None if symbols is None else tuple(orjson.loads(symbols)),
        alert_types=None if types is None else tuple(orjson.loads(types)),
        channels=None if channels is None else tuple(orjson.loads(channels)),
    )
