"""Binance order lists (OCO, OTOCO) for :class:`~brokers.binance.broker.BinanceBroker`, and their parsing.

Owns the list half of the Binance broker, mixed into it: ``POST /api/v3/orderList/oco``
(python-binance 1.0.37's ``create_oco_order``), ``POST /api/v3/orderList/otoco``
(``v3_post_order_list_otoco``), ``DELETE /api/v3/orderList`` (``v3_delete_order_list``),
``GET /api/v3/orderList`` (``v3_get_order_list``, by ``origClientOrderId`` = the list's client id)
and ``GET /api/v3/openOrderList`` (``get_open_oco_orders``) — all through the client's own
signed methods, behind the broker's guarded call (rate limits, clock resync, unknown outcomes).

Our legs map to Binance's above / below orders by side: a SELL list's take-profit is the
above order and its stop the below order; a BUY list's stop is above and its take-profit below.
List answers carry ``orderReports`` (full order views, applied to the legs) where the endpoint
gives them; ``GET orderList``, ``openOrderList`` and ``listStatus`` events list only the legs'
ids, and :meth:`BinanceListsMixin.query_list` then asks for each leg's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from brokers.binance.signing import signed_at
from brokers.models import BrokerError, ExchangeList, ExchangeOrder, ListRequest, OrderRequest
from brokers.protocol import ListHandler


def _d(v: Any) -> Decimal:
    return Decimal(str(v))


def _f(v: Decimal) -> str:
    return format(v, "f")


def id_only(symbol: str, client_order_id: str, order_id: Any, list_client_id: str) -> ExchangeOrder:
    """A leg known only by its ids (no state: ``status`` is empty and nothing is applied from it)."""
    return ExchangeOrder(
        symbol=symbol, client_order_id=client_order_id, status="", side="BUY", type="", orig_qty=Decimal(0),
        executed_qty=Decimal(0), cumulative_quote=Decimal(0), exchange_order_id=str(order_id),
        list_client_id=list_client_id,
    )  # fmt: skip


def list_from_rest(res: dict[str, Any], parse_order: Callable[[dict[str, Any]], ExchangeOrder]) -> ExchangeList:
    """A list answer (place, cancel, query, open) as an :class:`ExchangeList`; legs with their full
    report where ``orderReports`` has one, else by id only."""
    list_id = str(res["listClientOrderId"])
    reports = {str(r.get("clientOrderId")): r for r in res.get("orderReports", []) or []}
    reports |= {
        str(r.get("origClientOrderId")): r for r in res.get("orderReports", []) or [] if r.get("origClientOrderId")
    }
    orders = []
    for o in res.get("orders", []) or []:
        cid = str(o.get("clientOrderId"))
        report = reports.get(cid)
        if report is not None:
            view = parse_order({**report, "clientOrderId": cid, "listClientOrderId": list_id})
            orders.append(view)
        else:
            orders.append(id_only(str(o.get("symbol", res.get("symbol"))), cid, o.get("orderId"), list_id))
    return ExchangeList(
        symbol=str(res.get("symbol", "")),
        list_client_id=list_id,
        contingency_type=str(res.get("contingencyType", "")),
        list_status_type=str(res.get("listStatusType", "")),
        list_order_status=str(res.get("listOrderStatus", "")),
        orders=tuple(orders),
        exchange_list_id=None if res.get("orderListId") is None else str(res.get("orderListId")),
        transaction_time_ms=res.get("transactionTime"),
    )


def list_from_event(e: dict[str, Any]) -> ExchangeList:
    """A ``listStatus`` user-stream event (legs by id only)."""
    list_id = str(e["C"])
    return ExchangeList(
        symbol=str(e.get("s", "")),
        list_client_id=list_id,
        contingency_type=str(e.get("c", "")),
        list_status_type=str(e.get("l", "")),
        list_order_status=str(e.get("L", "")),
        orders=tuple(
            id_only(str(o.get("s", e.get("s"))), str(o.get("c")), o.get("i"), list_id) for o in e.get("O", [])
        ),
        exchange_list_id=None if e.get("g") is None else str(e.get("g")),
        transaction_time_ms=e.get("T"),
    )


def _leg_params(prefix: str, leg: OrderRequest) -> dict[str, Any]:
    """One leg's parameters under Binance's prefix (``above``, ``below``, ``pendingAbove``, …)."""
    p: dict[str, Any] = {f"{prefix}Type": leg.type, f"{prefix}ClientOrderId": leg.client_order_id}
    if leg.price is not None:
        p[f"{prefix}Price"] = _f(leg.price)
    if leg.stop_price is not None:
        p[f"{prefix}StopPrice"] = _f(leg.stop_price)
    if leg.trailing_delta is not None:
        p[f"{prefix}TrailingDelta"] = leg.trailing_delta
    if leg.type in ("STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"):
        p[f"{prefix}TimeInForce"] = leg.time_in_force or "GTC"
    return p


def list_params(req: ListRequest) -> dict[str, Any]:
    """The request parameters of ``POST orderList/oco`` or ``orderList/otoco`` (without recvWindow)."""
    side = req.stop.side
    above, below = (req.take_profit, req.stop) if side == "SELL" else (req.stop, req.take_profit)
    quantity = req.stop.quantity
    assert quantity is not None
    params: dict[str, Any] = {"symbol": req.symbol, "listClientOrderId": req.list_client_id, "newOrderRespType": "FULL"}
    if req.kind == "OCO":
        params |= {"side": side, "quantity": _f(quantity)}
        return params | _leg_params("above", above) | _leg_params("below", below)
    w = req.working
    assert w is not None and w.quantity is not None and w.price is not None
    params |= {
        "workingType": w.type, "workingSide": w.side, "workingClientOrderId": w.client_order_id,
        "workingPrice": _f(w.price), "workingQuantity": _f(w.quantity), "pendingSide": side,
        "pendingQuantity": _f(quantity),
    }  # fmt: skip
    if w.type == "LIMIT":
        params["workingTimeInForce"] = w.time_in_force or "GTC"
    return params | _leg_params("pendingAbove", above) | _leg_params("pendingBelow", below)


class BinanceListsMixin:
    """Order-list methods of the Binance broker (uses its ``_call``, ``_client`` and ``_recv_window``)."""

    list_kinds = frozenset({"OCO", "OTOCO"})
    _list_handler: ListHandler | None = None
    _client: Any
    _recv_window: int
    _call: Callable[..., Awaitable[Any]]
    query: Callable[[str, str], Awaitable[ExchangeOrder | None]]

    def _order_view(self, o: dict[str, Any]) -> ExchangeOrder:
        raise NotImplementedError

    def set_list_handler(self, handler: ListHandler) -> None:
        self._list_handler = handler

    async def emit_list(self, lst: ExchangeList) -> None:
        if self._list_handler is not None:
            await self._list_handler(lst)

    async def place_list(self, req: ListRequest) -> ExchangeList:
        params = list_params(req) | {"recvWindow": self._recv_window}
        if req.kind == "OCO":
            res = await self._call(self._client.create_oco_order, order=True, new_order=True, **params)
        elif req.kind == "OTOCO":
            res = await self._call(self._client.v3_post_order_list_otoco, order=True, new_order=True, **params)
        else:
            raise ValueError(f"unknown list kind {req.kind}")
        return list_from_rest(res, self._order_view)

    async def place_list_signed_at(self, req: ListRequest, timestamp_ms: int) -> ExchangeList:
        """:meth:`place_list`, the request signed with ``timestamp_ms`` (a cluster's order leader:
        brokers/binance/signing.py says why)."""
        with signed_at(timestamp_ms):
            return await self.place_list(req)

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        res = await self._call(
            self._client.v3_delete_order_list,
            symbol=symbol,
            listClientOrderId=list_client_id,
            recvWindow=self._recv_window,
        )
        return list_from_rest(res, self._order_view)

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        try:
            res = await self._call(
                self._client.v3_get_order_list, origClientOrderId=list_client_id, recvWindow=self._recv_window
            )
        except BrokerError as exc:
            if exc.data.get("binance_code") in (-2011, -2013, -1102):
                return None
            raise
        lst = list_from_rest(res, self._order_view)
        legs = []
        for o in lst.orders:
            full = await self.query(o.symbol, o.client_order_id) if not o.status else o
            legs.append(o if full is None else dataclasses.replace(full, list_client_id=lst.list_client_id))
        return ExchangeList(
            lst.symbol, lst.list_client_id, lst.contingency_type, lst.list_status_type, lst.list_order_status,
            tuple(legs), lst.exchange_list_id, lst.transaction_time_ms,
        )  # fmt: skip

    async def open_lists(self) -> list[ExchangeList]:
        rows = await self._call(self._client.get_open_oco_orders, recvWindow=self._recv_window)
        return [list_from_rest(r, self._order_view) for r in rows or []]
