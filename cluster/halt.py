"""The operator's halt switch of a cluster: one row per exchange account in PostgreSQL.

The single node keeps its switch in SQLite (brokers/halt.py); a cluster keeps it here, with the
same fields and meaning (``halted``, ``reason``, ``halted_by``, ``halted_at``, and the
*cancel-open* handshake ``cancel_seq`` / ``cancel_done_seq`` / ``cancel_result``), so
:class:`brokers.halt.HaltState` describes both.

- Any front writes it (:class:`ClusterHalt`, the ``halt_trading`` tool), in a transaction that
  also wakes the account's order leader (``NOTIFY`` on the intents channel).
- The order leader reads it inside the fenced transaction that admits each order, immediately
  before the order is signed and sent (:func:`check_not_halted_in`): a halt committed before that
  transaction stops the order; a row that cannot be read (PostgreSQL away) fails the transaction,
  so nothing is sent.  Orders already sent are not recalled: *cancel-open* cancels what is open.
- A cancel-open request is carried out by the leader (it holds the account's keys), which records
  the result; the front that asked waits for it up to ``wait_s`` and otherwise answers that it is
  pending.  Resuming drops a pending request (the operator resumed trading), as on a single node.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
import orjson
import structlog

from brokers.halt import HALTED_MESSAGE, HaltState
from config.migrations import Migrations
from config.postgres import PostgresDatabase, unreachable_as

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
    ),
)

HALT_CHANNEL = "cluster_halt"
"""``NOTIFY`` payload: the account whose row changed (fronts waiting for a cancel-open listen)."""

_ROW = (
    "SELECT halted, reason, halted_by, extract(epoch FROM halted_at) AS since, cancel_seq, cancel_done_seq,"
    " cancel_result, extract(epoch FROM cancel_done_at) AS done_at FROM cluster_halt WHERE account = $1"
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
        int(row["cancel_seq"]), int(row["cancel_done_seq"]), result, done_at,
    )  # fmt: skip


async def check_not_halted_in(conn: asyncpg.Connection, account: str) -> None:
    """Inside the caller's transaction: :class:`ClusterHalted` while ``account`` is halted.  The row
    is read ``FOR SHARE``: a halt being committed concurrently is waited for, not read past."""
    halted = await conn.fetchval("SELECT halted FROM cluster_halt WHERE account = $1 FOR SHARE", account)
    if halted:
        raise ClusterHalted()


async def read_in(conn: asyncpg.Connection | PostgresDatabase, account: str) -> HaltState:
    return _state(await conn.fetchrow(_ROW, account))


async def record_cancel_in(conn: asyncpg.Connection, account: str, seq: int, result: dict[str, Any]) -> None:
    """The leader finished cancel-open request ``seq`` (and every earlier one) with ``result``."""
    await conn.execute(
        "UPDATE cluster_halt SET cancel_done_seq = GREATEST(cancel_done_seq, $2), cancel_result = $3,"
        " cancel_done_at = clock_timestamp() WHERE account = $1",
        account,
        seq,
        orjson.dumps(result).decode(),
    )
    await conn.execute("SELECT pg_notify($1, $2)", HALT_CHANNEL, account)


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

    async def halt(self, *, reason: str | None, by: str, cancel_open: bool = False) -> dict[str, Any]:
        """Halt the account (keeping the first halt's time); with ``cancel_open`` ask the leader to
        cancel every open order and wait up to ``wait_s`` for its result."""
        if cancel_open:
            await self._listener.ensure()  # before the request: the leader's answer cannot slip by
        with unreachable_as("trading not halted", self.db.where):
            async with self.db.transaction() as conn:
                await conn.execute(
                    "INSERT INTO cluster_halt (account, halted, reason, halted_by, halted_at, cancel_seq)"
                    " VALUES ($1, TRUE, $2, $3, clock_timestamp(), $4)"
                    " ON CONFLICT (account) DO UPDATE SET halted = TRUE, reason = EXCLUDED.reason,"
                    " halted_by = EXCLUDED.halted_by,"
                    " halted_at = CASE WHEN cluster_halt.halted THEN cluster_halt.halted_at ELSE clock_timestamp() END,"
                    " cancel_seq = cluster_halt.cancel_seq + $4",
                    self.account,
                    reason,
                    by,
                    1 if cancel_open else 0,
                )
                await conn.execute("SELECT pg_notify($1, $2)", self.wake_channel, self.account)
                self.state = await read_in(conn, self.account)
        log.warning("trading_halted", account=self.account, reason=reason, by=by, cancel_open=cancel_open)
        if not cancel_open:
            return self.state.public()
        seq = self.state.cancel_seq
        deadline = time.monotonic() + self.wait_s
        while self.state.cancel_done_seq < seq and (left := deadline - time.monotonic()) > 0:
            self._changed.clear()
            await self.refresh()
            if self.state.cancel_done_seq >= seq:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
        if self.state.cancel_done_seq >= seq:
            return {**self.state.public(), "cancel_open": self.state.cancel_result}
        return {
            **self.state.public(),
            "cancel_open": f"pending: the order leader of account {self.account!r} has not carried it out within"
            f" {self.wait_s:g} s (is a leader running? chartgen cluster status); it will when it runs",
        }

    async def resume(self, *, by: str) -> dict[str, Any]:
        with unreachable_as("trading not resumed", self.db.where):
            async with self.db.transaction() as conn:
                await conn.execute(
                    "UPDATE cluster_halt SET halted = FALSE, reason = NULL, halted_by = NULL, halted_at = NULL,"
                    " cancel_done_seq = cancel_seq WHERE account = $1",
                    self.account,
                )
                self.state = await read_in(conn, self.account)
        log.warning("trading_resumed", account=self.account, by=by)
        return self.state.public()

    async def close(self) -> None:
        await self._listener.close()
