"""The notification outbox on PostgreSQL (asyncpg): alerts/outbox_store.py's rows and delivery side
for a cluster, where several workers fire and one process at a time delivers.

- :func:`enqueue` writes a firing's rows (:func:`~alerts.outbox_store.outbox_rows`) inside
  :meth:`~alerts.pg_store.PgAlertStore.fire`'s transaction, so a notification is in the outbox
  exactly when its alert fired, and sends ``NOTIFY chartgen_outbox`` in it: PostgreSQL delivers
  it at the commit, to whichever process delivers the channels (daemon/worker/channels.py).
- :func:`set_action` writes an alert action's final outcome into the notification's undelivered
  rows, in the transaction that makes the outcome final (alerts/pg_action_outcomes.py).
- :class:`PgOutboxStore` is the sender's :class:`~alerts.outbox_store.Outbox`: the head of a
  channel's queue (each principal's oldest rows) and its state changes, each one statement (a
  digest message's rows are marked in one).

Order: a row's id is taken when it is inserted, not when it commits, so two workers' firings
committing in the other order can let the sender read a later row before an earlier one is
visible; each is still delivered (the head is every pending row in id order, read afresh), a
receiver may see those two in commit order.  One worker's firings are in firing order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

from alerts.outbox_store import (
    COUNTS_SQL,
    HEAD_SQL,
    ChannelCounts,
    Delivery,
    OutboxRow,
    channel_counts,
    delivery_of,
)
from storage import PostgresDatabase, rowcount

OUTBOX_CHANNEL = "chartgen_outbox"
"""The ``NOTIFY`` channel a firing transaction that wrote outbox rows signals."""


async def enqueue(conn: asyncpg.Connection, rows: Sequence[OutboxRow]) -> None:
    """Insert delivery rows on ``conn`` (the caller's transaction; a repeated (channel, id) is ignored)."""
    if not rows:
        return
    await conn.execute(
        "INSERT INTO outbox (channel, notification_id, principal, payload, created_at, next_at)"
        " SELECT c, n, p, d, t, t FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[])"
        " AS x(c, n, p, d, t) ON CONFLICT (channel, notification_id) DO NOTHING",
        [r.channel for r in rows],
        [r.notification_id for r in rows],
        [r.principal for r in rows],
        [r.payload for r in rows],
        [r.created_at for r in rows],
    )
    await conn.execute("SELECT pg_notify($1, '')", OUTBOX_CHANNEL)


async def set_action(conn: asyncpg.Connection, notification_id: str, outcome: dict[str, Any]) -> None:
    """Write an action's outcome into the notification's undelivered rows (caller's transaction)."""
    for row in await conn.fetch(
        "SELECT id, payload FROM outbox WHERE notification_id = $1 AND state = 'pending' FOR UPDATE",
        notification_id,
    ):
        frame = orjson.loads(row["payload"])
        frame["params"]["action"] = outcome
        await conn.execute("UPDATE outbox SET payload = $2 WHERE id = $1", row["id"], orjson.dumps(frame).decode())


class PgOutboxStore:
    """The delivery side of the PostgreSQL outbox (an :class:`~alerts.outbox_store.Outbox`)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def head(self, channel: str, limit: int = 200) -> list[Delivery]:
        """Each principal's ``limit`` oldest pending rows of the channel, in id order (a commit is on disk
        when it returns)."""
        rows = await self.db.fetch(HEAD_SQL.format(channel="$1", limit="$2"), channel, limit)
        return [delivery_of(r) for r in rows]

    async def payload(self, row_id: int) -> str | None:
        value = await self.db.fetchval("SELECT payload FROM outbox WHERE id = $1 AND state = 'pending'", row_id)
        return None if value is None else str(value)

    async def delivered(self, row_ids: Sequence[int], now: float) -> None:
        if row_ids:
            await self.db.execute(
                "UPDATE outbox SET state = 'delivered', attempts = attempts + 1, done_at = $2, last_error = NULL"
                " WHERE id = ANY($1::bigint[]) AND state = 'pending'",
                list(row_ids),
                now,
            )

    async def retry_later(self, row_ids: Sequence[int], next_at: float, error: str) -> None:
        if row_ids:
            await self.db.execute(
                "UPDATE outbox SET attempts = attempts + 1, next_at = $2, last_error = $3"
                " WHERE id = ANY($1::bigint[]) AND state = 'pending'",
                list(row_ids),
                next_at,
                error[:500],
            )

    async def failed(self, row_ids: Sequence[int], now: float, error: str) -> None:
        if row_ids:
            await self.db.execute(
                "UPDATE outbox SET state = 'failed', done_at = $2, last_error = COALESCE(last_error, $3)"
                " WHERE id = ANY($1::bigint[]) AND state = 'pending'",
                list(row_ids),
                now,
                error[:500],
            )

    async def counts(self) -> dict[str, ChannelCounts]:
        """Per channel: pending, delivered and failed rows and the creation time of the oldest pending one."""
        return channel_counts(await self.db.fetch(COUNTS_SQL))

    async def prune(self, before: float) -> int:
        """Drop delivered and failed rows finished before ``before``; returns how many."""
        return rowcount(await self.db.execute("DELETE FROM outbox WHERE state <> 'pending' AND done_at < $1", before))
