"""Protective order types on ccxt venues, and the refusal of order lists there.

Owns how a STOP_LOSS / STOP_LOSS_LIMIT / TAKE_PROFIT / TAKE_PROFIT_LIMIT request becomes a
ccxt ``create_order`` call with ccxt's *unified* parameters — ``stopLossPrice`` (where
``exchange.has["createStopLossOrder"]``), ``takeProfitPrice`` (``has["createTakeProfitOrder"]``),
and a trailing delta as ``trailingPercent`` (basis points / 100, with ``stopLossOrTakeProfit``
and the stop price as ``trailingTriggerPrice``) only where ``has["createTrailingPercentOrder"]``.
``triggerPrice`` is not used: its direction (stop or take-profit) is the venue's to guess.
A type the venue's ccxt class does not declare is refused naming the exchange — never sent as
a plain market or limit order.  :func:`ccxt_order_types` is the honest set for ``order_types``.

ccxt has no unified OCO / OTOCO: :class:`NoOrderLists` gives :class:`~brokers.ccxt.broker.CcxtBroker`
an empty ``list_kinds`` and list methods that refuse, naming the exchange.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from brokers.models import BrokerError, ExchangeList, ListRequest, OrderRejected, OrderRequest
from brokers.protocol import ListHandler

PLAIN = frozenset({"MARKET", "LIMIT", "LIMIT_MAKER"})


def _has(exchange: Any, feature: str) -> bool:
    return bool((getattr(exchange, "has", None) or {}).get(feature))


def ccxt_order_types(exchange: Any) -> frozenset[str]:
    """The order types this venue's ccxt class declares it can place."""
    types = set(PLAIN)
    if _has(exchange, "createStopLossOrder"):
        types |= {"STOP_LOSS", "STOP_LOSS_LIMIT"}
    if _has(exchange, "createTakeProfitOrder"):
        types |= {"TAKE_PROFIT", "TAKE_PROFIT_LIMIT"}
    return frozenset(types)


def order_shape(exchange: Any, req: OrderRequest) -> tuple[str, float | None, dict[str, Any]]:
    """(ccxt type, price, extra unified params) for ``req``; OrderRejected when the venue cannot take it."""
    if req.type in PLAIN:
        return ("market" if req.type == "MARKET" else "limit"), _f(req.price), {}
    if req.type not in ccxt_order_types(exchange):
        raise OrderRejected(
            f"{exchange.id} through ccxt does not support {req.type.lower()} orders (its ccxt class declares no "
            f"{'createStopLossOrder' if req.type.startswith('STOP') else 'createTakeProfitOrder'}); nothing was sent"
        )
    stop_loss = req.type.startswith("STOP_LOSS")
    otype = "limit" if req.type.endswith("_LIMIT") else "market"
    params: dict[str, Any] = {}
    if req.trailing_delta is not None:
        if not _has(exchange, "createTrailingPercentOrder"):
            raise OrderRejected(
                f"{exchange.id} through ccxt has no trailing orders (createTrailingPercentOrder); "
                "omit trailing_delta or use a stop_price"
            )
        params["trailingPercent"] = float(Decimal(req.trailing_delta) / 100)
        params["stopLossOrTakeProfit"] = "stopLoss" if stop_loss else "takeProfit"
        if req.stop_price is not None:
            params["trailingTriggerPrice"] = float(req.stop_price)
    elif req.stop_price is not None:
        params["stopLossPrice" if stop_loss else "takeProfitPrice"] = float(req.stop_price)
    else:
        raise OrderRejected(f"{req.type.lower()} needs stop_price or trailing_delta")
    return otype, _f(req.price), params


def _f(v: Decimal | None) -> float | None:
    return None if v is None else float(v)


class NoOrderLists:
    """Order lists on a ccxt venue: none (``list_kinds`` empty); every list call refuses."""

    list_kinds: frozenset[str] = frozenset()
    exchange: Any

    def _refuse(self) -> BrokerError:
        return OrderRejected(
            f"{self.exchange.id} through ccxt has no order lists (OCO/OTOCO); place the legs as separate "
            "stop_loss / take_profit orders"
        )

    def set_list_handler(self, handler: ListHandler) -> None:
        """No list events on ccxt venues."""

    async def place_list(self, req: ListRequest) -> ExchangeList:
        raise self._refuse()

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        raise self._refuse()

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        return None

    async def open_lists(self) -> list[ExchangeList]:
        return []
