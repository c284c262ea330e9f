"""A cluster's order journal: exits, answers, settlements in PostgreSQL (``cluster_order_intents``), fenced by a lease.

Implements :class:`~brokers.orders.journal.ExitJournal` for the one exit procedure
(:class:`~brokers.orders.exits.ExitProcedure`), which the order leader drives every round.  The fence is
the leader's lease token, checked in the same transaction as every write that may lead to a send (the
claim); a stale leader's later writes match no row (they name its token and the state it left).  States
(cluster/orders.py): ``waiting`` → ``sending`` under the token → ``placed`` / ``rejected`` (recorded by
the send, cluster/order_leader.py ``send_exit``) / ``waiting`` again after an order-rate refusal, its
not-before — PostgreSQL's clock plus Retry-After — kept in the answer, so every leader honours it;
``void``.  An entry's trades come from its answer, else from the account mirror's stored trades
(cluster/account_fills.py), since a settlement's or the mirror's answer carries no fills.

One journal serves one round under one lease: the leader makes one per round (cluster/order_leader.py
``journal``) under the lease that round holds; a claim after that lease ended is fenced out.
:class:`PgAnswers` records what :func:`~brokers.orders.lifecycle.send_once` came to for an intent
the leader claimed: under its token, and only while the intent is still where the leader left it.
:class:`PgSettlement` is the settlement journal (brokers/orders/settle.py): the intents in doubt, listed
once no request of theirs can still reach the exchange, and the cluster's rule for one it never got.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, Protocol, TypeVar

import asyncpg
import orjson
import structlog

from brokers import (
    BrokerError,
    EntryEnd,
    EntryFill,
    ExchangeList,
    ExchangeOrder,
    Kind,
    ListRequest,
    RateLimitedError,
    Unresolved,
    WaitingExit,
    refusal_code,
)
from cluster.halt import ClusterHalted, check_not_halted_in, read_in
from cluster.lease import Lease
from cluster.orders import ANSWERS_CHANNEL, LIST_JSON, LIST_REQUEST_JSON, ORDER_JSON, REQUEST_JSON, State
from storage import UNREACHABLE, PostgresDatabase

log = structlog.get_logger(__name__)


class Recorder(Protocol):
    """Records an intent's answer under a token, if it is still ``was`` (default: ``sending`` or
    ``unknown``) — cluster/order_leader.py ``OrderLeader.record``."""

    async def __call__(
        self, client_order_id: str, token: int, state: State, body: dict[str, Any], *, was: str | None = None
    ) -> bool: ...


T_contra = TypeVar("T_contra", contravariant=True)


def order_body(order: ExchangeOrder) -> dict[str, Any]:
    """A placed order's answer body."""
    return {"order": ORDER_JSON.dump_python(order)}


def list_body(lst: ExchangeList) -> dict[str, Any]:
    """A placed order list's answer body."""
    return {"list": LIST_JSON.dump_python(lst)}


class PgAnswers(Generic[T_contra]):
    """The answers to intents claimed under ``token`` (an :class:`~brokers.orders.lifecycle.AnswerJournal`):
    ``body`` is a placed answer's JSON body (``{"order": …}``, ``{"list": …}``).  ``keep_rate_limited``
    (a bracket's exit): an order-rate refusal is not recorded — the intent stays ``sending`` under the
    token for the exit procedure to put back to ``waiting`` (:meth:`PgOrderJournal.rearm_exit`)."""

    def __init__(
        self,
        record: Recorder,
        token: int,
        body: Callable[[T_contra], dict[str, Any]],
        *,
        keep_rate_limited: bool = False,
    ) -> None:
        self.record = record
        self.token = token
        self.body = body
        self.keep_rate_limited = keep_rate_limited

    async def placed(self, intent_id: str, answer: T_contra) -> None:
        await self.record(intent_id, self.token, "placed", self.body(answer))

    async def refused(self, intent_id: str, exc: BrokerError) -> None:
        if self.keep_rate_limited and isinstance(exc, RateLimitedError):
            return
        await self.record(intent_id, self.token, "rejected", {"error": str(exc), "code": refusal_code(exc)})

    async def unknown(self, intent_id: str, error: str) -> None:
        await self.record(intent_id, self.token, "unknown", {"error": error})


async def void_waiting(db: PostgresDatabase | asyncpg.Connection, list_id: str, why: str) -> bool:
    """A waiting exit becomes ``void`` with ``why`` (False when it is no longer waiting); the caller logs it."""
    tag = await db.execute(
        "UPDATE cluster_order_intents SET state = 'void', answer = $2, answered_at = clock_timestamp()"
        " WHERE client_order_id = $1 AND state = 'waiting'",
        list_id,
        orjson.dumps({"error": why}).decode(),
    )
    if tag.endswith(" 0"):
        return False
    await db.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, list_id)
    return True


class PgOrderJournal:
    """``account``'s bracket exits in PostgreSQL, written under ``lease`` (see the module docstring)."""

    def __init__(self, db: PostgresDatabase, account: str, lease: Lease, *, record: Recorder) -> None:
        self.db = db
        self.account = account
        self.lease = lease
        self.record = record
        self._entries: dict[str, ExchangeOrder] = {}
        """The entries of the exits listed by :meth:`exits_due`, by the exit's list id."""

    def may_send(self) -> bool:
        return self.lease.may_act()

    async def exits_due(self) -> Sequence[WaitingExit]:
        rows = await self.db.fetch(
            "SELECT x.client_order_id, x.request, e.client_order_id AS entry_id, e.state AS entry_state,"
            " e.answer AS entry_answer FROM cluster_order_intents x"
            " JOIN cluster_order_intents e ON e.client_order_id = x.entry_client_order_id"
            " WHERE x.account = $1 AND x.state = 'waiting' AND e.state IN ('placed', 'rejected')"
            " AND COALESCE((x.answer::jsonb ->> 'not_before')::float8, 0) <= extract(epoch FROM clock_timestamp())"
            " ORDER BY x.created_at",
            self.account,
        )
        if rows and (await read_in(self.db, self.account)).halted:
            return []  # they wait for the resume (the claim reads the switch again, fenced)
        out = []
        for row in rows:
            planned = LIST_REQUEST_JSON.validate_json(row["request"])
            body: dict[str, Any] = orjson.loads(row["entry_answer"]) if row["entry_answer"] else {}
            entry = ORDER_JSON.validate_python(body["order"]) if body.get("order") is not None else None
            if row["entry_state"] == "rejected" or entry is None:
                refusal = str(body.get("error") or "rejected")
                out.append(WaitingExit(planned, EntryEnd(row["entry_id"], "", None, Decimal(0), refusal=refusal)))
                continue
            self._entries[planned.list_client_id] = entry
            end = EntryEnd(entry.client_order_id, entry.side, entry.status, entry.executed_qty, entry.orig_qty)
            out.append(WaitingExit(planned, end))
        return out

    async def entry_fills(self, exit_: WaitingExit) -> Sequence[EntryFill]:
        entry = self._entries.get(exit_.planned.list_client_id)
        if entry is None:
            return []
        fills = [EntryFill(f.quantity, f.commission, f.commission_asset) for f in entry.fills]
        if sum((f.quantity for f in fills), Decimal(0)) >= entry.executed_qty:
            return fills
        # an answer without its fills (a settlement's, the mirror's): the trades the account mirror stored;
        # myTrades names the exchange's order id (brokers/binance/broker.py trades)
        rows = await self.db.fetch(
            "SELECT quantity, commission, commission_asset FROM cluster_account_fills"
            " WHERE account = $1 AND symbol = $2 AND client_order_id = ANY($3::text[])",
            self.account,
            exit_.planned.symbol,
            [entry.client_order_id, entry.exchange_order_id or entry.client_order_id],
        )
        return [EntryFill(Decimal(r["quantity"]), Decimal(r["commission"]), r["commission_asset"]) for r in rows]

    async def claim_exit(self, req: ListRequest) -> bool:
        """``waiting`` → ``sending`` under the lease's token, the halt switch read in the same fenced
        transaction; False while halted (it stays waiting) or when it is no longer waiting."""
        async with self.db.transaction() as conn:
            await self.lease.fence(conn)
            try:
                await check_not_halted_in(conn, self.account)
            except ClusterHalted:
                return False  # placed by a round after the resume
            tag = await conn.execute(
                "UPDATE cluster_order_intents SET state = 'sending', sender_token = $2, claimed_at = clock_timestamp(),"
                " request = $3, answer = NULL WHERE client_order_id = $1 AND state = 'waiting'",
                req.list_client_id,
                self.lease.token,
                LIST_REQUEST_JSON.dump_json(req).decode(),
            )
        return not str(tag).endswith(" 0")

    async def rearm_exit(self, req: ListRequest, exc: RateLimitedError) -> float | None:
        """``sending`` → ``waiting`` under this lease's token, the refusal and its not-before (PostgreSQL's
        clock + Retry-After, epoch seconds) as the answer; the waiting front is woken.  PostgreSQL away:
        the intent is recorded ``unknown`` (kept until it is back), so it is settled by its
        listClientOrderId — absent, it is armed again (:class:`PgSettlement`)."""
        cid = req.list_client_id
        try:
            async with self.db.transaction() as conn:
                not_before = await conn.fetchval(
                    "UPDATE cluster_order_intents SET state = 'waiting', sender_token = NULL, claimed_at = NULL,"
                    " answered_at = NULL, answer = jsonb_build_object('error', $3::text, 'code', $4::text,"
                    " 'not_before', extract(epoch FROM clock_timestamp())::float8 + $5::float8)::text"
                    " WHERE client_order_id = $1 AND sender_token = $2 AND state = 'sending'"
                    " RETURNING (answer::jsonb ->> 'not_before')::float8",
                    cid,
                    self.lease.token,
                    str(exc),
                    refusal_code(exc),
                    exc.retry_after_s,
                )
                if not_before is not None:
                    await conn.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, cid)
        except (*UNREACHABLE, asyncpg.PostgresError) as err:
            log.warning("bracket_exit_not_rearmed", list_client_id=cid, error=repr(err))
            await self.record(cid, self.lease.token, "unknown", {"error": str(exc)})
            return None
        return None if not_before is None else float(not_before)

    async def exit_refused(self, req: ListRequest, error: str) -> bool:
        """The send recorded the refusal (cluster/order_leader.py ``send_exit``): True when the exit
        is ``rejected`` (not when the answer is kept for a later round, or the exit was settled otherwise)."""
        try:
            state = await self.db.fetchval(
                "SELECT state FROM cluster_order_intents WHERE client_order_id = $1", req.list_client_id
            )
        except (*UNREACHABLE, asyncpg.PostgresError):
            return False
        return bool(state == "rejected")

    async def exit_placed(self, req: ListRequest) -> None:
        return None  # the send recorded the placed answer

    async def void_exit(self, list_client_id: str, why: str) -> bool:
        return await void_waiting(self.db, list_client_id, why)


NEVER_RECEIVED_ORDER = (
    "not sent: the order leader stopped while sending it and the exchange never received"
    " it; not retried so that it can never be placed twice — place it again if still wanted"
)
NEVER_RECEIVED_LIST = (
    "not sent: the order leader stopped while sending the order list and the exchange never"
    " received it; not retried so that it can never be placed twice — place it again if still wanted"
)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A cluster intent in doubt, as the settlement left it: its sender's token, its state then, and
    whether it is a bracket's exit (it has an entry)."""

    token: int
    was: str
    exit_: bool


class PgSettlement:
    """``account``'s intents in doubt in PostgreSQL, settled under ``lease`` (a
    :class:`~brokers.orders.settle.SettleJournal`, for :func:`~brokers.orders.settle.settle_intents`).

    Listed once no request of theirs can still reach the exchange, on PostgreSQL's clock: an
    ``unknown`` one (the answer was lost) ``window_s`` (``recvWindow`` + margin) after it was recorded;
    a former leader's ``sending`` one (a token older than the lease's) once ``inherited_due`` — the
    leader has led for ``window_s``: its predecessor's requests were signed before its lease ended,
    which was before this one began.  Found → ``placed``; absent → ``rejected`` with the text saying
    why, or — a bracket's exit, which protects a filled entry — back to ``waiting``, for the release
    sweep to claim and send again, halt switch checked.  Every answer is written under the sender's
    token and only while the intent is still where it was (``was``)."""

    lookup_failed: Mapping[Kind, str] = {"order": "order_settle_query_failed", "list": "order_list_settle_query_failed"}

    def __init__(
        self,
        db: PostgresDatabase,
        account: str,
        lease: Lease,
        *,
        window_s: float,
        inherited_due: bool,
        record: Recorder,
    ) -> None:
        self.db = db
        self.account = account
        self.lease = lease
        self.window_s = window_s
        self.inherited_due = inherited_due
        self.record = record

    async def unresolved(self) -> Sequence[Unresolved[Claimed]]:
        rows = await self.db.fetch(
            "SELECT client_order_id, kind, request, state, sender_token, entry_client_order_id"
            " FROM cluster_order_intents WHERE account = $1"
            " AND ((state = 'unknown' AND answered_at < clock_timestamp() - make_interval(secs => $3))"
            "  OR ($4 AND state = 'sending' AND sender_token < $2))",
            self.account,
            self.lease.token,
            self.window_s,
            self.inherited_due,
        )
        out: list[Unresolved[Claimed]] = []
        for row in rows:
            kind: Kind = "list" if row["kind"] == "list" else "order"
            req = (LIST_REQUEST_JSON if kind == "list" else REQUEST_JSON).validate_json(row["request"])
            held = Claimed(int(row["sender_token"]), row["state"], row["entry_client_order_id"] is not None)
            out.append(Unresolved(row["client_order_id"], kind, req.symbol, True, held))
        return out

    async def found(self, intent: Unresolved[Claimed], answer: ExchangeOrder | ExchangeList) -> str | None:
        body = order_body(answer) if isinstance(answer, ExchangeOrder) else list_body(answer)
        return await self._record(intent, "placed", body)

    async def absent(self, intent: Unresolved[Claimed]) -> str | None:
        if intent.kind == "list" and intent.held.exit_:  # a bracket's exit protects a filled entry: armed again
            return "settled" if await self._rearm_unsent(intent) else None
        why = NEVER_RECEIVED_LIST if intent.kind == "list" else NEVER_RECEIVED_ORDER
        return await self._record(intent, "rejected", {"error": why})

    async def _record(self, intent: Unresolved[Claimed], state: State, body: dict[str, Any]) -> str | None:
        recorded = await self.record(intent.intent_id, intent.held.token, state, body, was=intent.held.was)
        return "settled" if recorded else None

    async def _rearm_unsent(self, intent: Unresolved[Claimed]) -> bool:
        """A bracket's exit the exchange never received (its sender died, or the answer was lost) goes back
        to ``waiting`` from where it was, under its sender's token.  Safe only once no request of the
        earlier send can still be accepted (:meth:`unresolved` waits for that)."""
        tag = await self.db.execute(
            "UPDATE cluster_order_intents SET state = 'waiting', sender_token = NULL, claimed_at = NULL,"
            " answer = NULL, answered_at = NULL WHERE client_order_id = $1 AND sender_token = $2 AND state = $3",
            intent.intent_id,
            intent.held.token,
            intent.held.was,
        )
        log.warning("bracket_exit_rearmed", list_client_id=intent.intent_id, was=intent.held.was)
        return not str(tag).endswith(" 0")
