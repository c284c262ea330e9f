"""The simulator's order-list records and their Binance shapes (REST ``orders`` / ``orderReports``,
the WS-API ``listStatus`` event); the rules that move them live in :mod:`simulator.order_lists`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.accounts import SimOrder, _s


@dataclass(frozen=True)
class Leg:
    """One order of a list as requested."""

    side: str
    otype: str
    qty: Decimal | None
    price: Decimal | None
    stop: Decimal | None
    delta: int | None
    tif: str | None
    client_id: str
    stp: str = "EXPIRE_MAKER"
    """The list's ``selfTradePreventionMode`` (the symbol's default unless sent)."""


@dataclass
class SimOrderList:
    list_id: int
    symbol: str
    list_client_id: str
    contingency: str
    order_ids: list[int]
    time_ms: int
    working_id: int | None = None
    oco_ids: tuple[int, ...] = ()
    pending_ids: tuple[int, ...] = ()
    status_type: str = "EXEC_STARTED"
    order_status: str = "EXECUTING"
    closing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status_type == "ALL_DONE"

    def view(self) -> dict[str, Any]:
        return {
            "orderListId": self.list_id,
            "contingencyType": self.contingency,
            "listStatusType": self.status_type,
            "listOrderStatus": self.order_status,
            "listClientOrderId": self.list_client_id,
            "transactionTime": self.time_ms,
            "symbol": self.symbol,
            "orders": [
                {"symbol": self.symbol, "orderId": i, "clientOrderId": self.extra["cid"][i]} for i in self.order_ids
            ],
        }


def order_report(order: SimOrder, now: int) -> dict[str, Any]:
    """An order inside a list answer (``orderReports``)."""
    view = order.rest_view()
    out = {k: view[k] for k in ("symbol", "orderId", "orderListId", "clientOrderId")}
    out["transactTime"] = now
    for k in ("price", "origQty", "executedQty", "origQuoteOrderQty", "cummulativeQuoteQty", "status"):
        out[k] = view[k]
    out |= {"timeInForce": view["timeInForce"], "type": order.type, "side": order.side}
    if order.stop_price is not None:
        out["stopPrice"] = _s(order.stop_price)
    if order.trailing_delta is not None:
        out["trailingDelta"] = order.trailing_delta
        out["trailingTime"] = order.trailing_time
    out["workingTime"] = order.working
    out["selfTradePreventionMode"] = view["selfTradePreventionMode"]
    for k in ("expiryReason", "preventedMatchId", "preventedQuantity"):
        if k in view:
            out[k] = view[k]
    return out


def cancelled_list_view(lst: SimOrderList, legs: list[SimOrder], now: int) -> dict[str, Any]:
    """A cancelled list as ``DELETE /api/v3/orderList`` answers it (``orderReports`` with ``origClientOrderId``)."""
    body = lst.view()
    reports = []
    for order in legs:
        report = order_report(order, now)
        report = {"symbol": report["symbol"], "origClientOrderId": order.client_order_id, **report}
        reports.append(report)
    body["orderReports"] = reports
    return body


def list_status_event(lst: SimOrderList, now: int) -> dict[str, Any]:
    """The ``listStatus`` user-data event of ``lst`` now."""
    return {
        "e": "listStatus",
        "E": now,
        "s": lst.symbol,
        "g": lst.list_id,
        "c": lst.contingency,
        "l": lst.status_type,
        "L": lst.order_status,
        "r": "NONE",
        "C": lst.list_client_id,
        "T": now,
        "O": [{"s": lst.symbol, "i": i, "c": lst.extra["cid"][i]} for i in lst.order_ids],
    }
