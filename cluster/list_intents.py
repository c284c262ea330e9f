"""Order lists (``place_oco``) in a cluster: recorded at a front, admitted and sent once by the
account's order leader, followed by its mirror, listed and cancelled at any front.

A list intent is a row of ``cluster_order_intents`` of kind ``list``, keyed by the list's client id
(Binance's ``listClientOrderId``), its request a :class:`brokers.models.ListRequest`; the legs'
client ids are in ``cluster_list_legs`` (cluster/orders.py, migration 4).  It moves through the
states of an order's intent and keeps their guarantees (cluster/orders.py):

- **Admission** (the order leader, cluster/order_leader.py ``send_queued``): every leg through steps
  1-6 of the guard at one reference price (cluster/leader_admission.py ``check_list``: filters, allowed
  symbols, the per-order limit on each leg), then the halt switch and the daily limit in the leader's
  fenced transaction, counting the larger exit leg (only one of an OCO's legs can fill) as a single
  node's guard does.
- **Sending**: signed at the moment of the lease check (``place_list_signed_at``), so a paused
  ex-leader's request is refused by the exchange's ``recvWindow``; one request per claim, its answer
  recorded by the one send-once rule of a node and a cluster (brokers/orders/lifecycle.py).
- **Settling** (the order leader's ``settle``): a list a former leader may have sent, or whose answer was lost, is
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
(cluster/bracket_exits.py, brokers/orders/exits.py); the settlement arms such an exit again when the
exchange never received it, and the release arms it again when the exchange refused it for the order
rate (cluster/pg_order_journal.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import asyncpg
import orjson
import structlog

from brokers import OPEN, BrokerError, ExchangeList, ExchangeOrder, ListRequest, legs_of, state_name
from cluster.intent_listing import intent_listing
from cluster.orders import INTENTS_CHANNEL, LIST_JSON, LIST_REQUEST_JSON, Answer, OrderIntents

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


# --- the order leader's mirror -------------------------------------------------------------------
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
