"""The operator's halt switch (design.md §8): one row in the daemon's database, checked by every order.

The ``trading_halt`` table (migrations package ``brokers.halt``) holds a single row:

- ``halted`` (0/1), ``reason``, ``halted_by`` (``cli``, ``mcp:<principal>``…), ``halted_at``;
- the *cancel-open* handshake between whoever halts and the running daemon: ``cancel_seq`` is
  raised by each request to cancel every open order, ``cancel_done_seq`` is set by the daemon
  to the request it finished, with its ``cancel_result`` (JSON) and ``cancel_done_at``.  A
  request made while no daemon runs stays pending and is carried out at the next start.

:func:`check_not_halted` runs inside the order-admission transaction
(:func:`brokers.order_admission.admit_in`), so every order path — tools, alert actions,
schedules, brackets, OCO legs — reads the flag from the database in the same transaction that
records the intent, and a halt set by another process (``chartgen trading halt``) applies to the
very next order.  The functions ending in ``_in`` take the caller's sqlite3 connection inside a
transaction; :class:`HaltStore` wraps them for async callers.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from brokers.order_args import OrderInputError
from config.database import Database, Migrations

HALTED_MESSAGE = "trading is halted by the operator"
"""The exact refusal every order path gives while the flag is set."""

MIGRATIONS = Migrations(
    "brokers.halt",
    (
        (
            1,
            """
            CREATE TABLE trading_halt (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                halted INTEGER NOT NULL DEFAULT 0,
                reason TEXT,
                halted_by TEXT,
                halted_at REAL,
                cancel_seq INTEGER NOT NULL DEFAULT 0,
                cancel_done_seq INTEGER NOT NULL DEFAULT 0,
                cancel_result TEXT,
                cancel_done_at REAL
            );
            INSERT INTO trading_halt (id, halted) VALUES (1, 0);
            """,
        ),
    ),
)

_CHECK_SQL = "SELECT halted FROM trading_halt WHERE id = 1"
_ROW_SQL = (
    "SELECT halted, reason, halted_by, halted_at, cancel_seq, cancel_done_seq, cancel_result, cancel_done_at"
    " FROM trading_halt WHERE id = 1"
)


class TradingHalted(OrderInputError):
    """The order was refused because the operator halted trading: nothing was recorded or sent."""

    def __init__(self) -> None:
        super().__init__(HALTED_MESSAGE)


@dataclass(frozen=True, slots=True)
class HaltState:
    """The halt row as read."""

    halted: bool = False
    reason: str | None = None
    by: str | None = None
    since: float | None = None
    cancel_seq: int = 0
    cancel_done_seq: int = 0
    cancel_result: dict[str, Any] | None = None
    cancel_done_at: float | None = None

    @property
    def cancel_pending(self) -> bool:
        """A cancel-open request the daemon has not carried out yet."""
        return self.cancel_seq > self.cancel_done_seq

    def note(self) -> str | None:
        """The one-line halt note of the status surfaces, or None when trading runs."""
        if not self.halted:
            return None
        since = _iso(self.since)
        return f"HALTED by operator: {self.reason or 'no reason given'} (since {since}, by {self.by or '?'})"

    def public(self) -> dict[str, Any]:
        """What status surfaces and the tool show (GET /status, ``halt_trading``)."""
        return {
            "halted": self.halted,
            "reason": self.reason,
            "by": self.by,
            "since": _iso(self.since),
            "cancel_pending": self.cancel_pending,
            "last_cancel": self.cancel_result,
        }


def _missing_table(exc: sqlite3.OperationalError) -> bool:
    return "no such table: trading_halt" in str(exc)


def check_not_halted(conn: sqlite3.Connection) -> None:
    """Inside the admission transaction: raise :class:`TradingHalted` while the flag is set.

    A database without the ``brokers.halt`` migration cannot hold the flag (nothing can set it
    there), so it is not halted; any other database error propagates and the order is refused.
    """
    try:
        row = conn.execute(_CHECK_SQL).fetchone()
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return
        raise
    if row is not None and row[0]:
        raise TradingHalted()


def _state(row: Any) -> HaltState:
    if row is None:
        return HaltState()
    result = json.loads(row[6]) if row[6] else None
    return HaltState(bool(row[0]), row[1], row[2], row[3], int(row[4]), int(row[5]), result, row[7])


def read_in(conn: sqlite3.Connection) -> HaltState:
    return _state(conn.execute(_ROW_SQL).fetchone())


def halt_in(
    conn: sqlite3.Connection, *, reason: str | None, by: str, now: float, cancel_open: bool = False
) -> HaltState:
    """Set the flag (keeping the original time if it was already set) and, with ``cancel_open``,
    raise a new cancel-open request; returns the row after the change."""
    conn.execute(
        "UPDATE trading_halt SET halted_at = CASE WHEN halted = 1 THEN halted_at ELSE ? END,"
        " halted = 1, reason = ?, halted_by = ?,"
        " cancel_seq = cancel_seq + ? WHERE id = 1",
        (now, reason, by, 1 if cancel_open else 0),
    )
    return read_in(conn)


def resume_in(conn: sqlite3.Connection) -> HaltState:
    """Clear the flag; a cancel request still pending is dropped (the operator resumed trading)."""
    conn.execute(
        "UPDATE trading_halt SET halted = 0, reason = NULL, halted_by = NULL, halted_at = NULL,"
        " cancel_done_seq = MAX(cancel_done_seq, cancel_seq) WHERE id = 1"
    )
    return read_in(conn)


def record_cancel_in(conn: sqlite3.Connection, seq: int, result: dict[str, Any], now: float) -> HaltState:
    """The daemon finished cancel-open request ``seq`` (and every earlier one) with ``result``."""
    conn.execute(
        "UPDATE trading_halt SET cancel_done_seq = MAX(cancel_done_seq, ?), cancel_result = ?, cancel_done_at = ?"
        " WHERE id = 1",
        (seq, json.dumps(result), now),
    )
    return read_in(conn)


class HaltStore:
    """The halt row through the shared :class:`~config.database.Database` (one thread hop each)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self) -> HaltState:
        return _state(await self.db.fetchone(_ROW_SQL))

    async def halt(self, *, reason: str | None, by: str, now: float, cancel_open: bool = False) -> HaltState:
        return await self.db.run_transaction(
            lambda conn: halt_in(conn, reason=reason, by=by, now=now, cancel_open=cancel_open), durable=True
        )

    async def resume(self) -> HaltState:
        return await self.db.run_transaction(resume_in, durable=True)

    async def record_cancel(self, seq: int, result: dict[str, Any], now: float) -> HaltState:
        return await self.db.run_transaction(lambda conn: record_cancel_in(conn, seq, result, now))

    async def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` of the shared connection: it changes when *another*
        connection (another process: the CLI) commits, and only then — a cheap change detector."""
        row = await self.db.fetchone("PRAGMA data_version")
        assert row is not None
        return int(row[0])


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()
