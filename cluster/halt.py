"""The operator's halt switch of a cluster: one row per exchange account in PostgreSQL.

The single node keeps its switch in SQLite (brokers/halt.py); a cluster keeps it here, with the
same fields and meaning (``halted``, ``reason``, ``halted_by``, ``holder_kind``, ``halted_at``, and
the *cancel-open* handshake ``cancel_seq`` / ``cancel_done_seq`` / ``cancel_result``, each
request's scope a row of ``cluster_halt_cancels``), so :class:`brokers.halt.HaltState` describes
both, and the same authority rules apply (brokers/halt_authority.py): anyone with ``trade`` halts,
a halt is lifted by its setter, an admin token or the operator (the dashboard), a principal's
cancel-open cancels only its own orders and lists (ownership: ``cluster_order_intents.owner``).
The check and the change happen in one transaction, on the row locked ``FOR UPDATE``.

- Any front writes it (:class:`ClusterHalt`, the ``halt_trading`` tool), in a transaction that
  also wakes the account's order leader (``NOTIFY`` on the intents channel).
- The order leader reads it inside the fenced transaction that admits each order, immediately
  before the order is signed and sent (:func:`check_not_halted_in`): a halt committed before that
  transaction stops the order; a row that cannot be read (PostgreSQL away) fails the transaction,
  so nothing is sent.  Orders already sent are not recalled: *cancel-open* cancels what is open.
- A cancel-open request is carried out by the leader (it holds the account's keys), which records
  the result; the front that asked waits for it up to ``wait_s`` and otherwise answers that it is
  pending.  Resuming drops a pending request (the operator resumed trading), as on a single node.
- The same request without a halt (:func:`request_cancel_in`, purpose ``stop``) is how a suspended or
  revoked principal's cancel-open reaches the leader (:class:`PrincipalCancels`, written in the
  suspending or revoking transaction): the leader keeps that principal's protective exits
  (cluster/cancels.py), and a resume does not drop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
import orjson
import structlog

from brokers import HALTED_MESSAGE, HaltAuthority, HaltRefused, HaltState, held_note
from storage import Migrations, PostgresDatabase, unreachable_as

log = structlog.get_logger(__name__)

HALT_MIGRATIONS = Migrations(
    "cluster_halt",
    (
        (
            1,
            """
            CREATE TABLE cluster_halt (
                account TEXT PRIMARY KEY,
                halted BOOLEAN NOT NULL DEFAULT FALSE,
                reason TEXT,
                halted_by TEXT,
                halted_at TIMESTAMPTZ,
                cancel_seq BIGINT NOT NULL DEFAULT 0,
                cancel_done_seq BIGINT NOT NULL DEFAULT 0,
                cancel_result TEXT,
                cancel_done_at TIMESTAMPTZ
            )
            """,
        ),
        (
            2,
            """
            ALTER TABLE cluster_halt ADD COLUMN holder_kind TEXT;
            UPDATE cluster_halt SET holder_kind = CASE WHEN halted_by LIKE 'mcp:%' THEN 'principal'
                ELSE 'operator' END WHERE halted;
            CREATE TABLE cluster_halt_cancels (
                account TEXT NOT NULL,
                seq BIGINT NOT NULL,
                owner TEXT,
                requested_by TEXT NOT NULL,
                requested_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                PRIMARY KEY (account, seq)
            )
            """,
        ),
        (
            3,
            """
            ALTER TABLE cluster_halt_cancels ADD COLUMN purpose TEXT NOT NULL DEFAULT 'halt'
                CHECK (purpose IN ('halt', 'stop'));
            ALTER TABLE cluster_halt_cancels ADD COLUMN dropped BOOLEAN NOT NULL DEFAULT FALSE
            """,
        ),
    ),
)

CANCEL_POLL_S = 0.1
"""How often :func:`wait_cancel_done` reads the row when no ``NOTIFY`` wakes it."""

HALT_CHANNEL = "cluster_halt"
"""``NOTIFY`` payload: the account whose row changed (fronts waiting for a cancel-open listen)."""

_ROW = (
    "SELECT halted, reason, halted_by, extract(epoch FROM halted_at) AS since, cancel_seq, cancel_done_seq,"
    " cancel_result, extract(epoch FROM cancel_done_at) AS done_at, holder_kind FROM cluster_halt WHERE account = $1"
)


class ClusterHalted(Exception):
    """The account is halted: the order is refused with the single node's exact message."""

    def __init__(self) -> None:
        super().__init__(HALTED_MESSAGE)


def _state(row: asyncpg.Record | None) -> HaltState:
    if row is None:
        return HaltState()
    result = orjson.loads(row["cancel_result"]) if row["cancel_result"] else None
    since = float(row["since"]) if row["since"] is not None else None
    done_at = float(row["done_at"]) if row["done_at"] is not None else None
    return HaltState(
        bool(row["halted"]), row["reason"], row["halted_by"], since,
        int(row["cancel_seq"]), int(row["cancel_done_seq"]), result, done_at, row["holder_kind"],
    )  # fmt: skip


async def check_not_halted_in(conn: asyncpg.Connection, account: str) -> None:
    """Inside the caller's transaction: :class:`ClusterHalted` while ``account`` is halted.  The row
    is read ``FOR SHARE``: a halt being committed concurrently is waited for, not read past."""
    halted = await conn.fetchval("SELECT halted FROM cluster_halt WHERE account = $1 FOR SHARE", account)
    if halted:
        raise ClusterHalted()


async def read_in(conn: asyncpg.Connection | PostgresDatabase, account: str) -> HaltState:
    return _state(await conn.fetchrow(_ROW, account))


Purpose = Literal["halt", "stop"]
"""Why a cancel-open was asked: ``halt`` (the halt switch's ``cancel_open``: every covered order and
list) or ``stop`` (a principal suspended or revoked: its protective exits stay, and a resume does
not drop it)."""


@dataclass(frozen=True, slots=True)
class PendingCancels:
    """What the pending cancel-open requests of an account ask for, together."""

    owners: frozenset[str] | None
    """Whose open orders they cancel: None for every principal's."""
    keep_exits_of: frozenset[str] = frozenset()
    """Owners whose protective exits stay (only ``stop`` requests asked for their orders)."""


async def cancel_scope_in(
    conn: asyncpg.Connection | PostgresDatabase, account: str, done: int, upto: int
) -> PendingCancels:
    """What the pending requests ``done`` < seq <= ``upto`` cancel: every principal's orders (one asked
    for everyone's, or was made before scopes were recorded), else their owners' — keeping the
    protective exits of owners asked for only by ``stop`` requests.  A request a resume dropped
    (a halt's) asks for nothing."""
    rows = await conn.fetch(
        "SELECT owner, purpose, dropped FROM cluster_halt_cancels WHERE account = $1 AND seq > $2 AND seq <= $3",
        account,
        done,
        upto,
    )
    live = [r for r in rows if not r["dropped"]]
    if len(rows) < upto - done or any(r["owner"] is None for r in live):
        return PendingCancels(None)
    owners = frozenset(str(r["owner"]) for r in live)
    halted = {str(r["owner"]) for r in live if r["purpose"] == "halt"}
    return PendingCancels(owners, owners - halted)


async def request_cancel_in(
    conn: asyncpg.Connection, account: str, *, owner: str | None, requested_by: str, purpose: Purpose, wake: str
) -> int:
    """Inside the caller's transaction: ask ``account``'s order leader to cancel ``owner``'s open
    orders and lists (None: everyone's) — the one way a cancel-open is requested, with or without a
    halt; wakes the leader (``NOTIFY`` on ``wake``) and returns the request's seq."""
    await conn.execute("INSERT INTO cluster_halt (account) VALUES ($1) ON CONFLICT DO NOTHING", account)
    seq: int = await conn.fetchval(
        "UPDATE cluster_halt SET cancel_seq = cancel_seq + 1 WHERE account = $1 RETURNING cancel_seq", account
    )
    await conn.execute(
        "INSERT INTO cluster_halt_cancels (account, seq, owner, requested_by, purpose) VALUES ($1, $2, $3, $4, $5)",
        account,
        seq,
        owner,
        requested_by,
        purpose,
    )
    await conn.execute("SELECT pg_notify($1, $2)", wake, account)
    return seq


async def wait_cancel_done(
    db: PostgresDatabase, account: str, seq: int, wait_s: float, changed: asyncio.Event | None = None
) -> HaltState:
    """The account's row once the leader carried out request ``seq`` (``cancel_done_seq`` >= seq), or
    as it is after ``wait_s``.  ``changed`` (set on the row's ``NOTIFY``) wakes the wait early; without
    it the row is read again every ``CANCEL_POLL_S``."""
    deadline = time.monotonic() + wait_s
    while True:
        if changed is not None:
            changed.clear()
        with unreachable_as("cancel-open result not read", db.where):
            state = await read_in(db, account)
        left = deadline - time.monotonic()
        if state.cancel_done_seq >= seq or left <= 0:
            return state
        if changed is None:
            await asyncio.sleep(min(left, CANCEL_POLL_S))  # a poll bounded by the deadline
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 1.0))


def pending_note(account: str, wait_s: float) -> str:
    """The answer while the leader has not carried a cancel-open request out."""
    return (
        f"pending: the order leader of account {account!r} has not carried it out within {wait_s:g} s"
        " (is a leader running? chartgen cluster status); it will when it runs"
    )


class PrincipalCancels:
    """A suspended or revoked principal's cancel-open on a cluster (``purpose`` ``stop``): requested in
    the suspending or revoking transaction (:meth:`request_in`), carried out by the account's order
    leader like the halt's — protective exits kept (cluster/cancels.py) — and waited for
    (:meth:`results`).  Implements :class:`brokers.pg_suspensions.ClusterCancels`."""

    def __init__(self, db: PostgresDatabase, account: str, *, wake_channel: str) -> None:
        self.db = db
        self.account = account
        self.wake_channel = wake_channel

    async def request_in(self, conn: asyncpg.Connection, principal: str, by: str) -> list[tuple[str, int]]:
        seq = await request_cancel_in(
            conn, self.account, owner=principal, requested_by=by, purpose="stop", wake=self.wake_channel
        )
        return [(self.account, seq)]

    async def results(self, requests: Sequence[tuple[str, int]], wait_s: float) -> dict[str, Any]:
        """What the leaders cancelled for ``requests`` (summed over accounts), or, per account not
        done within ``wait_s``, a ``pending`` note."""
        deadline = time.monotonic() + wait_s
        out: dict[str, Any] = {"orders_cancelled": 0, "lists_cancelled": 0, "protective_exits_kept": 0}
        failures: list[str] = []
        pending: list[str] = []
        for account, seq in requests:
            state = await wait_cancel_done(self.db, account, seq, max(0.0, deadline - time.monotonic()))
            if state.cancel_done_seq < seq:
                pending.append(pending_note(account, wait_s))
                continue
            result = state.cancel_result or {}
            for key in ("orders_cancelled", "lists_cancelled", "protective_exits_kept"):
                out[key] += int(result.get(key) or 0)
            failures.extend(str(f) for f in result.get("failures") or [])
        out["failures"] = failures
        if pending:
            out["pending"] = pending
        return out


async def record_cancel_in(conn: asyncpg.Connection, account: str, seq: int, result: dict[str, Any]) -> None:
    """The leader finished cancel-open request ``seq`` (and every earlier one) with ``result``."""
    await conn.execute(
        "UPDATE cluster_halt SET cancel_done_seq = GREATEST(cancel_done_seq, $2), cancel_result = $3,"
        " cancel_done_at = clock_timestamp() WHERE account = $1",
        account,
        seq,
        orjson.dumps(result).decode(),
    )
    await conn.execute("DELETE FROM cluster_halt_cancels WHERE account = $1 AND seq <= $2", account, seq)
    await conn.execute("SELECT pg_notify($1, $2)", HALT_CHANNEL, account)


async def drop_halt_cancels_in(conn: asyncpg.Connection, account: str) -> None:
    """Inside a resume's transaction: the halt's pending cancel-open requests are dropped; a
    suspended or revoked principal's (``stop``) stay pending for the leader."""
    await conn.execute(
        "UPDATE cluster_halt_cancels SET dropped = TRUE WHERE account = $1 AND purpose = 'halt'", account
    )
    await conn.execute(
        "UPDATE cluster_halt SET cancel_done_seq = cancel_seq WHERE account = $1 AND NOT EXISTS (SELECT 1"
        " FROM cluster_halt_cancels c WHERE c.account = $1 AND NOT c.dropped AND c.seq > cluster_halt.cancel_done_seq)",
        account,
    )
    await conn.execute(
        "DELETE FROM cluster_halt_cancels c USING cluster_halt h WHERE c.account = $1 AND h.account = $1"
        " AND c.seq <= h.cancel_done_seq",
        account,
    )


class ClusterHalt:
    """The halt switch of ``account`` as a front sees it (the ``halt_trading`` tool's operations).

    ``state`` is the row as last read here (status surfaces); every operation reads it again."""

    def __init__(self, db: PostgresDatabase, account: str, *, wake_channel: str, wait_s: float = 10.0) -> None:
        self.db = db
        self.account = account
        self.wake_channel = wake_channel
        self.wait_s = wait_s
        self.state = HaltState()
        self._changed = asyncio.Event()
        self._listener = db.listener(HALT_CHANNEL, self._on_change)

    @property
    def halted(self) -> bool:
        return self.state.halted

    def note(self) -> str | None:
        return self.state.note()

    def _on_change(self, payload: str) -> None:
        if payload == self.account:
            self._changed.set()

    async def refresh(self) -> HaltState:
        with unreachable_as("halt state not read", self.db.where):
            self.state = await read_in(self.db, self.account)
        return self.state

    async def _locked(self, conn: asyncpg.Connection) -> HaltState:
        """The account's row, created if missing, locked ``FOR UPDATE`` until the transaction ends."""
        await conn.execute("INSERT INTO cluster_halt (account) VALUES ($1) ON CONFLICT DO NOTHING", self.account)
        await conn.execute("SELECT 1 FROM cluster_halt WHERE account = $1 FOR UPDATE", self.account)
        return await read_in(conn, self.account)

    async def halt(self, *, reason: str | None, by: HaltAuthority, cancel_open: bool = False) -> dict[str, Any]:
        """Halt the account (anyone may; a halt in force keeps its holder unless ``by`` takes it over,
        and the first halt's time); with ``cancel_open`` ask the leader to cancel ``by``'s open orders
        (everyone's for the operator, an admin, a protection) and wait up to ``wait_s`` for its result."""
        owner = by.cancel_owner if cancel_open else None
        if cancel_open:
            await self._listener.ensure()  # before the request: the leader's answer cannot slip by
        with unreachable_as("trading not halted", self.db.where):
            async with self.db.transaction() as conn:
                before = await self._locked(conn)
                holder = before.holder
                if holder is None or by.takes_over(holder):
                    await conn.execute(
                        "UPDATE cluster_halt SET halted = TRUE, reason = $2, halted_by = $3, holder_kind = $4,"
                        " halted_at = CASE WHEN halted THEN halted_at ELSE clock_timestamp() END WHERE account = $1",
                        self.account,
                        reason,
                        by.name,
                        str(by.kind),
                    )
                if cancel_open:
                    await request_cancel_in(
                        conn, self.account, owner=owner, requested_by=by.name, purpose="halt", wake=self.wake_channel
                    )
                await conn.execute("SELECT pg_notify($1, $2)", self.wake_channel, self.account)
                self.state = await read_in(conn, self.account)
        log.warning(
            "trading_halted",
            account=self.account,
            reason=reason,
            by=by.name,
            kind=str(by.kind),
            cancel_open=cancel_open,
        )
        note = held_note(self.state, by)
        if not cancel_open:
            return {**self.state.public(), **note}
        seq = self.state.cancel_seq
        self.state = await wait_cancel_done(self.db, self.account, seq, self.wait_s, self._changed)
        if self.state.cancel_done_seq >= seq:
            return {**self.state.public(), "cancel_open": self.state.cancel_result, **note}
        return {**self.state.public(), "cancel_open": pending_note(self.account, self.wait_s), **note}

    async def resume(self, *, by: HaltAuthority) -> dict[str, Any]:
        """Resume the account; :class:`~brokers.halt_authority.HaltRefused` (nothing changed) when
        ``by`` may not lift the halt in force."""
        with unreachable_as("trading not resumed", self.db.where):
            async with self.db.transaction() as conn:
                holder = (await self._locked(conn)).holder
                if holder is not None and not by.may_lift(holder):
                    self.state = await read_in(conn, self.account)
                    log.warning("trading_resume_refused", account=self.account, by=by.name, holder=holder.name)
                    raise HaltRefused(holder, by)
                await conn.execute(
                    "UPDATE cluster_halt SET halted = FALSE, reason = NULL, halted_by = NULL, holder_kind = NULL,"
                    " halted_at = NULL WHERE account = $1",
                    self.account,
                )
                await drop_halt_cancels_in(conn, self.account)
                self.state = await read_in(conn, self.account)
        log.warning("trading_resumed", account=self.account, by=by.name, kind=str(by.kind))
        return self.state.public()

    async def close(self) -> None:
        await self._listener.close()
