"""The order leader of an exchange account in a cluster: holds the lease ``orders/<account>``,
admits each queued intent (the guard rails and the halt switch: cluster/leader_admission.py),
sends it signed at the moment of its lease check, one at a time, and settles the intents a former
leader (or a lost answer) left unanswered; it drives the bracket exit procedure (brokers/orders/exits.py)
over PostgreSQL (cluster/pg_order_journal.py); it also carries out the halt switch's cancel-open
requests and clients' cancel requests (cluster/cancels.py).  cluster/orders.py explains the
protocol and why it never sends an order twice.

An answer it could not record (PostgreSQL away right after the exchange answered) is kept in memory
and recorded in a later round; if the process dies first, the next leader settles the intent by
asking the exchange (it is ``sending`` under an older token).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, Protocol, TypeVar

import asyncpg
import orjson
import structlog

from brokers import (
    PG_SUSPENSION_MIGRATIONS,
    Broker,
    BrokerError,
    ExchangeList,
    ExchangeOrder,
    ExitProcedure,
    ExitSent,
    ListRequest,
    OrderChecks,
    OrderRequest,
    RateLimitedError,
    SafetyLimits,
    Scope,
    Sent,
    send_once,
    settle_intents,
)
from cluster import cancels, leader_admission
from cluster.halt import HALT_MIGRATIONS, cancel_scope_in, read_in, record_cancel_in
from cluster.lease import LEASE_MIGRATIONS, Lease, LeaseLost, Leases
from cluster.orders import (
    ANSWERS_CHANNEL,
    INTENTS_CHANNEL,
    LIST_REQUEST_JSON,
    ORDER_MIGRATIONS,
    REQUEST_JSON,
    State,
    lease_name,
)
from cluster.pg_order_journal import PgAnswers, PgOrderJournal, PgSettlement, list_body, order_body
from storage import UNREACHABLE, PostgresDatabase

log = structlog.get_logger(__name__)

T = TypeVar("T")

ORDER_PATH_MIGRATIONS = (LEASE_MIGRATIONS, ORDER_MIGRATIONS, HALT_MIGRATIONS, PG_SUSPENSION_MIGRATIONS)
"""The tables the order path uses (leases, intents, the halt switch): what a leader needs migrated."""


class FencedSender(Broker, Protocol):
    """A venue that enforces a request time window, and a broker that can sign at a chosen time
    (BinanceBroker).  Venues without one (ccxt, paper) cannot be led from a cluster safely."""

    @property
    def recv_window_ms(self) -> int: ...

    def exchange_time_ms(self) -> int: ...

    async def place_signed_at(self, req: OrderRequest, timestamp_ms: int) -> ExchangeOrder: ...

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None: ...

    async def place_list_signed_at(self, req: ListRequest, timestamp_ms: int) -> ExchangeList: ...

    async def query_list(self, list_client_id: str) -> ExchangeList | None: ...

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList: ...


class OrderLeader:
    """One candidate for leading ``account``'s orders; :meth:`step` does one round of the job."""

    def __init__(
        self,
        db: PostgresDatabase,
        broker: FencedSender,
        *,
        account: str,
        member_id: str,
        ttl_s: float = 6.0,
        settle_margin_s: float = 1.0,
        batch: int = 1,
        limits: SafetyLimits | None = None,
    ) -> None:
        self.db = db
        self.broker = broker
        self.account = account
        self.member_id = member_id
        self.ttl_s = ttl_s
        self.recv_window_s = broker.recv_window_ms / 1000
        self.settle_margin_s = settle_margin_s
        self.batch = batch
        self.checks = OrderChecks(rules=broker.rules, ticker=broker.last_price, limits=limits)
        """Steps 1-6 of the guard rails, at the venue's ticker price (a leader follows no market)."""
        self.leases = Leases(db)
        self.lease: Lease | None = None
        self._led_since = 0.0
        self._renewed_at = 0.0
        self.degraded: str | None = None
        """Why the last round failed (PostgreSQL away, …), for readiness; None after a good round."""
        self.unrecorded: list[tuple[str, int, State, dict[str, Any]]] = []
        """Answers known here that PostgreSQL did not take yet: recorded again each round."""
        self.sent = 0
        self.refused = 0
        self.cancelled = 0
        """Cancel requests carried out (cluster/cancels.py)."""

    @property
    def leading(self) -> bool:
        return self.lease is not None and self.lease.may_act()

    async def step(self) -> int:
        """Hold or seek the lease, settle inherited intents when due, admit and send queued ones;
        returns how many queued intents this round handled (sent or refused: more may be queued)."""
        if not await self._hold():
            return 0
        await self._record_kept()
        await self.cancel_open_if_asked()
        await self.settle()
        handled = await self.send_queued()
        if self.lease is not None:
            await self.exits(self.lease).release_due()
            self.cancelled += await cancels.carry_out(self.db, self.broker, self.lease, self.account)
        return handled

    def journal(self, lease: Lease) -> PgOrderJournal:
        """The account's order journal in PostgreSQL, written under ``lease`` (cluster/pg_order_journal.py)."""
        return PgOrderJournal(self.db, self.account, lease, record=self.record)

    def exits(self, lease: Lease) -> ExitProcedure:
        """The bracket exit procedure (brokers/orders/exits.py) over PostgreSQL, fenced by ``lease``."""
        return ExitProcedure(self.journal(lease), self, self.broker.rules)

    async def send_exit(self, req: ListRequest) -> ExitSent:
        """Send a bracket's exit this leader claimed (the exit procedure's sender), recording the answer:
        an order-rate refusal is returned with nothing recorded, for the journal to re-arm."""
        lease = self.lease
        cid = req.list_client_id
        place_at = functools.partial(self.broker.place_list_signed_at, req)
        sent = (
            None if lease is None else await self._send_signed(cid, place_at, list_body, lease, keep_rate_limited=True)
        )
        if sent is None or sent.outcome == "unknown":
            return ExitSent("pending")
        if sent.outcome == "placed":
            return ExitSent("placed")
        if isinstance(sent.error, RateLimitedError):  # not placed: armed again, not before Retry-After
            return ExitSent("rate_limited", str(sent.error), sent.error)
        return ExitSent("refused", str(sent.error))

    async def _send_signed(
        self,
        client_order_id: str,
        place_at: Callable[[int], Awaitable[T]],
        body: Callable[[T], dict[str, Any]],
        lease: Lease,
        *,
        keep_rate_limited: bool = False,
    ) -> Sent[T] | None:
        """Sign an admitted intent at the moment of the lease check and send it once, recording the answer
        under the lease's token (brokers/orders/lifecycle.py); None, with nothing sent, when the lease may
        have ended — the request would leave after it (the next leader settles the intent)."""
        stamp = self.broker.exchange_time_ms()
        if not lease.may_act():
            log.warning("order_leader_stopped_sending", account=self.account, client_order_id=client_order_id)
            return None
        self.sent += 1
        answers = PgAnswers(self.record, lease.token, body, keep_rate_limited=keep_rate_limited)
        return await send_once(client_order_id, functools.partial(place_at, stamp), answers, contain_failures=True)

    async def _record_kept(self) -> None:
        kept, self.unrecorded = self.unrecorded, []
        for cid, token, state, body in kept:
            await self.record(cid, token, state, body)

    async def cancel_open_if_asked(self) -> dict[str, Any] | None:
        """Carry out the pending cancel-open requests, if any (its result is recorded): the halt
        switch's — every order's, or only the requesting principals' own — and a suspended or revoked
        principal's, which keep that principal's protective exits (cluster/halt.py)."""
        lease = self.lease
        state = await read_in(self.db, self.account)
        if lease is None or not state.cancel_pending:
            return None
        pending = await cancel_scope_in(self.db, self.account, state.cancel_done_seq, state.cancel_seq)
        open_ids: frozenset[str] | None = None
        failures: list[str] = []
        if pending.keep_exits_of:  # whether an OTOCO's working order still works, as the cancel begins
            try:
                open_ids = frozenset(o.client_order_id for o in await self.broker.open_orders())
            except BrokerError as exc:
                failures.append(f"listing open orders (every OTOCO's exits kept): {exc}")
        ownership = cancels.IntentOwnership(
            self.db, self.account, keep_exits_of=pending.keep_exits_of, open_ids=open_ids
        )
        outcome = await leader_admission.cancel_open_orders(self.broker, Scope(pending.owners, ownership))
        outcome.failures[:0] = failures
        result = outcome.as_dict() | {"protective_exits_kept": len(ownership.kept)}
        async with self.db.transaction() as conn:
            await lease.fence(conn)
            await record_cancel_in(conn, self.account, state.cancel_seq, result)
        log.warning("trading_halt_cancel_open", account=self.account, **result)
        return result

    async def _hold(self) -> bool:
        now = time.monotonic()
        if self.lease is not None and not self.lease.lost:
            if now - self._renewed_at >= self.ttl_s / 3:
                try:
                    await self.lease.renew()
                    self._renewed_at = now
                except LeaseLost:
                    log.warning("order_lease_lost", account=self.account, token=self.lease.token)
                    self.lease = None
            if self.lease is not None and self.lease.may_act():
                return True
            self.lease = None
        lease = await self.leases.acquire(lease_name(self.account), self.member_id, self.ttl_s)
        if lease is None:
            return False
        self.lease, self._led_since, self._renewed_at = lease, now, now
        log.info("order_leader", account=self.account, member=self.member_id, token=lease.token)
        return True

    async def send_queued(self) -> int:
        lease = self.lease
        if lease is None:
            return 0
        async with self.db.transaction() as conn:
            await lease.fence(conn)
            rows = await conn.fetch(
                "UPDATE cluster_order_intents SET state = 'sending', sender_token = $3, claimed_at = clock_timestamp()"
                " WHERE client_order_id IN (SELECT client_order_id FROM cluster_order_intents"
                "  WHERE account = $1 AND state = 'queued' ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
                " RETURNING client_order_id, kind, request, created_at, (SELECT x.request FROM cluster_order_intents x"
                "  WHERE x.entry_client_order_id = cluster_order_intents.client_order_id) AS exit_request",
                self.account,
                self.batch,
                lease.token,
            )
        handled = 0
        for row in sorted(rows, key=lambda r: r["created_at"]):
            sent: Sent[Any] | None
            if row["kind"] == "list":
                lst = LIST_REQUEST_JSON.validate_json(row["request"])
                if not await self.admitted(lst.list_client_id, leader_admission.check_list(self.checks, lst), lease):
                    handled += 1  # answered with the refusal
                    continue
                place_list = functools.partial(self.broker.place_list_signed_at, lst)
                sent = await self._send_signed(lst.list_client_id, place_list, list_body, lease)
            else:
                req = REQUEST_JSON.validate_json(row["request"])
                exit_oco = None if row["exit_request"] is None else LIST_REQUEST_JSON.validate_json(row["exit_request"])
                value = (  # a bracket's entry: its exit is checked and counted with it
                    leader_admission.check(self.checks, req)
                    if exit_oco is None
                    else leader_admission.check_bracket(self.checks, req, exit_oco)
                )
                if not await self.admitted(req.client_order_id, value, lease):
                    handled += 1  # answered with the refusal
                    continue
                place = functools.partial(self.broker.place_signed_at, req)
                sent = await self._send_signed(req.client_order_id, place, order_body, lease)
            if sent is None:  # not sent: the lease may have ended (its successor settles what is left)
                log.warning("order_leader_stopped_sending", account=self.account, left=len(rows) - handled)
                break
            handled += 1
        return handled

    async def admitted(self, client_order_id: str, value: Awaitable[Decimal], lease: Lease) -> bool:
        """The guard rails (``value``: steps 1-6, the intent's value) and the halt switch with the daily
        limit (cluster/leader_admission.py); a refusal is answered."""
        cid = client_order_id
        try:
            notional = await value
            async with self.db.transaction() as conn:
                await leader_admission.admit(
                    conn, lease, self.account, cid, notional, self.checks.limits.max_daily_notional
                )
        except leader_admission.Refused as exc:
            self.refused += 1
            body = {"error": str(exc), "refused": True, "code": exc.code}
            await self.record(cid, lease.token, "rejected", body)
            return False
        except (*UNREACHABLE, asyncpg.PostgresError) as exc:  # the halt switch and the limit were not read
            log.warning("order_admission_failed", client_order_id=cid, error=repr(exc))
            why = "not sent: the halt switch and the daily limit could not be read (PostgreSQL unreachable); retry"
            body = {"error": why, "refused": True, "code": "NETWORK_ERROR"}
            await self.record(cid, lease.token, "rejected", body)
            return False
        except LeaseLost:
            raise  # fenced out: the next leader settles this intent (it was not sent)
        except Exception as exc:  # fail closed: an order that could not be judged is not sent
            log.exception("order_admission_failed", client_order_id=cid)
            why = f"order refused: it could not be checked ({type(exc).__name__}); nothing was sent"
            body = {"error": why, "refused": True, "code": "INTERNAL_ERROR"}
            await self.record(cid, lease.token, "rejected", body)
            return False
        return True

    async def settle(self) -> int:
        """Intents that may have been sent but have no answer, once no such request can still reach
        the exchange — asked for by client order id; found → placed, absent → rejected (never sent
        again) or, a bracket's exit, armed again (brokers/orders/settle.py over
        cluster/pg_order_journal.py ``PgSettlement``).  A former leader's ``sending`` ones: its
        requests were signed before its lease ended, which was before ours began, so ``recvWindow`` +
        margin after taking over.  An ``unknown`` one (the answer was lost): ``recvWindow`` + margin
        after it was recorded, on the server's clock."""
        lease = self.lease
        if lease is None:
            return 0
        window = self.recv_window_s + self.settle_margin_s
        settlement = PgSettlement(
            self.db, self.account, lease, window_s=window,
            inherited_due=time.monotonic() - self._led_since >= window, record=self.record,
        )  # fmt: skip
        return sum((await settle_intents(settlement, self.broker)).values())

    async def record(
        self, client_order_id: str, token: int, state: State, body: dict[str, Any], *, was: str | None = None
    ) -> bool:
        """Store the answer if the intent is still where we left it; wakes the waiting front.  PostgreSQL
        away: the answer is kept and recorded in a later round (False now)."""
        try:
            async with self.db.transaction() as conn:
                tag = await conn.execute(
                    "UPDATE cluster_order_intents SET state = $2, answer = $3, answered_at = clock_timestamp()"
                    " WHERE client_order_id = $1 AND sender_token = $4 AND state = ANY($5::text[])",
                    client_order_id,
                    state,
                    orjson.dumps(body, default=str).decode(),
                    token,
                    [was] if was is not None else ["sending", "unknown"],
                )
                if tag.endswith(" 0"):
                    return False
                await conn.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, client_order_id)
        except (*UNREACHABLE, asyncpg.PostgresError) as exc:
            if was is None:  # a settlement (``was`` given) is simply done again by a later round
                self.unrecorded.append((client_order_id, token, state, body))
            log.warning("order_answer_not_recorded", client_order_id=client_order_id, state=state, error=repr(exc))
            return False
        return True

    async def resign(self) -> None:
        """Give the lease up (clean shutdown)."""
        if self.lease is not None:
            with contextlib.suppress(*UNREACHABLE, asyncpg.PostgresError):
                await self.lease.release()
            self.lease = None


async def run_leader(leader: OrderLeader, stop: asyncio.Event, *, idle_s: float = 0.5) -> None:
    """Run ``leader`` until ``stop``: a round on every new intent (``LISTEN``) and at least every
    ``idle_s`` (lease renewal, hand-over settling).  The daemon's cluster role will run this as a
    supervised task; tests and benches run it directly."""
    woken = asyncio.Event()

    def on_intent(payload: str) -> None:
        if payload == leader.account:
            woken.set()

    listener = leader.db.listener(INTENTS_CHANNEL, on_intent)
    try:
        while not stop.is_set():
            woken.clear()
            await listener.ensure()  # (re)connects after PostgreSQL was away; the round below re-reads
            try:
                handled = await leader.step()
                leader.degraded = None
            except LeaseLost as exc:  # fenced out mid-round: seek the lease again next round
                log.warning("order_leader_fenced_out", error=str(exc))
                leader.lease = None
                handled = 0
            except (*UNREACHABLE, asyncpg.PostgresError) as exc:
                leader.degraded = f"{type(exc).__name__}: {exc}"
                log.warning("order_leader_round_failed", error=leader.degraded)
                handled = 0
            if handled:
                continue  # more may be queued
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(woken, stop), idle_s)
    finally:
        await listener.close()
        await leader.resign()


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
