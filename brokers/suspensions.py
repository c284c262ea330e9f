"""Who may not trade: the operator's per-principal suspensions, and principals whose access was revoked.

Two tables of the daemon's database (migrations package ``brokers.suspensions``):

- ``trading_suspensions`` — one row per principal the operator suspended (``chartgen trading
  suspend NAME``, the dashboard): ``principal``, ``suspended_by``, ``reason``, ``suspended_at``.
  Unsuspending deletes the row.  A suspended principal's orders, scheduled runs and alert actions
  are refused with :data:`SUSPENDED_MESSAGE`, and so is the creation of its schedules and alerts
  with an action (:meth:`SuspensionService.refuse_stopped`, both modes' tools); its charts, alerts
  and notifications keep working and every other principal keeps trading.
- ``revoked_principals`` — one row per principal whose credentials were revoked (``chartgen token
  revoke``, the dashboard, an OAuth grant revoked), written by the revoking transaction
  (mcp_bridge/revocation.py) together with the cancellation of the principal's schedules and the
  removal of its alerts' actions.  A new OAuth grant for the same client clears its row.

:func:`check_principal_in` runs inside every order-admission transaction that also checks the halt
switch (:func:`brokers.orders.admission.admit_in`, :func:`brokers.orders.list_store.admit_list_in` /
``admit_bracket_in``, the guard's dry run), so no order path — tool, schedule, alert action, order
list, bracket entry — admits an order for a suspended or revoked principal, whichever process
wrote the row (fail closed: a database error refuses the order).  The one exemption is the exit
OCO of a bracket whose entry has already filled (:func:`brokers.orders.list_store.claim_bracket_in`): it
only reduces a position the principal holds, and refusing it would leave that position unprotected.

``cancel_open`` (:func:`cancel_principal_open`) cancels a principal's open orders and order lists
through the order service — except those protective exits: a daemon bracket's exit OCO, and the
exit OCO of an OTOCO whose working order has filled.  A request written by another process
(``chartgen trading suspend --cancel-open``, ``chartgen token revoke --cancel-open``) is a row of
``principal_cancel_requests``, which the running daemon's :meth:`SuspensionService.watch` notices
(SQLite's ``PRAGMA data_version``, as the halt switch does) and carries out, recording the result.

:class:`SuspensionService` is what the dashboard and the CLI call (``services.suspensions``).
The cluster keeps the same tables in PostgreSQL (brokers/pg_suspensions.py); there a cancel-open
is a request written in the suspending transaction and carried out by the order leader
(:class:`DeferredCancels`), which :meth:`SuspensionService.suspend` waits for.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import structlog

from brokers.models import OPEN, Actor, BrokerError
from brokers.orders.args import OrderInputError
from brokers.orders.checks import LimitExceeded
from storage import Database, Migrations

log = structlog.get_logger(__name__)

SUSPENDED_MESSAGE = "suspended by the operator"
"""The exact phrase every refusal of a suspended principal carries."""
REVOKED_MESSAGE = "the access of the client this order acts for was revoked"

POLL_S = 0.2

MIGRATIONS = Migrations(
    "brokers.suspensions",
    (
        (
            1,
            """
            CREATE TABLE trading_suspensions (
                principal TEXT PRIMARY KEY,
                suspended_by TEXT NOT NULL,
                reason TEXT,
                suspended_at REAL NOT NULL
            );
            CREATE TABLE revoked_principals (
                principal TEXT PRIMARY KEY,
                revoked_at REAL NOT NULL
            );
            CREATE TABLE principal_cancel_requests (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                principal TEXT NOT NULL,
                requested_by TEXT NOT NULL,
                requested_at REAL NOT NULL,
                done_at REAL,
                result TEXT
            );
            CREATE INDEX principal_cancel_pending ON principal_cancel_requests (seq) WHERE done_at IS NULL
            """,
        ),
    ),
)


class PrincipalStopped(LimitExceeded):
    """The order was refused because its principal may not trade: nothing was recorded or sent."""


class TradingSuspended(PrincipalStopped):
    """``refused`` names what was refused: an order, or the creation of a schedule or an alert action."""

    def __init__(self, principal: str, refused: str = "order refused") -> None:
        super().__init__(f"{refused}: trading for {principal} is {SUSPENDED_MESSAGE}")
        self.principal = principal


class PrincipalRevoked(PrincipalStopped):
    def __init__(self, principal: str, refused: str = "order refused") -> None:
        super().__init__(f"{refused}: {REVOKED_MESSAGE} ({principal}); it places no more orders")
        self.principal = principal


@dataclass(frozen=True, slots=True)
class Suspension:
    """One suspended principal."""

    principal: str
    by: str
    reason: str | None
    since: float


def _missing_table(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "no such table: trading_suspensions" in text or "no such table: revoked_principals" in text


def check_principal_in(conn: sqlite3.Connection, principal: str | None) -> None:
    """Inside the admission transaction: raise :class:`TradingSuspended` / :class:`PrincipalRevoked`.

    An order without an owner (the operator's own, one learnt from the exchange) is not checked.
    A database without the migration cannot hold a row (nothing could write one), so it passes;
    any other database error propagates and the order is refused."""
    if principal is None:
        return
    try:
        row = conn.execute(
            "SELECT (SELECT 1 FROM trading_suspensions WHERE principal = ?),"
            " (SELECT 1 FROM revoked_principals WHERE principal = ?)",
            (principal, principal),
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return
        raise
    if row is not None and row[1]:
        raise PrincipalRevoked(principal)
    if row is not None and row[0]:
        raise TradingSuspended(principal)


def mark_revoked_in(conn: sqlite3.Connection, principals: Sequence[str], now: float) -> None:
    """Inside the revoking transaction: these principals place no more orders."""
    conn.executemany(
        "INSERT INTO revoked_principals (principal, revoked_at) VALUES (?, ?)"
        " ON CONFLICT (principal) DO UPDATE SET revoked_at = excluded.revoked_at",
        [(p, now) for p in principals],
    )


def request_cancel_in(conn: sqlite3.Connection, principal: str, by: str, now: float) -> int:
    """Inside a transaction: ask the running daemon to cancel ``principal``'s open orders; the request's seq."""
    cur = conn.execute(
        "INSERT INTO principal_cancel_requests (principal, requested_by, requested_at) VALUES (?, ?, ?)",
        (principal, by, now),
    )
    return int(cur.lastrowid or 0)


def _suspension(r: sqlite3.Row) -> Suspension:
    return Suspension(r["principal"], r["suspended_by"], r["reason"], float(r["suspended_at"]))


CancelRequests = Sequence[tuple[str, int]]
"""The cancel-open requests a deferred suspension wrote: (account, seq) each."""


class SuspensionRepository(Protocol):
    """The suspension rows: :class:`SuspensionStore` (SQLite) or
    :class:`brokers.pg_suspensions.PgSuspensionStore` (a cluster's PostgreSQL)."""

    async def suspend(self, principal: str, by: str, reason: str | None) -> Suspension: ...
    async def unsuspend(self, principal: str) -> bool: ...
    async def list(self) -> list[Suspension]: ...
    async def get(self, principal: str) -> Suspension | None: ...
    async def check(self, principal: str) -> None:
        """:class:`TradingSuspended` / :class:`PrincipalRevoked` when ``principal`` may not trade."""
        ...


@runtime_checkable
class DeferredCancels(Protocol):
    """A store whose cancel-open another process carries out (a cluster's order leaders:
    :class:`brokers.pg_suspensions.PgSuspensionStore` with its cluster's cancels): the request is
    written in the suspending transaction, the result waited for."""

    async def suspend_cancelling(
        self, principal: str, by: str, reason: str | None
    ) -> tuple[Suspension, CancelRequests]: ...
    async def cancel_results(self, requests: CancelRequests, wait_s: float) -> dict[str, Any]: ...


@runtime_checkable
class CancelRequestQueue(Protocol):
    """A store other processes leave cancel-open requests in, for this daemon to carry out
    (:class:`SuspensionStore`): :meth:`SuspensionService.watch` polls it."""

    async def pending_cancels(self) -> builtins.list[tuple[int, str]]: ...
    async def record_cancel(self, seq: int, result: dict[str, Any]) -> None: ...
    async def data_version(self) -> int: ...


class SuspensionStore:
    """The suspension rows and the cancel requests through the shared :class:`~storage.sqlite.Database`."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self._clock = clock

    async def suspend(self, principal: str, by: str, reason: str | None) -> Suspension:
        """Suspend ``principal`` (a second suspension keeps the first time, takes the new reason)."""
        now = self._clock()

        def step(conn: sqlite3.Connection) -> Suspension:
            conn.execute(
                "INSERT INTO trading_suspensions (principal, suspended_by, reason, suspended_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (principal) DO UPDATE SET suspended_by = excluded.suspended_by,"
                " reason = excluded.reason",
                (principal, by, reason, now),
            )
            r = conn.execute(
                "SELECT principal, suspended_by, reason, suspended_at FROM trading_suspensions WHERE principal = ?",
                (principal,),
            ).fetchone()
            return Suspension(r[0], r[1], r[2], float(r[3]))

        return await self.db.run_transaction(step, durable=True)

    async def unsuspend(self, principal: str) -> bool:
        return await self.db.execute("DELETE FROM trading_suspensions WHERE principal = ?", (principal,)) > 0

    async def list(self) -> list[Suspension]:
        rows = await self.db.fetchall("SELECT * FROM trading_suspensions ORDER BY suspended_at")
        return [_suspension(r) for r in rows]

    async def get(self, principal: str) -> Suspension | None:
        r = await self.db.fetchone("SELECT * FROM trading_suspensions WHERE principal = ?", (principal,))
        return None if r is None else _suspension(r)

    async def check(self, principal: str) -> None:
        await self.db.run_transaction(lambda conn: check_principal_in(conn, principal))

    async def request_cancel(self, principal: str, by: str) -> int:
        now = self._clock()
        return await self.db.run_transaction(lambda conn: request_cancel_in(conn, principal, by, now))

    async def pending_cancels(self) -> builtins.list[tuple[int, str]]:
        rows = await self.db.fetchall(
            "SELECT seq, principal FROM principal_cancel_requests WHERE done_at IS NULL ORDER BY seq"
        )
        return [(int(r["seq"]), r["principal"]) for r in rows]

    async def record_cancel(self, seq: int, result: dict[str, Any]) -> None:
        await self.db.execute(
            "UPDATE principal_cancel_requests SET done_at = ?, result = ? WHERE seq = ?",
            (self._clock(), json.dumps(result), seq),
        )

    async def cancel_result(self, seq: int) -> dict[str, Any] | None:
        """The result of request ``seq`` once the daemon carried it out, else None."""
        r = await self.db.fetchone("SELECT done_at, result FROM principal_cancel_requests WHERE seq = ?", (seq,))
        if r is None or r["done_at"] is None:
            return None
        return json.loads(r["result"]) if r["result"] else {}

    async def data_version(self) -> int:
        row = await self.db.fetchone("PRAGMA data_version")
        assert row is not None
        return int(row[0])


class PrincipalCanceller(Protocol):
    """What carries out a principal's cancel-open (the single node's order service)."""

    async def __call__(self, principal: str) -> dict[str, Any]: ...


OPEN_OF_OWNER_SQL = (
    "SELECT o.client_order_id, o.list_client_id, o.leg, l.entry_client_id, l.kind,"
    " (SELECT w.status FROM orders w WHERE w.list_client_id = o.list_client_id AND w.leg = 'working') AS working"
    " FROM orders o LEFT JOIN order_lists l ON l.list_client_id = o.list_client_id"
    f" WHERE o.broker = ? AND o.owner = ? AND o.status IN ({','.join('?' * len(OPEN))})"
)


def _protective(entry_client_id: str | None, kind: str | None, leg: str | None, working: str | None) -> bool:
    """A leg that only protects a position already held: a daemon bracket's exit, or an OTOCO's exit
    once its working order filled."""
    if entry_client_id is not None:
        return True
    return kind == "OTOCO" and leg != "working" and working not in OPEN


async def cancel_principal_open(service: Any, principal: str) -> dict[str, Any]:
    """Cancel ``principal``'s open orders and order lists through ``service`` (an
    :class:`~brokers.orders.service.OrderService`), leaving protective exits (see the module docstring)."""
    started = time.perf_counter()
    rows = await service.store.db.fetchall(OPEN_OF_OWNER_SQL, (service.broker.name, principal, *sorted(OPEN)))
    admin = Actor(None, admin=True)
    done_lists: set[str] = set()
    orders = lists = kept = 0
    failures: list[str] = []
    for r in rows:
        if _protective(r["entry_client_id"], r["kind"], r["leg"], r["working"]):
            kept += 1
            continue
        lst = r["list_client_id"]
        if lst is not None and lst in done_lists:
            continue
        try:
            await service.cancel_order(lst or r["client_order_id"], actor=admin)
        except (OrderInputError, BrokerError) as exc:
            failures.append(f"{lst or r['client_order_id']}: {exc}")
            continue
        if lst is not None:
            done_lists.add(lst)
            lists += 1
        else:
            orders += 1
    return {
        "orders_cancelled": orders,
        "lists_cancelled": lists,
        "protective_exits_kept": kept,
        "failures": failures,
        "seconds": round(time.perf_counter() - started, 3),
    }


AuditWriter = Callable[[Sequence[str]], Awaitable[None]]


class SuspensionService:
    """Suspend and unsuspend principals, and carry out cancel-open requests (``services.suspensions``)."""

    def __init__(
        self,
        store: SuspensionRepository,
        canceller: PrincipalCanceller | None,
        *,
        audit: AuditWriter | None = None,
        clock: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
        no_canceller: str = "no broker runs in this daemon (start it with --trade)",
        cancel_wait_s: float = 10.0,
    ) -> None:
        self.store = store
        self.canceller = canceller
        self.no_canceller = no_canceller
        """Why cancel-open cannot be carried out here, when ``canceller`` is None."""
        self.cancel_wait_s = cancel_wait_s
        """How long :meth:`suspend` waits for a cancel-open another process carries out (a cluster's leader)."""
        self._audit = audit
        self._clock = clock
        self.poll_s = poll_s
        self._cancel_lock = asyncio.Lock()

    async def _write(self, line: str) -> None:
        if self._audit is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))
            await self._audit([f"{stamp} {line}"])

    async def list(self) -> list[Suspension]:
        return await self.store.list()

    async def suspend(
        self, principal: str, *, by: str, reason: str | None = None, cancel_open: bool = False
    ) -> dict[str, Any]:
        """Suspend ``principal``'s trading (and with ``cancel_open`` cancel its open orders now: here,
        or on a cluster by the order leader, asked in the suspending transaction and waited for up to
        ``cancel_wait_s`` — a ``pending`` list in the result names the accounts not done yet)."""
        principal = _checked(principal)
        deferred = self.store if cancel_open and isinstance(self.store, DeferredCancels) else None
        requests: CancelRequests = ()
        if deferred is not None:
            row, requests = await deferred.suspend_cancelling(principal, by, reason)
        else:
            row = await self.store.suspend(principal, by, reason)
        log.warning("trading_suspended", principal=principal, by=by, reason=reason, cancel_open=cancel_open)
        await self._write(f"SUSPEND {principal} by {by}: {reason or 'no reason given'}")
        out: dict[str, Any] = {"suspended": True, **asdict(row)}
        if deferred is not None:
            result = await deferred.cancel_results(requests, self.cancel_wait_s)
            log.warning("principal_cancel_open", principal=principal, **result)
            out["cancel_open"] = result
        elif cancel_open:
            out["cancel_open"] = await self.cancel_open(principal)
        return out

    async def refuse_stopped(self, principal: str | None, what: str) -> None:
        """Before ``what`` is created for ``principal`` (a schedule, an alert's action): refuse it with
        :class:`TradingSuspended` / :class:`PrincipalRevoked` while the principal may not trade.  A
        database error propagates: the creation is refused (fail closed)."""
        if principal is None:
            return
        try:
            await self.store.check(principal)
        except TradingSuspended:
            raise TradingSuspended(principal, f"{what} refused") from None
        except PrincipalRevoked:
            raise PrincipalRevoked(principal, f"{what} refused") from None

    async def unsuspend(self, principal: str, *, by: str) -> dict[str, Any]:
        principal = _checked(principal)
        was = await self.store.unsuspend(principal)
        log.warning("trading_unsuspended", principal=principal, by=by, was_suspended=was)
        await self._write(f"UNSUSPEND {principal} by {by}")
        return {"principal": principal, "suspended": False, "was_suspended": was}

    async def cancel_open(self, principal: str) -> dict[str, Any]:
        """Cancel ``principal``'s open orders and lists now (protective exits stay)."""
        async with self._cancel_lock:
            if self.canceller is None:
                result: dict[str, Any] = {
                    "orders_cancelled": 0,
                    "lists_cancelled": 0,
                    "failures": [self.no_canceller],
                }
            else:
                result = await self.canceller(principal)
            log.warning("principal_cancel_open", principal=principal, **result)
            await self._write(
                f"CANCEL-OPEN {principal}: {result.get('orders_cancelled', 0)} orders, "
                f"{result.get('lists_cancelled', 0)} lists cancelled"
                + (f"; {len(result['failures'])} failed" if result.get("failures") else "")
            )
            return result

    async def carry_out_pending(self) -> int:
        """Carry out the cancel-open requests other processes wrote; how many."""
        queue = self._queue()
        done = 0
        for seq, principal in await queue.pending_cancels():
            result = await self.cancel_open(principal)
            await queue.record_cancel(seq, result)
            done += 1
        return done

    def _queue(self) -> CancelRequestQueue:
        if not isinstance(self.store, CancelRequestQueue):
            raise TypeError(f"{type(self.store).__name__} keeps no cancel-open requests to carry out")
        return self.store

    async def watch(self) -> None:
        """Supervised task: notice cancel requests written by other processes within ``poll_s``."""
        queue = self._queue()
        seen: int | None = None
        while True:
            version = await queue.data_version()
            if version != seen:
                seen = version
                await self.carry_out_pending()
            await asyncio.sleep(self.poll_s)  # a poll schedule: SQLite offers no cross-process notification


def _checked(principal: str) -> str:
    if not isinstance(principal, str) or not principal.strip() or len(principal) > 200:
        raise ValueError("principal must be the principal of a token or an OAuth client (1-200 characters)")
    return principal.strip()
