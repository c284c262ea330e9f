"""The agents' event journal: what a client logged with ``log_event``, per principal, in SQLite.

One row per event; a principal reads back only its own.  The client's ``tool_call_id`` is
unique per principal, so a retried ``log_event`` (the answer was lost, the client sends the
same call again) returns the first event instead of writing a second one.

The journal is bounded by count and by bytes (:class:`JournalLimits`): each principal keeps at
most :data:`MAX_EVENTS_PER_PRINCIPAL` events and ``max_bytes_per_principal`` bytes, and all
principals together at most ``max_bytes``; an event's size is the bytes of its stored data and
its tool_call_id (:func:`event_size`).  Oldest first out: the principal's own oldest events when
it is over its share, everyone's oldest when the whole journal is over.  The sizes are kept
incrementally (``journal_usage`` per principal, ``journal_total``), never summed over the
events, and the insert, the accounting and the pruning happen in one transaction.  What was
dropped is counted per principal (:class:`Dropped`), so ``get_events`` can say so.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from storage import Database, Migrations

EVENT_TYPES = ("signal", "suggestion", "trade", "error", "alert")
SEVERITIES = ("low", "medium", "high", "critical")
MAX_EVENTS_PER_PRINCIPAL = 100_000
MAX_BYTES_PER_PRINCIPAL = 64 * 1024 * 1024
MAX_BYTES = 1024 * 1024 * 1024
PRUNE_BATCH = 256
"""Rows read at a time while choosing which oldest events to drop (one or two in the steady state)."""

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
        (
            2,
            """
            ALTER TABLE journal_events ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
            UPDATE journal_events SET size = length(CAST(data AS BLOB)) + length(CAST(tool_call_id AS BLOB));
            CREATE INDEX journal_events_principal_seq ON journal_events (principal, seq);
            CREATE TABLE journal_usage (
                principal TEXT PRIMARY KEY,
                events INTEGER NOT NULL,
                bytes INTEGER NOT NULL,
                dropped_events INTEGER NOT NULL DEFAULT 0,
                dropped_bytes INTEGER NOT NULL DEFAULT 0,
                dropped_newest_at REAL
            );
            INSERT INTO journal_usage (principal, events, bytes)
                SELECT principal, count(*), sum(size) FROM journal_events GROUP BY principal;
            CREATE TABLE journal_total (id INTEGER PRIMARY KEY CHECK (id = 1), bytes INTEGER NOT NULL);
            INSERT INTO journal_total (id, bytes) SELECT 1, coalesce(sum(size), 0) FROM journal_events
            """,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class JournalLimits:
    """How much the journal keeps (settings ``journal_max_bytes_per_principal``, ``journal_max_bytes``)."""

    max_events_per_principal: int = MAX_EVENTS_PER_PRINCIPAL
    max_bytes_per_principal: int = MAX_BYTES_PER_PRINCIPAL
    max_bytes: int = MAX_BYTES


@dataclass(frozen=True, slots=True)
class Dropped:
    """A principal's events removed by the limits: how many, their bytes, when the newest of them was logged."""

    events: int = 0
    bytes: int = 0
    newest_at: float | None = None


def event_size(tool_call_id: str, body: str) -> int:
    """What an event counts against the byte limits: its stored data (JSON) and its tool_call_id, in bytes."""
    return len(body.encode()) + len(tool_call_id.encode())


@dataclass(slots=True)
class DropPlan:
    """The oldest events chosen to go, read batch by batch until enough is freed (:meth:`take`)."""

    need_events: int
    need_bytes: int
    seqs: list[int] = field(default_factory=list)
    bytes: int = 0
    per_principal: dict[str, Dropped] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return len(self.seqs) >= self.need_events and self.bytes >= self.need_bytes

    def take(self, rows: list[tuple[int, str, int, float]]) -> None:
        """Add ``(seq, principal, size, at)`` rows, oldest first, until the plan is :attr:`done`."""
        for seq, principal, size, at in rows:
            if self.done:
                return
            self.seqs.append(seq)
            self.bytes += size
            was = self.per_principal.get(principal, Dropped())
            newest = at if was.newest_at is None else max(was.newest_at, at)
            self.per_principal[principal] = Dropped(was.events + 1, was.bytes + size, newest)


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

    async def dropped(self, principal: str) -> Dropped: ...


class JournalStore:
    """Writes and reads journal events; every call is scoped to one principal."""

    def __init__(
        self,
        db: Database,
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
        event_id = f"evt_{secrets.token_hex(8)}"
        now = time.time()
        limits = self._limits

        def write(conn: sqlite3.Connection) -> tuple[JournalEvent, bool]:
            cur = conn.execute(
                "INSERT INTO journal_events (event_id, principal, tool_call_id, event_type, severity, data, at, size) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (principal, tool_call_id) DO NOTHING",
                (event_id, principal, tool_call_id, event_type, severity, body, now, size),
            )
            created = cur.rowcount == 1
            if created:
                _account_and_prune(conn, principal, cur.lastrowid or 0, size, limits)
            row = conn.execute(
                f"SELECT {COLUMNS} FROM journal_events WHERE principal = ? AND tool_call_id = ?",
                (principal, tool_call_id),
            ).fetchone()
            return event_of(row), created

        return await self._db.run_transaction(write, durable=True)

    async def dropped(self, principal: str) -> Dropped:
        """What the limits have removed of the principal's events so far."""
        row = await self._db.fetchone(
            "SELECT dropped_events, dropped_bytes, dropped_newest_at FROM journal_usage WHERE principal = ?",
            (principal,),
        )
        return Dropped() if row is None else Dropped(row[0], row[1], row[2])

    async def events(self, principal: str, flt: EventFilter) -> list[JournalEvent]:
        """The principal's events matching ``flt``, newest first."""
        where: list[str] = ["principal = ?"]
        params: list[str | float] = [principal]
        if flt.event_types:
            where.append(f"event_type IN ({', '.join('?' * len(flt.event_types))})")
            params.extend(flt.event_types)
        if flt.severities:
            where.append(f"severity IN ({', '.join('?' * len(flt.severities))})")
            params.extend(flt.severities)
        if flt.since is not None:
            where.append("at >= ?")
            params.append(flt.since)
        if flt.until is not None:
            where.append("at <= ?")
            params.append(flt.until)
        rows = await self._db.fetchall(
            f"SELECT {COLUMNS} FROM journal_events WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
            (*params, flt.limit),
        )
        return [event_of(r) for r in rows]


def _account_and_prune(conn: sqlite3.Connection, principal: str, seq: int, size: int, limits: JournalLimits) -> None:
    """Count the new event ``seq`` and drop the oldest events over the limits (never the new one)."""
    events, used = conn.execute(
        "INSERT INTO journal_usage (principal, events, bytes) VALUES (?, 1, ?) ON CONFLICT (principal) "
        "DO UPDATE SET events = events + 1, bytes = bytes + excluded.bytes RETURNING events, bytes",
        (principal, size),
    ).fetchone()
    (total,) = conn.execute(
        "UPDATE journal_total SET bytes = bytes + ? WHERE id = 1 RETURNING bytes", (size,)
    ).fetchone()
    own = DropPlan(events - limits.max_events_per_principal, used - limits.max_bytes_per_principal)
    after = 0
    while not own.done:
        rows = conn.execute(
            "SELECT seq, principal, size, at FROM journal_events WHERE principal = ? AND seq > ? AND seq <> ?"
            " ORDER BY seq LIMIT ?",
            (principal, after, seq, PRUNE_BATCH),
        ).fetchall()
        if not rows:
            break
        own.take([tuple(r) for r in rows])
        after = rows[-1][0]
    if own.seqs:
        conn.execute(
            "DELETE FROM journal_events WHERE principal = ? AND seq <= ? AND seq <> ?", (principal, own.seqs[-1], seq)
        )
        _record_drops(conn, own)
        total -= own.bytes
    everyone = DropPlan(0, total - limits.max_bytes)
    after = 0
    while not everyone.done:
        rows = conn.execute(
            "SELECT seq, principal, size, at FROM journal_events WHERE seq > ? AND seq <> ? ORDER BY seq LIMIT ?",
            (after, seq, PRUNE_BATCH),
        ).fetchall()
        if not rows:
            break
        everyone.take([tuple(r) for r in rows])
        after = rows[-1][0]
    if everyone.seqs:
        conn.execute("DELETE FROM journal_events WHERE seq <= ? AND seq <> ?", (everyone.seqs[-1], seq))
        _record_drops(conn, everyone)


def _record_drops(conn: sqlite3.Connection, plan: DropPlan) -> None:
    """Take the dropped events off the usage rows and the total, and count them as dropped."""
    for principal, gone in plan.per_principal.items():
        conn.execute(
            "UPDATE journal_usage SET events = events - ?, bytes = bytes - ?, dropped_events = dropped_events + ?,"
            " dropped_bytes = dropped_bytes + ?, dropped_newest_at = max(coalesce(dropped_newest_at, 0), ?)"
            " WHERE principal = ?",
            (gone.events, gone.bytes, gone.events, gone.bytes, gone.newest_at, principal),
        )
    conn.execute("UPDATE journal_total SET bytes = bytes - ? WHERE id = 1", (plan.bytes,))
