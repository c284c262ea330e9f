"""Order lists (``place_oco``) in a cluster: recorded at a front, admitted and sent once by the
account's order leader, followed by its mirror, listed and cancelled at any front.

A list intent is a row of ``cluster_order_intents`` of kind ``list``, keyed by the list's client id
(Binance's ``listClientOrderId``), its request a :class:`brokers.models.ListRequest`; the legs'
client ids are in ``cluster_list_legs`` (cluster/orders.py, migration 4).  It moves through the
states of an order's intent and keeps their guarantees (cluster/orders.py):

- **Admission** (:func:`send`): every leg through steps 1-6 of the guard at one reference price
  (cluster/leader_admission.py ``check_list``: filters, allowed symbols, the per-order limit on each
  leg), then the halt switch and the daily limit in the leader's fenced transaction, counting the
  larger exit leg (only one of an OCO's legs can fill) as a single node's guard does.
- **Sending**: signed at the moment of the lease check (``place_list_signed_at``), so a paused
  ex-leader's request is refused by the exchange's ``recvWindow``; one request per claim.
- **Settling** (:func:`settle`): a list a former leader may have sent, or whose answer was lost, is
  looked up by its ``listClientOrderId`` once no such request can still be accepted — found →
  ``placed`` with the exchange's view, absent → ``rejected`` ("not sent … not retried").  So every
  list reached the exchange once or was answered with an error; none is sent twice.
- **Following** (:func:`refresh_lists`, the leader's mirror job): the lists last seen executing are
  read again by id (``GET orderList`` and each leg), and their answers updated, so ``get_orders``
  at a front shows each leg's state and the fills mirror fetches the legs' trades.
- **Listing** (:func:`leg_listings`): ``get_orders`` lists the legs, each with ``list_id`` and ``leg``.
- **Cancelling** (cluster/cancels.py): ``cancel_order`` with the list id or one leg's id cancels
  the whole list (``DELETE orderList``), as on a single node.

A bracket on a limit entry (``place_order`` with ``bracket``) is one OTOCO list intent — the entry
working, its exit pending — as a single node sends it (cluster/front_orders.py).  On a market entry
the exit is an OCO list intent ``waiting`` for the entry's fill, released by the leader
(cluster/bracket_exits.py); :func:`settle` arms such an exit again when the exchange never received it,
and the release arms it again when the exchange refused it for the order rate (:func:`send_claimed`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import asyncpg
import orjson
import structlog

from brokers.models import (
    OPEN,
    BrokerError,
    ExchangeList,
    ExchangeOrder,
    ListRequest,
    OrderRejected,
    OutcomeUnknown,
    RateLimitedError,
    state_name,
)
from brokers.orders.list_store import legs_of
from brokers.trade_simulation import refusal_code
from cluster import leader_admission
from cluster.intent_listing import intent_listing
from cluster.lease import Lease
from cluster.orders import INTENTS_CHANNEL, LIST_JSON, LIST_REQUEST_JSON, Answer, OrderIntents, State

if TYPE_CHECKING:
    from cluster.order_leader import OrderLeader

log = structlog.get_logger(__name__)

LIVE = "EXECUTING"
"""An order list whose legs may still work (Binance ``listOrderStatus``)."""


# --- a front's side ---------------------------------------------------------------------------
async def record_list_in(
    conn: asyncpg.Connection, account: str, req: ListRequest, *, entry_client_order_id: str | None = None
) -> None:
    """Inside the caller's transaction: a ``queued`` list intent and its legs, the leader woken at
    commit — or, with ``entry_client_order_id``, a bracket's exit ``waiting`` for that entry's fill
    (cluster/bracket_exits.py).  A list or leg id already recorded raises ``UniqueViolationError``
    (ValueError: a leg id that is an order's)."""
    ids = [leg.client_order_id for leg, _ in legs_of(req)]
    taken = await conn.fetchval(
        "SELECT client_order_id FROM cluster_order_intents WHERE client_order_id = ANY($1::text[]) LIMIT 1", ids
    )
    if taken is not None:
        raise ValueError(f"client_order_id {taken!r} was already used: choose a new one")
    await conn.execute(
        "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, kind,"
        " entry_client_order_id) VALUES ($1, $2, $3, $4, $5, 'list', $6)",
        req.list_client_id,
        account,
        req.owner,
        LIST_REQUEST_JSON.dump_json(req).decode(),
        "queued" if entry_client_order_id is None else "waiting",
        entry_client_order_id,
    )
    await conn.executemany(
        "INSERT INTO cluster_list_legs (client_order_id, list_client_order_id, leg) VALUES ($1, $2, $3)",
        [(leg.client_order_id, req.list_client_id, role) for leg, role in legs_of(req)],
    )
    await conn.execute("SELECT pg_notify($1, $2)", INTENTS_CHANNEL, account)


async def submit_list(intents: OrderIntents, account: str, req: ListRequest) -> None:
    """Record ``req`` as queued for ``account``'s leader (:meth:`OrderIntents.record_with`)."""
    used = f"list id {req.list_client_id!r} (or one of its order ids) was already used"
    await intents.record_with(lambda conn: record_list_in(conn, account, req), used)


def list_result(answer: Answer, req: ListRequest) -> dict[str, Any]:
    """place_oco's answer for a placed list: the single node's shape (brokers/orders/lists.py ``describe``)."""
    lst = answer.order_list
    assert lst is not None
    views = {o.client_order_id: o for o in lst.orders}
    legs = []
    for leg, role in legs_of(req):
        seen = views.get(leg.client_order_id)
        status = seen.status if seen is not None and seen.status else "NEW"
        legs.append(
            {
                "order_id": leg.client_order_id,
                "leg": role,
                "side": leg.side.lower(),
                "type": leg.type.lower(),
                "quantity": None if leg.quantity is None else float(leg.quantity),
                "price": None if leg.price is None else float(leg.price),
                "stop_price": None if leg.stop_price is None else float(leg.stop_price),
                "state": state_name(status),
                "exchange_status": status,
            }
        )
    return {"list_id": req.list_client_id, "kind": req.kind, "list_status": list_status(lst), "legs": legs}


def list_status(lst: ExchangeList) -> str:
    """The single node's list status: EXECUTING, ALL_DONE or REJECTED."""
    return "REJECTED" if lst.list_order_status == "REJECT" else ("ALL_DONE" if lst.done else LIVE)


def leg_listings(r: Any) -> list[dict[str, Any]]:
    """get_orders' entries for a list intent's row: one per leg, the single node's listing with the
    list's id and the leg's role, in the state the mirror last saw."""
    req = LIST_REQUEST_JSON.validate_json(r["request"])
    body: dict[str, Any] = orjson.loads(r["answer"]) if r["answer"] else {}
    lst = LIST_JSON.validate_python(body["list"]) if body.get("list") is not None else None
    views = {o.client_order_id: o for o in lst.orders} if lst is not None else {}
    out = []
    if r["state"] == "void":
        return []  # a bracket's exit that was never sent: no legs on the exchange
    for leg, role in legs_of(req):
        seen = views.get(leg.client_order_id)
        if r["state"] == "rejected":
            status = "REJECTED"
        elif seen is not None and seen.status:
            status = seen.status
        else:
            status = "NEW" if lst is not None else "PENDING_SUBMIT"
        listing = intent_listing(leg, seen, status, r, body)
        stop = None if leg.stop_price is None else float(leg.stop_price)
        listing |= {"stop_price": stop, "trailing_delta": None, "triggered": bool(seen and seen.triggered)}
        listing |= {"list_id": req.list_client_id, "list_kind": req.kind, "leg": role}
        out.append(listing)
    return out


def list_open(answer_text: str | None) -> bool:
    """Whether a placed list intent's answer shows a leg that may still work."""
    body: dict[str, Any] = orjson.loads(answer_text) if answer_text else {}
    if body.get("list") is None:
        return False
    lst = LIST_JSON.validate_python(body["list"])
    return not lst.done and any(o.status in OPEN or not o.status for o in lst.orders)


# --- the order leader's side --------------------------------------------------------------------
async def send(leader: OrderLeader, request_json: str, lease: Lease) -> bool:
    """Admit and send one claimed list intent, recording the answer.  False when it was not sent
    because the lease may have ended (the next leader settles it); True once it is answered."""
    req = LIST_REQUEST_JSON.validate_json(request_json)
    cid = req.list_client_id
    if not await leader.admitted(cid, leader_admission.check_list(leader.checks, req), lease):
        return True  # answered with the refusal
    return await send_claimed(leader, req, lease)


async def send_claimed(
    leader: OrderLeader, req: ListRequest, lease: Lease, *, raise_rate_limited: bool = False
) -> bool:
    """Send a list intent this leader claimed and admitted, recording the answer (:func:`send`).

    ``raise_rate_limited`` (a bracket's exit, cluster/bracket_exits.py): a :class:`RateLimitedError` — a
    definite "not placed" — is raised with nothing recorded, the intent left ``sending`` under this
    leader's token for the caller to put back to ``waiting``; otherwise it is ``rejected`` as any refusal."""
    cid = req.list_client_id
    stamp = leader.broker.exchange_time_ms()
    if not lease.may_act():
        log.warning("order_leader_stopped_sending", account=leader.account, list_client_id=cid)
        return False
    leader.sent += 1
    try:
        lst = await leader.broker.place_list_signed_at(req, stamp)
    except OutcomeUnknown as exc:
        await leader.record(cid, lease.token, "unknown", {"error": str(exc)})
        return True
    except (OrderRejected, BrokerError) as exc:
        if raise_rate_limited and isinstance(exc, RateLimitedError):
            raise
        await leader.record(cid, lease.token, "rejected", {"error": str(exc), "code": refusal_code(exc)})
        return True
    except Exception as exc:  # whatever failed, the request may have left: settle by asking
        log.exception("order_list_send_failed", list_client_id=cid)
        await leader.record(cid, lease.token, "unknown", {"error": repr(exc)})
        return True
    await leader.record(cid, lease.token, "placed", {"list": LIST_JSON.dump_python(lst)})
    return True


async def settle(leader: OrderLeader, row: Any) -> int:
    """One list intent that may have been sent but has no answer (cluster/order_leader.py ``settle``
    chose it and its time): looked up by ``listClientOrderId``; 1 when its answer was recorded."""
    req = LIST_REQUEST_JSON.validate_json(row["request"])
    try:
        found = await leader.broker.query_list(req.list_client_id)
    except BrokerError as exc:
        log.warning("order_list_settle_query_failed", list_client_id=req.list_client_id, error=str(exc))
        return 0
    state: State
    if found is not None:
        body: dict[str, Any] = {"list": LIST_JSON.dump_python(found)}
        state = "placed"
    elif row["entry_client_order_id"] is not None:  # a bracket's exit protects a filled entry: armed again
        return await _rearm(leader, row)
    else:
        body = {
            "error": "not sent: the order leader stopped while sending the order list and the exchange never"
            " received it; not retried so that it can never be placed twice — place it again if still wanted"
        }
        state = "rejected"
    recorded = await leader.record(req.list_client_id, int(row["sender_token"]), state, body, was=row["state"])
    return 1 if recorded else 0


async def _rearm(leader: OrderLeader, row: Any) -> int:
    """A bracket's exit the exchange never received (its sender died, or the answer was lost) goes back
    to ``waiting``: the release sweep (cluster/bracket_exits.py) claims and sends it again, halt switch
    checked.  Safe only now — no request of the earlier send can still be accepted (``settle``'s wait)."""
    tag = await leader.db.execute(
        "UPDATE cluster_order_intents SET state = 'waiting', sender_token = NULL, claimed_at = NULL, answer = NULL,"
        " answered_at = NULL WHERE client_order_id = $1 AND sender_token = $2 AND state = $3",
        row["client_order_id"],
        row["sender_token"],
        row["state"],
    )
    log.warning("bracket_exit_rearmed", list_client_id=row["client_order_id"], was=row["state"])
    return 0 if tag.endswith(" 0") else 1


async def refresh_lists(
    db: Any, broker: Any, account: str, open_in: Callable[[str], Awaitable[dict[str, ExchangeOrder]]]
) -> list[tuple[str, str]]:
    """The leader's mirror: the answers to write (list id, answer text) for the lists last seen
    executing whose legs changed.  A list whose legs are all among its symbol's open orders
    (``open_in``: one request per symbol, shared with the single orders) takes their states from
    there; only a list with a leg no longer open — it finished or was cancelled — is read by id
    (``GET orderList`` and its legs), so the request weight grows with the lists that change, not
    with the lists that rest.  A list the exchange no longer knows is left as it was."""
    rows = await db.fetch(
        "SELECT client_order_id, answer FROM cluster_order_intents WHERE account = $1 AND kind = 'list'"
        " AND state = 'placed' AND answer::jsonb -> 'list' ->> 'list_order_status' = $2",
        account,
        LIVE,
    )
    changed: list[tuple[str, str]] = []
    for r in rows:
        if not list_open(r["answer"]):
            continue
        old = LIST_JSON.validate_python(orjson.loads(r["answer"])["list"])
        try:
            resting = await open_in(old.symbol)
            legs = [resting.get(o.client_order_id) for o in old.orders]
            if all(leg is not None for leg in legs):
                now: ExchangeList | None = dataclasses.replace(old, orders=tuple(leg for leg in legs if leg))
            else:
                now = await broker.query_list(r["client_order_id"])
        except BrokerError as exc:
            log.warning("account_mirror_list_failed", list_client_id=r["client_order_id"], error=str(exc))
            continue
        if now is not None and _leg_states(now) != _leg_states(old):
            changed.append((r["client_order_id"], answer_text(now)))
    return changed


def answer_text(lst: ExchangeList) -> str:
    return orjson.dumps({"list": LIST_JSON.dump_python(lst)}, default=str).decode()


def _leg_states(lst: ExchangeList) -> tuple[Any, ...]:
    def state(o: ExchangeOrder) -> tuple[str, str, Decimal, Decimal]:
        return (o.client_order_id, o.status, o.executed_qty, o.cumulative_quote)

    return (lst.list_order_status, *sorted(state(o) for o in lst.orders))
