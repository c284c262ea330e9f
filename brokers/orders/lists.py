"""Order lists above the broker: place_oco, cancelling a whole list, list events and reconciliation.

Owns what the order service does with OCO / OTOCO lists (the bracket lifecycle is
:mod:`brokers.orders.brackets`): building a list's legs (:func:`oco_request`), admitting every leg
through the guard (:meth:`~brokers.orders.guard.OrderGuard.admit_list`: filters and limits on each leg,
all intents in one transaction), sending it once (a lost answer leaves the legs UNKNOWN and the
list is looked up by its ``listClientOrderId``, never re-sent), applying the exchange's list
views (REST answers, ``listStatus`` events, reconciliation) and describing lists and legs for
get_orders.  Lists learnt from the exchange belong to no owner (admin only).

Leg types: a SELL OCO is a LIMIT_MAKER take-profit above the market and a STOP_LOSS (or
STOP_LOSS_LIMIT) below; a BUY OCO's take-profit lies below the market, where Binance takes no
LIMIT_MAKER (``belowType``), so it is a TAKE_PROFIT_LIMIT at the same price, and its stop lies above.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import structlog

from brokers.models import (
    STOP_TYPES,
    Actor,
    BrokerError,
    ExchangeList,
    ListKind,
    ListRequest,
    OrderRejected,
    OrderRequest,
    OrderType,
    RateLimitedError,
    Side,
    state_name,
)
from brokers.orders.args import OrderInputError, parse_oco
from brokers.orders.args import plain_decimal as plain
from brokers.orders.journal import ExitSent
from brokers.orders.lifecycle import send_once
from brokers.orders.list_store import LIVE_LIST_STATUSES, ListRow, ListStore, legs_of
from brokers.orders.settle import settle_intents
from brokers.orders.sqlite_answers import SqliteListAnswers
from brokers.orders.sqlite_settle import SqliteListSettlement

if TYPE_CHECKING:
    from brokers.orders.service import OrderService
    from brokers.orders.store import OrderRow

log = structlog.get_logger(__name__)


def list_kinds(broker: Any) -> frozenset[str]:
    """The order lists a broker places natively (none when it does not say: fail closed)."""
    kinds: object = getattr(broker, "list_kinds", frozenset())
    return frozenset(kinds) if isinstance(kinds, (set, frozenset)) else frozenset()


def oco_request(
    *,
    symbol: str,
    side: Side,
    quantity: Decimal,
    take_profit: Decimal,
    stop: Decimal,
    stop_limit: Decimal | None,
    list_client_id: str,
    ids: tuple[str, str],
    owner: str | None,
    working: OrderRequest | None = None,
) -> ListRequest:
    """An OCO (or, with ``working``, an OTOCO) exiting on ``side``; ``ids`` are the take-profit's and the stop's."""
    tp_type: OrderType = "LIMIT_MAKER" if side == "SELL" else "TAKE_PROFIT_LIMIT"
    sl_type: OrderType = "STOP_LOSS" if stop_limit is None else "STOP_LOSS_LIMIT"
    tp = OrderRequest(
        symbol, side, tp_type, ids[0], quantity=quantity, price=take_profit, owner=owner,
        time_in_force=None if tp_type == "LIMIT_MAKER" else "GTC",
        stop_price=None if tp_type == "LIMIT_MAKER" else take_profit, list_client_id=list_client_id,
    )  # fmt: skip
    sl = OrderRequest(
        symbol, side, sl_type, ids[1],
        quantity=quantity, price=stop_limit, stop_price=stop, time_in_force=None if stop_limit is None else "GTC",
        owner=owner, list_client_id=list_client_id,
    )  # fmt: skip
    kind: ListKind = "OCO" if working is None else "OTOCO"
    return ListRequest(kind, symbol, list_client_id, tp, sl, working=working, owner=owner)


def new_oco(p: dict[str, Any], last: Decimal, owner: str | None) -> ListRequest:
    """place_oco's list (parsed by :func:`brokers.orders.args.parse_oco`) with fresh ids, once its
    prices lie on either side of ``last``, the market price (OrderInputError naming them otherwise)."""
    tp, stop = p["take_profit_price"], p["stop_price"]
    if p["side"] == "SELL" and not tp > last > stop:
        raise OrderInputError(
            f"a sell OCO needs take_profit_price > last price {plain(last)} > stop_price; "
            f"got take_profit_price {plain(tp)} and stop_price {plain(stop)}"
        )
    if p["side"] == "BUY" and not tp < last < stop:
        raise OrderInputError(
            f"a buy OCO needs take_profit_price < last price {plain(last)} < stop_price; "
            f"got take_profit_price {plain(tp)} and stop_price {plain(stop)}"
        )
    base = f"oco-{uuid.uuid4().hex[:24]}"
    return oco_request(
        symbol=p["symbol"], side=p["side"], quantity=p["quantity"], take_profit=tp, stop=stop,
        stop_limit=p["stop_limit_price"], list_client_id=base, ids=(f"{base}-tp", f"{base}-sl"), owner=owner,
    )  # fmt: skip


def check_order_type(broker: Any, order_type: str) -> None:
    """Refuse an order type the broker does not take (``broker.order_types``; without one, the
    three plain types) before anything is recorded or sent."""
    types = getattr(broker, "order_types", None)
    allowed = types if isinstance(types, (set, frozenset)) else frozenset({"MARKET", "LIMIT", "LIMIT_MAKER"})
    if order_type not in allowed:
        raise OrderInputError(
            f"{broker.name} does not support {order_type.lower()} orders; it takes "
            f"{', '.join(sorted(t.lower() for t in allowed))}"
        )


class OrderLists:
    """The list operations of one :class:`~brokers.orders.service.OrderService`."""

    def __init__(self, service: OrderService) -> None:
        self.svc = service
        self.store = ListStore(service.store.db)
        self._in_flight: set[str] = set()
        setter = getattr(service.broker, "set_list_handler", None)
        if callable(setter):
            setter(self.on_list_update)

    def require(self, kind: str) -> None:
        """Refuse before anything is recorded when the venue places no such list."""
        if kind not in list_kinds(self.svc.broker):
            raise OrderInputError(
                f"{self.svc.broker.name} does not support {kind} order lists; place the orders one by one "
                "(stop_loss / take_profit types) or use a venue that has them (binance)"
            )

    # --- place_oco ---------------------------------------------------------------------------
    async def place_oco(self, args: dict[str, Any], owner: str | None) -> dict[str, Any]:
        return await self.place_parsed_oco(parse_oco(args), owner=owner)

    async def place_parsed_oco(self, p: dict[str, Any], *, owner: str | None) -> dict[str, Any]:
        """An OCO parsed by :func:`brokers.orders.args.parse_oco` (the tool edge parses once)."""
        self.require("OCO")
        ref = await self.svc.guard.reference_price(p["symbol"])
        req = new_oco(p, ref.price, owner)
        await self.svc.guard.admit_list(req)
        return await self.send(req)

    async def send(self, req: ListRequest, *, rearm_rate_limited: bool = False) -> dict[str, Any]:
        """Send a list whose legs are recorded (PENDING_SUBMIT); once — a lost answer is looked up later.

        A refusal marks the list and its legs REJECTED and is raised — except, with
        ``rearm_rate_limited`` (a claimed bracket's exit, :meth:`send_exit`), a
        :class:`RateLimitedError`: nothing reached the book, so the bracket goes back to ``waiting``
        (:meth:`ListStore.rearm_bracket`, while the list is still in flight here) and the error is raised
        for the caller to retry after ``retry_after_s``."""
        legs = legs_of(req)
        await self.svc.write_audit(
            [
                f"{self.svc.stamp()} SUBMITTED {leg.side} {leg.symbol} {plain(leg.quantity or 0)} "
                f"{leg.type}@{plain(leg.price or leg.stop_price or 0)} id={leg.client_order_id} "
                f"list={req.list_client_id} leg={role}"
                for leg, role in legs
            ]
        )
        answers = SqliteListAnswers(
            self.svc.store, self.store, [leg.client_order_id for leg, _ in legs], clock=self.svc.now,
            apply=self.on_list_update, rearm_rate_limited=rearm_rate_limited,
        )  # fmt: skip
        place = self.svc.broker.place_list
        self._in_flight.add(req.list_client_id)
        try:
            sent = await send_once(req.list_client_id, lambda: place(req), answers, contain_failures=False)
        finally:
            self._in_flight.discard(req.list_client_id)
        if sent.outcome == "refused":
            assert sent.error is not None
            raise sent.error
        out = await self.describe(req.list_client_id)
        if sent.outcome == "unknown":
            return {**out, "note": "the exchange's answer was lost; the list will be reconciled"}
        return out

    def in_flight(self, list_client_id: str) -> bool:
        """Whether this process is sending the list right now (reconciliation leaves it alone)."""
        return list_client_id in self._in_flight

    async def send_exit(self, req: ListRequest) -> ExitSent:
        """Send a bracket's claimed exit OCO (:class:`~brokers.orders.exits.ExitProcedure`'s sender):
        :meth:`send` with an order-rate refusal re-armed; a lost answer or a failed send is ``pending``
        (reconciliation looks the list up by its client id)."""
        try:
            await self.send(req, rearm_rate_limited=True)
        except RateLimitedError as exc:
            return ExitSent("rate_limited", str(exc), exc)
        except OrderRejected as exc:
            return ExitSent("refused", str(exc))
        except (BrokerError, OrderInputError) as exc:
            log.warning("bracket_send_failed", list_client_id=req.list_client_id, error=str(exc))
            return ExitSent("pending", str(exc))
        row = await self.store.get(req.list_client_id)
        return ExitSent("placed" if row is not None and row.status != "PENDING" else "pending")

    # --- exchange views -------------------------------------------------------------------
    async def on_list_update(self, lst: ExchangeList) -> None:
        """A list view from any source: record the list (learn it if unknown), apply its full leg reports."""
        now = self.svc.now()
        await self.store.learn(self.svc.broker.name, lst, now)
        for order in lst.orders:
            if order.status:  # id-only legs (listStatus events, GET orderList) carry no state
                await self.svc.on_update(order)

    async def cancel_if_list(self, order_id: str, order: OrderRow | None, actor: Actor) -> dict[str, Any] | None:
        """cancel_order on a list id, or on an open leg of a list (the caller's own): cancel the whole list;
        None when ``order_id`` is neither (a single order)."""
        if order is None:
            lst = await self.store.get(order_id)
            return None if lst is None else await self.cancel(lst, actor)
        if (
            order.list_client_id
            and order.status in ("NEW", "PARTIALLY_FILLED", "PENDING_NEW")
            and order.broker == self.svc.broker.name
            and actor.may_act_on(order.owner)
            and (lst := await self.store.get(order.list_client_id)) is not None
        ):
            return await self.cancel(lst, actor)
        return None

    async def cancel(self, row: ListRow, actor: Actor) -> dict[str, Any]:
        if row.broker != self.svc.broker.name or not actor.may_act_on(row.owner):
            raise OrderInputError(f"order not found: {row.list_client_id}")
        if row.bracket_state == "waiting":
            raise OrderInputError(
                f"{row.list_client_id} is the bracket of {row.entry_client_id}, not placed yet: cancel the entry "
                "order instead (its bracket is then never placed)"
            )
        if row.status not in LIVE_LIST_STATUSES:
            raise OrderInputError(f"invalid transition: {_list_state(row.status)} \u2192 Cancelled")
        result = await self.svc.broker.cancel_list(row.symbol, row.list_client_id)
        await self.on_list_update(result)
        return {"ok": True, "list_id": row.list_client_id}

    async def reconcile(self) -> dict[str, int]:
        """Learn open lists (placed here or elsewhere) and settle every list not known to be done: each is
        looked up with its legs (GET orderList, then each leg), since a list still open may have a leg
        that finished while the stream was away."""
        if not list_kinds(self.svc.broker):
            return {"lists_learned": 0, "lists_settled": 0}
        now = self.svc.now()
        open_ids: set[str] = set()
        learned = 0
        for lst in await self.svc.broker.open_lists():
            open_ids.add(lst.list_client_id)
            learned += await self.store.learn(self.svc.broker.name, lst, now)
        settlement = SqliteListSettlement(
            self.svc.store, self.store, self.svc.broker.name, now=now, grace_s=self.svc.unresolved_grace_s,
            in_flight=self.in_flight, apply=self.on_list_update,
        )  # fmt: skip
        settled = (await settle_intents(settlement, self.svc.broker))["settled"]
        return {"lists_learned": learned, "lists_settled": settled}

    # --- output shapes ----------------------------------------------------------------------
    async def describe(self, list_client_id: str) -> dict[str, Any]:
        row = await self.store.get(list_client_id)
        legs = await self.svc.store.db.fetchall(
            "SELECT client_order_id FROM orders WHERE list_client_id = ? ORDER BY rowid", (list_client_id,)
        )
        out_legs = []
        for r in legs:
            leg = await self.svc.store.get(r["client_order_id"])
            if leg is not None:
                out_legs.append(self.leg_view(leg))
        return {
            "list_id": list_client_id,
            "kind": None if row is None else row.kind,
            "list_status": None if row is None else row.status,
            "legs": out_legs,
        }

    @staticmethod
    def leg_view(row: OrderRow) -> dict[str, Any]:
        return {
            "order_id": row.client_order_id,
            "leg": row.leg,
            "side": row.side.lower(),
            "type": row.type.lower(),
            "quantity": None if row.quantity is None else float(row.quantity),
            "price": None if row.price is None else float(row.price),
            "stop_price": None if row.stop_price is None else float(row.stop_price),
            "state": state_name(row.status),
            "exchange_status": row.status,
            **({"triggered": row.triggered} if row.type in STOP_TYPES else {}),
        }

    async def annotate(self, rows: list[OrderRow]) -> dict[str, dict[str, Any]]:
        """get_orders' extra fields per order: stop fields, list membership, an entry's bracket."""
        lists = await self.store.by_ids({r.list_client_id for r in rows if r.list_client_id})
        brackets = await self.store.brackets_of([r.client_order_id for r in rows])
        extra: dict[str, dict[str, Any]] = {}
        for r in rows:
            fields: dict[str, Any] = {}
            if r.type in STOP_TYPES or r.stop_price is not None or r.trailing_delta is not None:
                fields["stop_price"] = None if r.stop_price is None else float(r.stop_price)
                fields["trailing_delta"] = r.trailing_delta
                fields["triggered"] = r.triggered
            if r.list_client_id:
                lst = lists.get(r.list_client_id)
                fields["list_id"] = r.list_client_id
                fields["list_kind"] = None if lst is None else lst.kind
                fields["leg"] = r.leg
            bracket = brackets.get(r.client_order_id)
            if bracket is not None:
                fields["bracket"] = {"list_id": bracket.list_client_id, "state": bracket.bracket_state}
            if fields:
                extra[r.client_order_id] = fields
        return extra


def _list_state(status: str) -> str:
    return {"ALL_DONE": "Done", "REJECTED": "Rejected", "VOID": "Cancelled"}.get(status, "Open")
