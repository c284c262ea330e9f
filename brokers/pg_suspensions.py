"""Who may not trade, on a cluster's PostgreSQL: the twin of brokers/suspensions.py's tables.

The same two tables with the same meaning — ``trading_suspensions`` (the operator's per-principal
suspensions: ``chartgen trading suspend NAME --cluster``, a front's dashboard) and
``revoked_principals`` (written by the transaction that revokes a principal's tokens or OAuth
grant on PostgreSQL, mcp_bridge/revocation.py).  Both hold for every exchange account of the
cluster: a principal is who is suspended, not an account.

:func:`check_principal_in` runs inside the order leader's fenced admission transaction
(cluster/leader_admission.py ``admit``), right after the halt switch, reading the rows ``FOR
SHARE`` so a suspension being committed concurrently is waited for, not read past; every intent —
a front's order, a schedule run, an alert action, an order list, a bracket's entry — passes there
before it is signed.  The exit OCO of a filled bracket entry is exempt (cluster/bracket_exits.py
does not call it): it only reduces a position.

A cancel-open of a suspended or revoked principal (``chartgen trading suspend --cancel-open
--cluster``, ``chartgen token revoke --cancel-open --cluster``, a front's dashboard) is written in the
suspending or revoking transaction through :class:`ClusterCancels` (cluster/halt.py
``PrincipalCancels``: the halt switch's scoped cancel-open request, without halting) and carried
out by the order leader, which keeps the principal's protective exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import asyncpg

from brokers.suspensions import PrincipalRevoked, Suspension, TradingSuspended
from storage import Migrations, PostgresDatabase, rowcount, unreachable_as

PG_SUSPENSION_MIGRATIONS = Migrations(
    "brokers.suspensions",
    (
        (
            1,
            """
            CREATE TABLE trading_suspensions (
                principal TEXT PRIMARY KEY,
                suspended_by TEXT NOT NULL,
                reason TEXT,
                suspended_at DOUBLE PRECISION NOT NULL
            );
            CREATE TABLE revoked_principals (
                principal TEXT PRIMARY KEY,
                revoked_at DOUBLE PRECISION NOT NULL
            )
            """,
        ),
    ),
)


async def check_principal_in(conn: asyncpg.Connection, principal: str | None) -> None:
    """Inside the caller's transaction: :class:`~brokers.suspensions.PrincipalRevoked` or
    :class:`~brokers.suspensions.TradingSuspended` for a principal that may not trade."""
    if principal is None:
        return
    if await conn.fetchval("SELECT 1 FROM revoked_principals WHERE principal = $1 FOR SHARE", principal):
        raise PrincipalRevoked(principal)
    if await conn.fetchval("SELECT 1 FROM trading_suspensions WHERE principal = $1 FOR SHARE", principal):
        raise TradingSuspended(principal)


async def mark_revoked(conn: asyncpg.Connection, principals: Sequence[str], now: float) -> None:
    """Inside the revoking transaction: these principals place no more orders."""
    await conn.executemany(
        "INSERT INTO revoked_principals (principal, revoked_at) VALUES ($1, $2)"
        " ON CONFLICT (principal) DO UPDATE SET revoked_at = EXCLUDED.revoked_at",
        [(p, now) for p in principals],
    )


def _suspension(r: asyncpg.Record) -> Suspension:
    return Suspension(r["principal"], r["suspended_by"], r["reason"], float(r["suspended_at"]))


class ClusterCancels(Protocol):
    """A cluster's cancel-open of a suspended or revoked principal (cluster/halt.py
    ``PrincipalCancels``): requested inside the suspending or revoking transaction, carried out by
    the order leader, which keeps the principal's protective exits."""

    async def request_in(self, conn: asyncpg.Connection, principal: str, by: str) -> list[tuple[str, int]]:
        """The requests written (account, seq): what :meth:`results` waits for."""
        ...

    async def results(self, requests: Sequence[tuple[str, int]], wait_s: float) -> dict[str, Any]: ...


NO_CLUSTER_CANCELS = "cancel-open is not available here: this process does not know the cluster's account"

_SUSPEND_SQL = (
    "INSERT INTO trading_suspensions (principal, suspended_by, reason, suspended_at)"
    " VALUES ($1, $2, $3, $4) ON CONFLICT (principal) DO UPDATE SET"
    " suspended_by = EXCLUDED.suspended_by, reason = EXCLUDED.reason RETURNING *"
)


class PgSuspensionStore:
    """The suspension rows on PostgreSQL (:class:`brokers.suspensions.SuspensionRepository`; with
    ``cancels``, also :class:`brokers.suspensions.DeferredCancels`)."""

    def __init__(
        self, db: PostgresDatabase, clock: Callable[[], float] = time.time, *, cancels: ClusterCancels | None = None
    ) -> None:
        self.db = db
        self._clock = clock
        self.cancels = cancels

    async def suspend(self, principal: str, by: str, reason: str | None) -> Suspension:
        with unreachable_as("trading not suspended", self.db.where):
            r = await self.db.fetchrow(_SUSPEND_SQL, principal, by, reason, self._clock())
        assert r is not None
        return _suspension(r)

    async def suspend_cancelling(
        self, principal: str, by: str, reason: str | None
    ) -> tuple[Suspension, list[tuple[str, int]]]:
        """Suspend ``principal`` and, in the same transaction, ask the order leader to cancel its open
        orders (protective exits stay).  The request is written first: it locks the halt row before
        the suspension row, in the order the leader's admission reads them (no deadlock)."""
        if self.cancels is None:
            raise ValueError(NO_CLUSTER_CANCELS)
        with unreachable_as("trading not suspended", self.db.where):
            async with self.db.transaction() as conn:
                requests = await self.cancels.request_in(conn, principal, by)
                r = await conn.fetchrow(_SUSPEND_SQL, principal, by, reason, self._clock())
        assert r is not None
        return _suspension(r), requests

    async def cancel_results(self, requests: Sequence[tuple[str, int]], wait_s: float) -> dict[str, Any]:
        if self.cancels is None:
            raise ValueError(NO_CLUSTER_CANCELS)
        return await self.cancels.results(requests, wait_s)

    async def check(self, principal: str) -> None:
        with unreachable_as("principal not checked", self.db.where):
            async with self.db.transaction() as conn:
                await check_principal_in(conn, principal)

    async def unsuspend(self, principal: str) -> bool:
        with unreachable_as("trading not unsuspended", self.db.where):
            tag = await self.db.execute("DELETE FROM trading_suspensions WHERE principal = $1", principal)
        return rowcount(tag) > 0

    async def list(self) -> list[Suspension]:
        with unreachable_as("suspensions not read", self.db.where):
            rows = await self.db.fetch("SELECT * FROM trading_suspensions ORDER BY suspended_at")
        return [_suspension(r) for r in rows]

    async def get(self, principal: str) -> Suspension | None:
        with unreachable_as("suspensions not read", self.db.where):
            r = await self.db.fetchrow("SELECT * FROM trading_suspensions WHERE principal = $1", principal)
        return None if r is None else _suspension(r)
