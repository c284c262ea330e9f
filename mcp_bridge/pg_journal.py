"""The agents' event journal on PostgreSQL, for the cluster's fronts: the operations and rules of
:class:`mcp_bridge.journal_store.JournalStore` (SQLite) on a table every front shares, so a client
reads back at any front what it logged at another.

The same rules: a principal reads only its own events; ``(principal, tool_call_id)`` is unique, so
a retried ``log_event`` — at the same front or another, even at the same moment — returns the first
event instead of writing a second one (``INSERT … ON CONFLICT DO NOTHING``: a concurrent insert of
the same key waits for the first to commit, then does nothing, and the read that follows sees the
committed row); each principal keeps its newest :data:`~mcp_bridge.journal_store.MAX_EVENTS_PER_PRINCIPAL`
events, the insert and the pruning in one transaction.  Times are Unix seconds, as in SQLite.
PostgreSQL away: :class:`~config.postgres.StorageUnavailable` naming what was not done.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from config.migrations import Migrations
from config.postgres import PostgresDatabase, unreachable_as
from mcp_bridge.journal_store import (
    COLUMNS,
    EVENT_TYPES,
    MAX_EVENTS_PER_PRINCIPAL,
    SEVERITIES,
    EventFilter,
    JournalEvent,
    event_of,
)

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
    ),
)


class PgJournalStore:
    """Writes and reads journal events in the cluster's PostgreSQL; every call is scoped to one principal."""

    def __init__(self, db: PostgresDatabase, *, max_per_principal: int = MAX_EVENTS_PER_PRINCIPAL) -> None:
        self._db = db
        self._max = max_per_principal

    async def log(
        self, principal: str, tool_call_id: str, event_type: str, severity: str, data: dict[str, Any]
    ) -> tuple[JournalEvent, bool]:
        """The stored event and whether this call wrote it (False: the same tool_call_id was logged before)."""
        body = json.dumps(data, separators=(",", ":"), sort_keys=True)
        with unreachable_as("event not logged", self._db.where):
            async with self._db.transaction() as conn:
                tag = await conn.execute(
                    "INSERT INTO journal_events (event_id, principal, tool_call_id, event_type, severity, data, at)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (principal, tool_call_id) DO NOTHING",
                    f"evt_{secrets.token_hex(8)}",
                    principal,
                    tool_call_id,
                    event_type,
                    severity,
                    body,
                    time.time(),
                )
                created = tag.endswith(" 1")
                if created:
                    await conn.execute(
                        "DELETE FROM journal_events WHERE principal = $1 AND seq <= (SELECT seq FROM journal_events"
                        " WHERE principal = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2)",
                        principal,
                        self._max,
                    )
                row = await conn.fetchrow(
                    f"SELECT {COLUMNS} FROM journal_events WHERE principal = $1 AND tool_call_id = $2",
                    principal,
                    tool_call_id,
                )
        assert row is not None
        return event_of(row), created

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
