"""The agents' event journal: what a client logged with ``log_event``, per principal, in SQLite.

One row per event; a principal reads back only its own.  The client's ``tool_call_id`` is
unique per principal, so a retried ``log_event`` (the answer was lost, the client sends the
same call again) returns the first event instead of writing a second one.  Each principal
keeps its newest :data:`MAX_EVENTS_PER_PRINCIPAL` events: the insert and the pruning of the
oldest happen in one transaction.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Protocol

from config.database import Database, Migrations

EVENT_TYPES = ("signal", "suggestion", "trade", "error", "alert")
SEVERITIES = ("low", "medium", "high", "critical")
MAX_EVENTS_PER_PRINCIPAL = 100_000

MIGRATIONS = Migrations(
    "journal",
    (
        (
            1,
            f"""
            CREATE TABLE journal_events (
                seq INTEGER PRIMARY KEY,
                event_id TEXT NOT NULL UNIQUE,
                principal TEXT NOT NULL,
                tool_call_id TEXT NOT NULL,
                event_type TEXT NOT NULL CHECK (event_type IN {EVENT_TYPES!r}),
                severity TEXT NOT NULL CHECK (severity IN {SEVERITIES!r}),
                data TEXT NOT NULL,
                at REAL NOT NULL,
                UNIQUE (principal, tool_call_id)
            );
            CREATE INDEX journal_events_principal ON journal_events (principal, at)
            """,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class JournalEvent:
    event_id: str
    tool_call_id: str
    event_type: str
    severity: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events ``get_events`` returns (all conditions must hold); newest first."""

    event_types: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    limit: int = 100


def event_of(row: Any) -> JournalEvent:
    """An event from a row of ``journal_events`` (SQLite's or PostgreSQL's: read by column name)."""
    return JournalEvent(
        event_id=row["event_id"],
        tool_call_id=row["tool_call_id"],
        event_type=row["event_type"],
        severity=row["severity"],
        data=json.loads(row["data"]),
        at=float(row["at"]),
    )


COLUMNS = "event_id, tool_call_id, event_type, severity, data, at"


class Journal(Protocol):
    """What log_event and get_events use: :class:`JournalStore` (SQLite) or a cluster front's
    :class:`mcp_bridge.pg_journal.PgJournalStore` (PostgreSQL)."""

    async def log(
        self, principal: str, tool_call_id: str, event_type: str, severity: str, data: dict[str, Any]
    ) -> tuple[JournalEvent, bool]: ...

    async def events(self, principal: str, flt: EventFilter) -> list[JournalEvent]: ...


class JournalStore:
    """Writes and reads journal events; every call is scoped to one principal."""

    def __init__(self, db: Database, *, max_per_principal: int = MAX_EVENTS_PER_PRINCIPAL) -> None:
        self._db = db
        self._max = max_per_principal

    async def log(
        self, principal: str, tool_call_id: str, event_type: str, severity: str, data: dict[str, Any]
    ) -> tuple[JournalEvent, bool]:
        """The stored event and whether this call wrote it (False: the same tool_call_id was logged before)."""
        body = json.dumps(data, separators=(",", ":"), sort_keys=True)
        event_id = f"evt_{secrets.token_hex(8)}"
        now = time.time()
        keep = self._max

        def write(conn: sqlite3.Connection) -> tuple[JournalEvent, bool]:
            cur = conn.execute(
                "INSERT INTO journal_events (event_id, principal, tool_call_id, event_type, severity, data, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (principal, tool_call_id) DO NOTHING",
                (event_id, principal, tool_call_id, event_type, severity, body, now),
            )
            created = cur.rowcount == 1
            if created:
                conn.execute(
                    "DELETE FROM journal_events WHERE principal = ? AND seq <= ("
                    "SELECT seq FROM journal_events WHERE principal = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (principal, principal, keep),
                )
            row = conn.execute(
                f"SELECT {COLUMNS} FROM journal_events WHERE principal = ? AND tool_call_id = ?",
                (principal, tool_call_id),
            ).fetchone()
            return event_of(row), created

        return await self._db.run_transaction(write, durable=True)

    async def events(self, principal: str, flt: EventFilter) -> list[JournalEvent]:
        """The principal's events matching ``flt``, newest first."""
        where, params = ["principal = ?"], [principal]
        if flt.event_types:
            where.append(f"event_type IN ({', '.join('?' * len(flt.event_types))})")
            params.extend(flt.event_types)
        if flt.severities:
            where.append(f"severity IN ({', '.join('?' * len(flt.severities))})")
            params.extend(flt.severities)
        if flt.since is not None:
            where.append("at >= ?")
            params.append(flt.since)  # type: ignore[arg-type]
        if flt.until is not None:
            where.append("at <= ?")
            params.append(flt.until)  # type: ignore[arg-type]
        rows = await self._db.fetchall(
            f"SELECT {COLUMNS} FROM journal_events WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
            (*params, flt.limit),
        )
        return [event_of(r) for r in rows]
