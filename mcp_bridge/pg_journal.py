"""The agents' event journal on PostgreSQL, for the cluster's fronts: the operations and rules of
:class:`mcp_bridge.journal_store.JournalStore` (SQLite) on a table every front shares, so a client
reads back at any front what it logged at another.

The same rules: a principal reads only its own events; ``(principal, tool_call_id)`` is unique, so
a retried ``log_event`` — at the same front or another, even at the same moment — returns the first
event instead of writing a second one (``INSERT … ON CONFLICT DO NOTHING``: a concurrent insert of
the same key waits for the first to commit, then does nothing, and the read that follows sees the
committed row); the same count and byte limits (:class:`~mcp_bridge.journal_store.JournalLimits`),
kept incrementally in ``journal_usage`` / ``journal_total``, oldest first out, the insert, the
accounting and the pruning in one transaction.  Every insert that logs a new event takes the
``journal_total`` row lock before it touches a usage row or drops anything, so concurrent
inserts at several fronts are accounted one after the other (no lost update, no lock-order
deadlock).  Times are Unix seconds, as in SQLite.
PostgreSQL away: :class:`~storage.postgres.StorageUnavailable` naming what was not done.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from mcp_bridge.journal_store import (
    COLUMNS,
    EVENT_TYPES,
    MAX_EVENTS_PER_PRINCIPAL,
    PRUNE_BATCH,
    SEVERITIES,
    Dropped,
    DropPlan,
    EventFilter,
    JournalEvent,
    JournalLimits,
    event_of,
    event_size,
)
from storage import Migrations, PostgresDatabase, unreachable_as

PG_JOURNAL_MIGRATIONS = Migrations(
    "journal",
    (
        (
            1,
            f"""
            CREATE TABLE journal_events (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                event_id TEXT NOT NULL UNIQUE,
                principal TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                event_type TEXT NOT NULL CHECK (event_type IN {EVENT_TYPES!r}),
                severity TEXT NOT NULL CHECK (severity IN {SEVERITIES!r}),
                data TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL,
                UNIQUE (principal, tool_call_id)
            );
            CREATE INDEX journal_events_principal ON journal_events (principal, seq)
            """,
        ),
        (
            2,
            """
            ALTER TABLE journal_events ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
            UPDATE journal_events SET size = octet_length(data) + octet_length(tool_call_id);
            CREATE TABLE journal_usage (
                principal TEXT PRIMARY KEY,
                events BIGINT NOT NULL,
                bytes BIGINT NOT NULL,
                dropped_events BIGINT NOT NULL DEFAULT 0,
                dropped_bytes BIGINT NOT NULL DEFAULT 0,
                dropped_newest_at DOUBLE PRECISION
            );
            INSERT INTO journal_usage (principal, events, bytes)
                SELECT principal, count(*), sum(size) FROM journal_events GROUP BY principal;
            CREATE TABLE journal_total (id INTEGER PRIMARY KEY CHECK (id = 1), bytes BIGINT NOT NULL);
            INSERT INTO journal_total (id, bytes) SELECT 1, coalesce(sum(size), 0) FROM journal_events
            """,
        ),
    ),
)


class PgJournalStore:
    """Writes and reads journal events in the cluster's PostgreSQL; every call is scoped to one principal."""

    def __init__(
        self,
        db: PostgresDatabase,
        *,
        max_per_principal: int = MAX_EVENTS_PER_PRINCIPAL,
        limits: JournalLimits | None = None,
    ) -> None:
        self._db = db
        self._limits = limits or JournalLimits(max_events_per_principal=max_per_principal)

    async def log(
        self, principal: str, tool_call_id: str, event_type: str, severity: str, data: dict[str, Any]
    ) -> tuple[JournalEvent, bool]:
        """The stored event and whether this call wrote it (False: the same tool_call_id was logged before).

        A new event is counted and the oldest events over the limits are dropped in the same transaction."""
        body = json.dumps(data, separators=(",", ":"), sort_keys=True)
        size = event_size(tool_call_id, body)
        with unreachable_as("event not logged", self._db.where):
            async with self._db.transaction() as conn:
                seq = await conn.fetchval(
                    "INSERT INTO journal_events"
                    " (event_id, principal, tool_call_id, event_type, severity, data, at, size)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (principal, tool_call_id) DO NOTHING"
                    " RETURNING seq",
                    f"evt_{secrets.token_hex(8)}",
                    principal,
                    tool_call_id,
                    event_type,
                    severity,
                    body,
                    time.time(),
                    size,
                )
                created = seq is not None
                if created:
                    await self._account_and_prune(conn, principal, seq, size)
                row = await conn.fetchrow(
                    f"SELECT {COLUMNS} FROM journal_events WHERE principal = $1 AND tool_call_id = $2",
                    principal,
                    tool_call_id,
                )
        assert row is not None
        return event_of(row), created

    async def _account_and_prune(self, conn: Any, principal: str, seq: int, size: int) -> None:
        """Count the new event ``seq`` and drop the oldest events over the limits (never the new one).

        Oldest by ``seq`` among the committed events, whether their seq is above or below the new one's:
        an insert that waited for the total's lock may hold a smaller seq than events committed meanwhile."""
        limits = self._limits
        # the total's row lock first: it orders every journal insert of the cluster (see the module)
        total = await conn.fetchval("UPDATE journal_total SET bytes = bytes + $1 WHERE id = 1 RETURNING bytes", size)
        usage = await conn.fetchrow(
            "INSERT INTO journal_usage (principal, events, bytes) VALUES ($1, 1, $2) ON CONFLICT (principal)"
            " DO UPDATE SET events = journal_usage.events + 1, bytes = journal_usage.bytes + excluded.bytes"
            " RETURNING events, bytes",
            principal,
            size,
        )
        own = DropPlan(
            usage["events"] - limits.max_events_per_principal, usage["bytes"] - limits.max_bytes_per_principal
        )
        after = 0
        while not own.done:
            rows = await conn.fetch(
                "SELECT seq, principal, size, at FROM journal_events WHERE principal = $1 AND seq > $2 AND seq <> $3"
                " ORDER BY seq LIMIT $4",
                principal,
                after,
                seq,
                PRUNE_BATCH,
            )
            if not rows:
                break
            own.take([tuple(r) for r in rows])
            after = rows[-1]["seq"]
        if own.seqs:
            await conn.execute("DELETE FROM journal_events WHERE seq = ANY($1::bigint[])", own.seqs)
            await _record_drops(conn, own)
            total -= own.bytes
        everyone = DropPlan(0, total - limits.max_bytes)
        after = 0
        while not everyone.done:
            rows = await conn.fetch(
                "SELECT seq, principal, size, at FROM journal_events WHERE seq > $1 AND seq <> $2"
                " ORDER BY seq LIMIT $3",
                after,
                seq,
                PRUNE_BATCH,
            )
            if not rows:
                break
            everyone.take([tuple(r) for r in rows])
            after = rows[-1]["seq"]
        if everyone.seqs:
            await conn.execute("DELETE FROM journal_events WHERE seq = ANY($1::bigint[])", everyone.seqs)
            await _record_drops(conn, everyone)

    async def dropped(self, principal: str) -> Dropped:
        """What the limits have removed of the principal's events so far."""
        with unreachable_as("journal usage not read", self._db.where):
            row = await self._db.fetchrow(
                "SELECT dropped_events, dropped_bytes, dropped_newest_at FROM journal_usage WHERE principal = $1",
                principal,
            )
        return Dropped() if row is None else Dropped(row[0], row[1], row[2])

    async def events(self, principal: str, flt: EventFilter) -> list[JournalEvent]:
        """The principal's events matching ``flt``, newest first."""
        with unreachable_as("events not read", self._db.where):
            rows = await self._db.fetch(
                f"SELECT {COLUMNS} FROM journal_events WHERE principal = $1"
                " AND (cardinality($2::text[]) = 0 OR event_type = ANY($2::text[]))"
                " AND (cardinality($3::text[]) = 0 OR severity = ANY($3::text[]))"
                " AND ($4::double precision IS NULL OR at >= $4) AND ($5::double precision IS NULL OR at <= $5)"
                " ORDER BY seq DESC LIMIT $6",
                principal,
                list(flt.event_types),
                list(flt.severities),
                flt.since,
                flt.until,
                flt.limit,
            )
        return [event_of(r) for r in rows]


async def _record_drops(conn: Any, plan: DropPlan) -> None:
    """Take the dropped events off the usage rows and the total, and count them as dropped."""
    for principal, gone in plan.per_principal.items():
        await conn.execute(
            "UPDATE journal_usage SET events = events - $1, bytes = bytes - $2, dropped_events = dropped_events + $1,"
            " dropped_bytes = dropped_bytes + $2,"
            " dropped_newest_at = greatest(coalesce(dropped_newest_at, 0), $3) WHERE principal = $4",
            gone.events,
            gone.bytes,
            gone.newest_at,
            principal,
        )
    await conn.execute("UPDATE journal_total SET bytes = bytes - $1 WHERE id = 1", plan.bytes)
