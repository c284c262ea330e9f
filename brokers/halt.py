"""The operator's halt switch (design.md §8): one row in the daemon's database, checked by every order.

The ``trading_halt`` table (migrations package ``brokers.halt``) holds a single row:

- ``halted`` (0/1), ``reason``, ``halted_at`` and the holder: ``halted_by`` (``cli:<user>``,
  ``mcp:<principal>``…) and ``holder_kind`` (migration 2; :mod:`brokers.halt_authority` says who
  may lift a halt and when a second halt takes the holder over);
- the *cancel-open* handshake between whoever halts and the running daemon: ``cancel_seq`` is
  raised by each request to cancel open orders, ``cancel_done_seq`` is set by the daemon
  to the request it finished, with its ``cancel_result`` (JSON) and ``cancel_done_at``.  A
  request made while no daemon runs stays pending and is carried out at the next start.  Each
  request's scope is a row of ``trading_halt_cancels`` (migration 2): ``owner`` NULL for every
  principal's orders (the operator, an admin), else the requesting principal's own; a pending
  request without a row (made before migration 2) cancels everyone's, as it did then.

:func:`check_not_halted` runs inside the order-admission transaction
(:func:`brokers.orders.admission.admit_in`), so every order path — tools, alert actions,
schedules, brackets, OCO legs — reads the flag from the database in the same transaction that
records the intent, and a halt set by another process (``chartgen trading halt``) applies to the
very next order.  The functions ending in ``_in`` take the caller's sqlite3 connection inside a
transaction; :class:`HaltStore` wraps them for async callers.  :func:`halt_in` and
:func:`resume_in` check the caller's authority in the transaction that changes the row: a refused
resume (:class:`~brokers.halt_authority.HaltRefused`) rolls back and changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from brokers.halt_authority import HaltAuthority, HaltRefused
from brokers.orders.args import OrderInputError
from storage import Database, Migrations

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
        (
            2,
            """
            ALTER TABLE trading_halt ADD COLUMN holder_kind TEXT;
            UPDATE trading_halt SET holder_kind = CASE WHEN halted_by LIKE 'mcp:%' THEN 'principal'
                ELSE 'operator' END WHERE halted = 1;
            CREATE TABLE trading_halt_cancels (
                seq INTEGER PRIMARY KEY,
                owner TEXT,
                requested_by TEXT NOT NULL,
                requested_at REAL NOT NULL
            );
            """,
        ),
    ),
)

_CHECK_SQL = "SELECT halted FROM trading_halt WHERE id = 1"
_ROW_SQL = (
    "SELECT halted, reason, halted_by, halted_at, cancel_seq, cancel_done_seq, cancel_result, cancel_done_at,"
    " holder_kind FROM trading_halt WHERE id = 1"
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
    holder_kind: str | None = None

    @property
    def holder(self) -> HaltAuthority | None:
        """Who holds the halt in force (None while trading runs)."""
        return HaltAuthority.holder(self.holder_kind, self.by) if self.halted else None

    @property
    def cancel_pending(self) -> bool:
        """A cancel-open request the daemon has not carried out yet."""
        return self.cancel_seq > self.cancel_done_seq

    def note(self) -> str | None:
        """The one-line halt note of the status surfaces, or None when trading runs."""
        if not self.halted:
            return None
        since = _iso(self.since)
        holder = self.holder
        assert holder is not None
        who = "operator" if holder.kind == "operator" else holder.describe()
        return f"HALTED by {who}: {self.reason or 'no reason given'} (since {since}, by {self.by or '?'})"

    def public(self) -> dict[str, Any]:
        """What status surfaces and the tool show (GET /status, ``halt_trading``): ``by`` and
        ``holder_kind`` name the holder, ``lifted_by`` who may resume."""
        holder = self.holder
        return {
            "halted": self.halted,
            "reason": self.reason,
            "by": self.by,
            "holder_kind": None if holder is None else str(holder.kind),
            "lifted_by": None if holder is None else holder.lifted_by(),
            "since": _iso(self.since),
            "cancel_pending": self.cancel_pending,
            "last_cancel": self.cancel_result,
        }


def held_note(state: HaltState, by: HaltAuthority) -> dict[str, str]:
    """``{"note": …}`` when ``by`` halted but another holder keeps the halt in force (empty otherwise)."""
    holder = state.holder
    if holder is None or holder.name == by.name:
        return {}
    return {
        "note": f"trading was already halted by {holder.describe()}, which keeps holding it (a halt does not"
        f" take over a holder of higher rank or one it could not lift); {holder.lifted_by()}"
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


def _state(row: sqlite3.Row | None) -> HaltState:
    if row is None:
        return HaltState()
    result = json.loads(row[6]) if row[6] else None
    return HaltState(bool(row[0]), row[1], row[2], row[3], int(row[4]), int(row[5]), result, row[7], row[8])


def read_in(conn: sqlite3.Connection) -> HaltState:
    return _state(conn.execute(_ROW_SQL).fetchone())


def halt_in(
    conn: sqlite3.Connection, *, reason: str | None, by: HaltAuthority, now: float, cancel_open: bool = False
) -> HaltState:
    """Halt (anyone may): set the flag, or with a halt in force take its holder over when ``by`` may
    (:meth:`~brokers.halt_authority.HaltAuthority.takes_over`; else holder and reason stay), keeping
    the first halt's time; with ``cancel_open`` raise a cancel-open request scoped to ``by``'s orders
    (everyone's for the operator, an admin, a protection).  Returns the row after the change."""
    before = read_in(conn)
    holder = before.holder
    if holder is None or by.takes_over(holder):
        conn.execute(
            "UPDATE trading_halt SET halted_at = CASE WHEN halted = 1 THEN halted_at ELSE ? END,"
            " halted = 1, reason = ?, halted_by = ?, holder_kind = ? WHERE id = 1",
            (now, reason, by.name, str(by.kind)),
        )
    if cancel_open:
        owner = by.cancel_owner
        conn.execute("UPDATE trading_halt SET cancel_seq = cancel_seq + 1 WHERE id = 1")
        conn.execute(
            "INSERT INTO trading_halt_cancels (seq, owner, requested_by, requested_at)"
            " SELECT cancel_seq, ?, ?, ? FROM trading_halt WHERE id = 1",
            (owner, by.name, now),
        )
    return read_in(conn)


def resume_in(conn: sqlite3.Connection, *, by: HaltAuthority) -> HaltState:
    """Clear the flag when ``by`` may lift the halt in force, else raise
    :class:`~brokers.halt_authority.HaltRefused` (the caller's transaction rolls back: nothing
    changes).  A cancel request still pending is dropped (trading was resumed)."""
    holder = read_in(conn).holder
    if holder is not None and not by.may_lift(holder):
        raise HaltRefused(holder, by)
    conn.execute(
        "UPDATE trading_halt SET halted = 0, reason = NULL, halted_by = NULL, holder_kind = NULL, halted_at = NULL,"
        " cancel_done_seq = MAX(cancel_done_seq, cancel_seq) WHERE id = 1"
    )
    conn.execute("DELETE FROM trading_halt_cancels")
    return read_in(conn)


def cancel_scope_in(conn: sqlite3.Connection, done: int, upto: int) -> frozenset[str] | None:
    """Whose open orders the pending requests ``done`` < seq <= ``upto`` cancel: None for every
    principal's (one of them asked for everyone's, or was made before scopes were recorded), else
    the requesting principals."""
    rows = conn.execute("SELECT owner FROM trading_halt_cancels WHERE seq > ? AND seq <= ?", (done, upto)).fetchall()
    if len(rows) < upto - done or any(r[0] is None for r in rows):
        return None
    return frozenset(str(r[0]) for r in rows)


def record_cancel_in(conn: sqlite3.Connection, seq: int, result: dict[str, Any], now: float) -> HaltState:
    """The daemon finished cancel-open request ``seq`` (and every earlier one) with ``result``."""
    conn.execute(
        "UPDATE trading_halt SET cancel_done_seq = MAX(cancel_done_seq, ?), cancel_result = ?, cancel_done_at = ?"
        " WHERE id = 1",
        (seq, json.dumps(result), now),
    )
    conn.execute("DELETE FROM trading_halt_cancels WHERE seq <= ?", (seq,))
    return read_in(conn)


class HaltStore:
    """The halt row through the shared :class:`~storage.sqlite.Database` (one thread hop each)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self) -> HaltState:
        return _state(await self.db.fetchone(_ROW_SQL))

    async def halt(self, *, reason: str | None, by: HaltAuthority, now: float, cancel_open: bool = False) -> HaltState:
        return await self.db.run_transaction(
            lambda conn: halt_in(conn, reason=reason, by=by, now=now, cancel_open=cancel_open), durable=True
        )

    async def resume(self, *, by: HaltAuthority) -> HaltState:
        """Resume; raises :class:`~brokers.halt_authority.HaltRefused` when ``by`` may not lift the halt."""
        return await self.db.run_transaction(lambda conn: resume_in(conn, by=by), durable=True)

    async def cancel_scope(self, done: int, upto: int) -> frozenset[str] | None:
        return await self.db.run_transaction(lambda conn: cancel_scope_in(conn, done, upto))

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
