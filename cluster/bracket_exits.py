"""Brackets on entries that are not one OTOCO list (a market entry) in a cluster: the exit OCO the
order leader places once the entry has filled — the single node's procedure (brokers/orders/brackets.py)
on PostgreSQL, with the cluster's once-only sending (cluster/orders.py, cluster/list_intents.py).

1. **Recorded together** (:func:`submit_bracket`, a front): the entry's order intent (``queued``) and
   the exit's order-list intent (``waiting``, ``entry_client_order_id`` naming the entry) in one
   transaction.  The exit's list and leg ids derive from the entry's id (brokers/orders/brackets.py
   ``bracket_ids``), so they cannot be taken by anything else.
2. **Admitted together**: the leader claims the entry as any order and checks it and both exit
   legs at one reference price (cluster/leader_admission.py ``check_bracket``), counting the entry
   plus the larger exit leg against the daily limit in the entry's fenced admission.  The exit is
   never counted again.
3. **Released** (:func:`release_due`, every leader round): an exit whose entry is done with something
   filled — FILLED, or CANCELED / EXPIRED after a partial fill, from the order's answer, a settlement or
   the account mirror — is sized to what the entry acquired (brokers/orders/brackets.py ``exit_quantity``, the
   single node's rule: its executed quantity less a commission taken in the base asset, from the answer's
   fills or the trades the account mirror stored, at most the planned quantity, rounded down to the
   LOT_SIZE step) and claimed in one transaction fenced by
   the lease that also reads the halt switch: ``waiting`` → ``sending`` under the leader's token.
   Halted: it stays ``waiting`` and goes out after the resume.  Only then is it signed and sent
   (``list_intents.send_claimed``); the answer is recorded as any list's.
4. **Once**: a leader that dies after the claim leaves the exit ``sending`` under its token; the next
   leader settles it by ``listClientOrderId`` after the exchange's ``recvWindow`` — found →
   ``placed``; never received → ``waiting`` again, so it is released (and sent) once more: an exit
   protects a position already held, so it is not dropped like an order whose caller can retry.
5. **Rate-limited**: the exchange refusing the send for the account's order rate (HTTP 429, -1015:
   a definite "not placed", :class:`RateLimitedError`) does not end the exit either: in one fenced
   transaction it goes ``sending`` → ``waiting`` again (its legs' rows are the list's membership,
   recorded with the intent, and stay), its answer the refusal with a not-before time —
   PostgreSQL's clock plus ``Retry-After`` — that every leader's release honours, so it is claimed
   and sent again, with the same ids, once the wait is over.  A real refusal (balance, filters)
   is ``rejected``.
6. **Void**: an entry rejected, withdrawn, or cancelled or expired with nothing filled never gets its
   exit — ``void`` (as on a single node), nor does one whose fill is less than one LOT_SIZE step after
   fees; ``cancel_order`` on a waiting exit voids it too.

A front answers ``place_order`` with the entry's answer and the exit as ``bracket``, waiting up to
its answer time for the exit once the entry filled (``placed`` with its legs, ``rejected`` with the
exchange's reason, ``waiting`` while trading is halted or until a rate limit's wait is over).
"""

from __future__ import annotations

import dataclasses
import math
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import asyncpg
import orjson
import structlog

from brokers.models import TERMINAL, BrokerError, ExchangeOrder, ListRequest, OrderRequest, RateLimitedError
from brokers.orders.brackets import exit_quantity
from brokers.trade_simulation import refusal_code
from cluster import list_intents
from cluster.halt import ClusterHalted, check_not_halted_in, read_in
from cluster.lease import Lease
from cluster.orders import (
    ANSWERS_CHANNEL,
    LIST_REQUEST_JSON,
    ORDER_JSON,
    OrderIntents,
    answer_of,
    record_intent_in,
)
from storage import UNREACHABLE, PostgresDatabase, unreachable_as

if TYPE_CHECKING:
    from cluster.order_leader import OrderLeader

log = structlog.get_logger(__name__)


# --- a front's side ---------------------------------------------------------------------------
async def record_bracket_in(conn: asyncpg.Connection, account: str, entry: OrderRequest, exit_oco: ListRequest) -> None:
    """Inside the caller's transaction: the entry's queued intent and its exit waiting for the fill."""
    await record_intent_in(conn, account, entry)
    await list_intents.record_list_in(conn, account, exit_oco, entry_client_order_id=entry.client_order_id)


async def submit_bracket(intents: OrderIntents, account: str, entry: OrderRequest, exit_oco: ListRequest) -> None:
    """Record an entry and its bracket's exit for ``account``'s leader (one transaction)."""
    used = f"client_order_id {entry.client_order_id!r} (or its bracket's ids) was already used: choose a new one"
    await intents.record_with(lambda conn: record_bracket_in(conn, account, entry, exit_oco), used)


async def exit_view(intents: OrderIntents, account: str, exit_oco: ListRequest, *, wait_s: float) -> dict[str, Any]:
    """The bracket part of place_order's answer (the single node's states: waiting, claimed, placed,
    rejected, void), waiting up to ``wait_s`` for the exit to be sent — not while trading is halted."""
    db = intents.db
    list_id = exit_oco.list_client_id

    read = "SELECT client_order_id, state, answer, request FROM cluster_order_intents WHERE client_order_id = $1"

    async def settled() -> asyncpg.Record | None:
        row = await db.fetchrow(read, list_id)
        if row is None or row["state"] in ("placed", "rejected", "void"):
            return row
        if row["state"] == "waiting" and retry_at(row["answer"]) is not None:
            return row  # refused for the order rate: sent again after Retry-After, not within this answer
        return row if row["state"] == "waiting" and (await read_in(db, account)).halted else None

    with unreachable_as("bracket not read", db.where):
        row = await intents.wait_for(list_id, settled, wait_s) if wait_s > 0 else None
        if row is None:
            row = await db.fetchrow(read, list_id)
    state = "void" if row is None else row["state"]
    if state == "placed":  # the legs as sent: sized to what the entry acquired
        sent = LIST_REQUEST_JSON.validate_json(row["request"])
        return {**list_intents.list_result(answer_of(row), sent), "state": "placed"}
    view: dict[str, Any] = {"list_id": list_id, "kind": exit_oco.kind, "state": state}
    if state in ("rejected", "void"):
        view["error"] = answer_of(row).error if row is not None else None
    elif state == "waiting":
        with unreachable_as("bracket not read", db.where):
            halted = (await read_in(db, account)).halted
        not_before = retry_at(row["answer"]) if row is not None else None
        if halted:
            view["note"] = "trading is halted: the order leader places the exit OCO when trading resumes"
        elif not_before is not None:
            view["error"] = answer_of(row).error
            view["note"] = (
                "the exchange's order rate limit refused the exit OCO (nothing was placed); the order leader "
                f"sends it again after {_iso(not_before)}"
            )
        else:
            view["note"] = "the order leader places the exit OCO once the entry has filled"
    else:
        view["state"] = "claimed"
        view["note"] = "the order leader is sending the exit OCO; get_orders shows it (it is never sent twice)"
    return view


async def void_waiting(db: PostgresDatabase | asyncpg.Connection, list_id: str, why: str) -> bool:
    """A waiting exit becomes ``void`` with ``why`` (False when it is no longer waiting)."""
    tag = await db.execute(
        "UPDATE cluster_order_intents SET state = 'void', answer = $2, answered_at = clock_timestamp()"
        " WHERE client_order_id = $1 AND state = 'waiting'",
        list_id,
        orjson.dumps({"error": why}).decode(),
    )
    if tag.endswith(" 0"):
        return False
    await db.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, list_id)
    log.info("bracket_void", list_client_id=list_id, why=why)
    return True


# --- the order leader's side --------------------------------------------------------------------
async def release_due(leader: OrderLeader) -> int:
    """Every waiting exit whose entry has an answer: voided, or sized, claimed and sent (see the
    module docstring); returns how many were sent or voided."""
    lease = leader.lease
    if lease is None:
        return 0
    rows = await leader.db.fetch(
        "SELECT x.client_order_id, x.request, e.state AS entry_state, e.answer AS entry_answer"
        " FROM cluster_order_intents x JOIN cluster_order_intents e ON e.client_order_id = x.entry_client_order_id"
        " WHERE x.account = $1 AND x.state = 'waiting' AND e.state IN ('placed', 'rejected')"
        " AND COALESCE((x.answer::jsonb ->> 'not_before')::float8, 0) <= extract(epoch FROM clock_timestamp())"
        " ORDER BY x.created_at",
        leader.account,
    )
    if rows and (await read_in(leader.db, leader.account)).halted:
        return 0  # they wait for the resume (the claim reads the switch again, fenced)
    done = 0
    for row in rows:
        if not lease.may_act():
            break
        done += await _release(leader, lease, row)
    return done


async def _release(leader: OrderLeader, lease: Lease, row: Any) -> int:
    list_id = row["client_order_id"]
    body: dict[str, Any] = orjson.loads(row["entry_answer"]) if row["entry_answer"] else {}
    entry = ORDER_JSON.validate_python(body["order"]) if body.get("order") is not None else None
    if row["entry_state"] == "rejected" or entry is None:
        why = f"bracket void: its entry was not placed ({body.get('error') or 'rejected'})"
        return int(await void_waiting(leader.db, list_id, why))
    if entry.status not in TERMINAL:
        return 0  # still working (a stop entry, a partly filled limit): the account mirror brings its end
    if entry.executed_qty <= 0:
        why = f"bracket void: its entry ended {entry.status} with nothing filled (of {entry.orig_qty})"
        return int(await void_waiting(leader.db, list_id, why))
    req = await _sized(leader, LIST_REQUEST_JSON.validate_json(row["request"]), entry)
    if req == "nothing":
        why = f"bracket void: its entry filled {entry.executed_qty}, less than one LOT_SIZE step after fees"
        return int(await void_waiting(leader.db, list_id, why))
    if req is None or not await _claim(leader, lease, req):
        return 0
    try:
        await list_intents.send_claimed(leader, req, lease, raise_rate_limited=True)
    except RateLimitedError as exc:  # not placed: armed again, not before Retry-After
        await _rate_limited(leader, lease, req, entry, exc)
        return 0
    answer = await leader.db.fetchrow(
        "SELECT state, answer FROM cluster_order_intents WHERE client_order_id = $1", list_id
    )
    if answer is not None and answer["state"] == "rejected":  # the position it should protect is unprotected
        log.error("bracket_exit_refused", list_client_id=list_id, entry=entry.client_order_id, answer=answer["answer"])
    return 1


async def _sized(
    leader: OrderLeader, req: ListRequest, entry: ExchangeOrder
) -> ListRequest | Literal["nothing"] | None:
    """The exit for what the entry acquired; None when the rules or the entry's fills cannot be read
    now (the next round tries again), ``"nothing"`` when nothing is left to exit."""
    try:
        rules = await leader.broker.rules(req.symbol)
    except BrokerError as exc:
        log.warning("bracket_exit_not_sized", list_client_id=req.list_client_id, error=str(exc))
        return None
    fills = [(f.quantity, f.commission, f.commission_asset) for f in entry.fills]
    if sum((q for q, _, _ in fills), Decimal(0)) < entry.executed_qty:  # an answer without its fills (a
        fills = [  # settlement's, the mirror's): the trades the account mirror stored (cluster/account_fills.py)
            (Decimal(r["quantity"]), Decimal(r["commission"]), r["commission_asset"])
            for r in await leader.db.fetch(
                "SELECT quantity, commission, commission_asset FROM cluster_account_fills"
                " WHERE account = $1 AND symbol = $2 AND client_order_id = ANY($3::text[])",
                leader.account,
                req.symbol,
                [entry.client_order_id, entry.exchange_order_id or entry.client_order_id],
            )  # myTrades names the exchange's order id (brokers/binance/broker.py trades)
        ]
    if rules is None or sum((q for q, _, _ in fills), Decimal(0)) < entry.executed_qty:
        return None  # the mirror stores the entry's trades within one refresh
    assert req.stop.quantity is not None
    fee = sum((c for _, c, asset in fills if asset == rules.base_asset), Decimal(0))
    qty = exit_quantity(
        req.stop.quantity, entry_side=entry.side, executed=entry.executed_qty, base_fee=fee, step=rules.step_size
    )
    if qty <= 0:
        return "nothing"
    if qty == req.stop.quantity:
        return req
    return dataclasses.replace(
        req,
        take_profit=dataclasses.replace(req.take_profit, quantity=qty),
        stop=dataclasses.replace(req.stop, quantity=qty),
    )


async def _claim(leader: OrderLeader, lease: Lease, req: ListRequest) -> bool:
    """``waiting`` → ``sending`` under the lease's token, the halt switch read in the same fenced
    transaction; False while halted (it stays waiting) or when it is no longer waiting."""
    async with leader.db.transaction() as conn:
        await lease.fence(conn)
        try:
            await check_not_halted_in(conn, leader.account)
        except ClusterHalted:
            return False  # placed by a round after the resume
        tag = await conn.execute(
            "UPDATE cluster_order_intents SET state = 'sending', sender_token = $2, claimed_at = clock_timestamp(),"
            " request = $3, answer = NULL WHERE client_order_id = $1 AND state = 'waiting'",
            req.list_client_id,
            lease.token,
            LIST_REQUEST_JSON.dump_json(req).decode(),
        )
    return not tag.endswith(" 0")


async def _rate_limited(
    leader: OrderLeader, lease: Lease, req: ListRequest, entry: ExchangeOrder, exc: RateLimitedError
) -> None:
    """``sending`` → ``waiting`` under this leader's token, the refusal and its not-before (PostgreSQL's
    clock + Retry-After, epoch seconds) as the answer; the waiting front is woken.  PostgreSQL away: the
    intent is recorded ``unknown`` (kept until it is back), so it is settled by its listClientOrderId —
    absent, it is armed again (cluster/list_intents.py ``settle``)."""
    cid = req.list_client_id
    try:
        async with leader.db.transaction() as conn:
            not_before = await conn.fetchval(
                "UPDATE cluster_order_intents SET state = 'waiting', sender_token = NULL, claimed_at = NULL,"
                " answered_at = NULL, answer = jsonb_build_object('error', $3::text, 'code', $4::text,"
                " 'not_before', extract(epoch FROM clock_timestamp())::float8 + $5::float8)::text"
                " WHERE client_order_id = $1 AND sender_token = $2 AND state = 'sending'"
                " RETURNING (answer::jsonb ->> 'not_before')::float8",
                cid,
                lease.token,
                str(exc),
                refusal_code(exc),
                exc.retry_after_s,
            )
            if not_before is not None:
                await conn.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, cid)
    except (*UNREACHABLE, asyncpg.PostgresError) as err:
        log.warning("bracket_exit_not_rearmed", list_client_id=cid, error=repr(err))
        await leader.record(cid, lease.token, "unknown", {"error": str(exc)})
        return
    if not_before is not None:
        log.warning(
            "bracket_exit_rate_limited", list_client_id=cid, entry=entry.client_order_id,
            retry_at=_iso(not_before), retry_after_s=exc.retry_after_s, error=str(exc),
        )  # fmt: skip


def retry_at(answer_text: str | None) -> float | None:
    """A waiting exit's not-before (epoch seconds) after an order-rate refusal; None when it has none."""
    if not answer_text:
        return None
    value = orjson.loads(answer_text).get("not_before")
    return None if value is None else float(value)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(t)))
