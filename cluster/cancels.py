"""``cancel_order`` in a cluster: a front records a cancel request; the account's order leader, which
alone holds the exchange keys, carries it out and records the outcome.

A request (``cluster_order_cancels``, keyed by the order's client order id) is ``queued`` →
``done`` | ``failed``.  The front (:func:`request_cancel`) checks what it can without the exchange —
the order is the caller's (or the caller is an admin), it was placed, and the account mirror last saw
it open — then records the request and wakes the leader in one transaction, and waits for the
outcome on ``cluster_order_answers`` (payload ``cancel <client order id>``).  An intent still queued
(no leader took it yet) is withdrawn instead: it is never sent.

The leader (:func:`carry_out`, each round of cluster/order_leader.py) cancels by client order id
and records the outcome fenced by its lease, writing the exchange's view of the order into the
intent's answer (so ``get_orders`` shows it at once).  Cancelling is idempotent on the exchange's
side, so unlike placing it needs no hand-over wait: a cancel that a dead leader may already have
sent is simply sent again, and the exchange's "unknown order" answer is settled by asking for the
order — cancelled (by either request) → ``done``; filled or expired → ``failed`` with its state.  A
late cancel from a paused ex-leader can only cancel what a client asked to cancel.

An order list (cluster/list_intents.py) is cancelled whole, as on a single node: ``cancel_order``
with the list's id or one leg's id records the request under the list's id, and the leader sends
``DELETE orderList``; an "unknown list" answer is settled by reading the list.

:class:`IntentOwnership` answers whose an open order or list is — the owner of its intent (a leg's:
its list's) — for the halt switch's cancel-open scoped to a principal's own orders (cluster/halt.py),
and, for a suspended or revoked principal's cancel-open, leaves its protective exits out.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson
import structlog

from brokers import (
    OPEN,
    Actor,
    Broker,
    BrokerError,
    ExchangeList,
    ExchangeOrder,
    OrderInputError,
    OrderRejected,
    state_name,
)
from cluster import list_intents
from cluster.lease import Lease
from cluster.orders import ANSWERS_CHANNEL, INTENTS_CHANNEL, LIST_REQUEST_JSON, ORDER_JSON, REQUEST_JSON, OrderIntents
from cluster.pg_order_journal import void_waiting
from storage import PostgresDatabase, unreachable_as

log = structlog.get_logger(__name__)

CANCELLED = frozenset({"CANCELED", "EXPIRED", "EXPIRED_IN_MATCH"})
"""Exchange states in which an order no longer rests and did not fill further: a cancel's goal."""


_OWNER_SQL = (
    "SELECT i.owner, i.entry_client_order_id IS NOT NULL AS bracket_exit, leg.leg,"
    " (SELECT w.client_order_id FROM cluster_list_legs w WHERE w.list_client_order_id = i.client_order_id"
    "  AND w.leg = 'working') AS working"
    " FROM cluster_order_intents i LEFT JOIN cluster_list_legs leg ON leg.client_order_id = $2"
    " WHERE i.account = $1 AND i.client_order_id = COALESCE(leg.list_client_order_id, $2)"
)


class IntentOwnership:
    """Owners of ``account``'s orders and lists as their intents record them (None: not placed through
    the cluster, so no principal owns it).

    For the owners in ``keep_exits_of`` (a suspended or revoked principal's cancel-open, cluster/halt.py
    ``stop``) a protective exit counts as nobody's, so it is not cancelled — as on a single node
    (brokers/suspensions.py): the exit OCO of a bracket (its intent has an entry: it is only sent once
    the entry filled), and an OTOCO's exit legs once its working order is no longer open (``open_ids``:
    the exchange's open orders when the cancel began; None when they could not be read, and then every
    OTOCO's exits stay).  ``kept`` collects the exit legs so spared."""

    def __init__(
        self,
        db: PostgresDatabase,
        account: str,
        *,
        keep_exits_of: frozenset[str] = frozenset(),
        open_ids: frozenset[str] | None = None,
    ) -> None:
        self.db = db
        self.account = account
        self.keep_exits_of = keep_exits_of
        self.open_ids = open_ids
        self.kept: set[str] = set()

    async def _owner(self, client_id: str, *, leg: bool) -> str | None:
        row = await self.db.fetchrow(_OWNER_SQL, self.account, client_id)
        if row is None:
            return None
        owner: str | None = row["owner"]
        if owner is None or owner not in self.keep_exits_of:
            return owner
        working: str | None = row["working"]
        exit_leg = row["leg"] != "working"  # a list itself (no leg) goes with its exits
        filled = working is not None and (self.open_ids is None or working not in self.open_ids)
        if row["bracket_exit"] or (exit_leg and filled):
            if leg:
                self.kept.add(client_id)
            return None
        return owner

    async def order_owner(self, client_order_id: str) -> str | None:
        return await self._owner(client_order_id, leg=True)

    async def list_owner(self, list_client_id: str) -> str | None:
        return await self._owner(list_client_id, leg=False)


def answer_key(client_order_id: str) -> str:
    """The ``cluster_order_answers`` payload announcing a cancel's outcome."""
    return f"cancel {client_order_id}"


async def request_cancel(
    intents: OrderIntents, account: str, order_id: Any, *, actor: Actor, answer_wait_s: float
) -> dict[str, Any]:
    """cancel_order at a front (see the module docstring): ``{"ok": True}`` when cancelled, a
    ``Pending`` answer when the leader has not carried the request out within ``answer_wait_s``;
    raises OrderInputError (nothing to cancel) or OrderRejected (the exchange refused)."""
    if order_id is None or order_id == "":
        raise OrderInputError("order_id is required")
    if not isinstance(order_id, str) or len(order_id) > 64:
        raise OrderInputError("order_id must be the id place_order returned")
    db = intents.db
    with unreachable_as("order not cancelled", db.where):  # a leg of an order list: the whole list
        list_id = await db.fetchval(
            "SELECT list_client_order_id FROM cluster_list_legs WHERE client_order_id = $1", order_id
        )
    order_id = list_id or order_id
    for _ in range(2):  # a second look when a leader claimed a queued intent while we withdrew it
        with unreachable_as("order not cancelled", db.where):
            row = await db.fetchrow(
                "SELECT owner, state, answer, kind FROM cluster_order_intents"
                " WHERE client_order_id = $1 AND account = $2",
                order_id,
                account,
            )
        if row is None or not actor.may_act_on(row["owner"]):
            raise OrderInputError(f"order not found: {order_id}")
        if row["state"] == "waiting":  # a bracket's exit not sent yet (cluster/bracket_exits.py): never sent
            why = "bracket void: cancelled (cancel_order) before its entry filled; nothing was sent"
            with unreachable_as("order not cancelled", db.where):
                if await void_waiting(db, order_id, why):
                    log.info("bracket_void", list_client_id=order_id, why=why)
                    return {"ok": True, "list_id": order_id}
            continue
        if row["state"] != "queued":
            break
        if await intents.withdraw(order_id, "order cancelled (cancel_order) before it was sent; nothing was sent"):
            return {"ok": True}
    assert row is not None  # each round above either returned, raised or read a row
    state = row["state"]
    if state == "void":
        raise OrderInputError("invalid transition: Void \u2192 Cancelled")
    if state in ("queued", "sending", "unknown", "waiting"):
        raise OrderInputError(
            f"order {order_id} is being sent and its outcome is not known yet: cancel it again in a few seconds"
        )
    body: dict[str, Any] = orjson.loads(row["answer"]) if row["answer"] else {}
    if row["kind"] == "list":
        if not (state == "placed" and list_intents.list_open(row["answer"])):
            done = "Rejected" if state == "rejected" else "Done"
            raise OrderInputError(f"invalid transition: {done} \u2192 Cancelled")
    else:
        status = body["order"]["status"] if state == "placed" and body.get("order") else "REJECTED"
        if status not in OPEN:
            raise OrderInputError(f"invalid transition: {state_name(status)} \u2192 Cancelled")
    with unreachable_as("order not cancelled", db.where):
        async with db.transaction() as conn:
            await conn.execute(
                "INSERT INTO cluster_order_cancels (client_order_id, account, requested_by, state)"
                " VALUES ($1, $2, $3, 'queued') ON CONFLICT (client_order_id) DO UPDATE"
                " SET state = 'queued', answer = NULL, answered_at = NULL, requested_at = clock_timestamp(),"
                " requested_by = excluded.requested_by WHERE cluster_order_cancels.state <> 'queued'",
                order_id,
                account,
                actor.principal,
            )
            await conn.execute("SELECT pg_notify($1, $2)", INTENTS_CHANNEL, account)

    async def outcome() -> asyncpg.Record | None:
        found = await db.fetchrow(
            "SELECT state, answer FROM cluster_order_cancels WHERE client_order_id = $1 AND state <> 'queued'",
            order_id,
        )
        return found

    carried = await intents.wait_for(answer_key(order_id), outcome, answer_wait_s)
    if carried is None:
        return {
            "ok": False,
            "status": "Pending",
            "order_id": order_id,
            "note": f"the cancel is recorded but the order leader has not carried it out within {answer_wait_s:g} s"
            " (chartgen cluster status shows the leader); it will, and get_orders shows the outcome",
        }
    if carried["state"] == "failed":
        raise OrderRejected(orjson.loads(carried["answer"])["error"])
    return {"ok": True, "list_id": order_id} if row["kind"] == "list" else {"ok": True}


async def carry_out(db: PostgresDatabase, broker: Broker, lease: Lease, account: str, *, batch: int = 20) -> int:
    """The leader's side: carry out up to ``batch`` queued cancel requests; returns how many."""
    rows = await db.fetch(
        "SELECT c.client_order_id, i.request, i.kind FROM cluster_order_cancels c"
        " JOIN cluster_order_intents i USING (client_order_id)"
        " WHERE c.account = $1 AND c.state = 'queued' ORDER BY c.requested_at LIMIT $2",
        account,
        batch,
    )
    done = 0
    for row in rows:
        if not lease.may_act():
            break
        cid = row["client_order_id"]
        answer: str | None = None
        try:
            if row["kind"] == "list":
                symbol = LIST_REQUEST_JSON.validate_json(row["request"]).symbol
                lst, error = await _cancel_list(broker, symbol, cid)
                answer = None if lst is None else list_intents.answer_text(lst)
            else:
                req = REQUEST_JSON.validate_json(row["request"])
                order, error = await _cancel(broker, req.symbol, cid)
                answer = (
                    None
                    if order is None
                    else orjson.dumps({"order": ORDER_JSON.dump_python(order)}, default=str).decode()
                )  # as the leader
        except Exception as exc:  # one request that cannot be carried out must not stop the leader's rounds
            log.exception("order_cancel_failed", client_order_id=cid)
            answer, error = None, f"not cancelled: the order leader failed ({type(exc).__name__}); cancel it again"
        async with db.transaction() as conn:
            await lease.fence(conn)
            tag = await conn.execute(
                "UPDATE cluster_order_cancels SET state = $2, answer = $3, answered_at = clock_timestamp()"
                " WHERE client_order_id = $1 AND state = 'queued'",
                cid,
                "failed" if error is not None else "done",
                orjson.dumps({"error": error} if error is not None else {}).decode(),
            )
            if answer is not None:
                await conn.execute(
                    "UPDATE cluster_order_intents SET answer = $2 WHERE client_order_id = $1 AND state = 'placed'",
                    cid,
                    answer,
                )
            if not tag.endswith(" 0"):
                await conn.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, answer_key(cid))
        done += 1
        log.info("order_cancel", client_order_id=cid, ok=error is None, error=error)
    return done


async def _cancel_list(broker: Any, symbol: str, list_id: str) -> tuple[ExchangeList | None, str | None]:
    """An order list's :func:`_cancel`: ``DELETE orderList``, else what the exchange knows of it."""
    try:
        return await broker.cancel_list(symbol, list_id), None
    except BrokerError as exc:
        refused = exc
    try:
        found = await broker.query_list(list_id)
    except BrokerError as exc:
        return None, f"not cancelled: {refused}; the list's state could not be read either ({exc}): cancel it again"
    if found is None:
        return None, f"order list not found on the exchange: {list_id} ({refused})"
    if not found.done:
        return found, f"not cancelled: {refused}"
    if all(o.status in CANCELLED for o in found.orders if o.status):
        return found, None
    return found, "invalid transition: Done \u2192 Cancelled"


async def _cancel(broker: Broker, symbol: str, client_order_id: str) -> tuple[ExchangeOrder | None, str | None]:
    """Cancel on the exchange: (the order after it, None) when it no longer rests; (the order if
    known, why) when it was not cancelled.  Never retried by the leader: the caller may ask again."""
    try:
        return await broker.cancel(symbol, client_order_id), None
    except BrokerError as exc:
        refused = exc
    try:  # already cancelled (by an earlier request of a leader that died), filled, or never there?
        found = await broker.query(symbol, client_order_id)
    except BrokerError as exc:
        return None, f"not cancelled: {refused}; the order's state could not be read either ({exc}): cancel it again"
    if found is None:
        return None, f"order not found on the exchange: {client_order_id} ({refused})"
    if found.status in CANCELLED:
        return found, None
    if found.status in OPEN:
        return found, f"not cancelled: {refused}"
    return found, f"invalid transition: {state_name(found.status)} \u2192 Cancelled"
