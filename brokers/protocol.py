"""The broker protocol every venue implements: paper, Binance (testnet/live), ccxt.

A broker talks to one account.  It places, cancels and queries orders by our
``client_order_id``, lists open orders, balances and trades, and publishes execution
events (order updates with their fills) to the order tracker through ``on_event``.
Brokers hold no order state of their own beyond what the venue needs; the tracker above
them is the single record of orders, fills and positions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Protocol

from brokers.filters import SymbolRules
from brokers.models import Balance, ExchangeList, ExchangeOrder, Fill, ListRequest, OrderRequest

ExecutionHandler = Callable[[ExchangeOrder], Awaitable[object]]
"""Where a broker hands each order update; what it returns is the caller's (the order service returns the row)."""
ListHandler = Callable[[ExchangeList], Awaitable[None]]


class Broker(Protocol):
    name: str
    order_types: frozenset[str]
    """The order types this venue takes (MARKET, LIMIT, …, STOP_LOSS_LIMIT); others are refused
    before anything is sent, naming the venue."""
    list_kinds: frozenset[str]
    """The order lists it places natively: {"OCO", "OTOCO"} on Binance; empty where the venue has none."""

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        """Where order updates (with fills) go, whether they come from a stream or from polling."""

    async def rules(self, symbol: str) -> SymbolRules | None:
        """The symbol's exchange filters, or None if the venue does not list it."""

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        """Place an order; raises OrderRejected (not placed) or OutcomeUnknown (maybe placed)."""

    def set_list_handler(self, handler: ListHandler) -> None:
        """Where order-list updates go (Binance ``listStatus`` events, or the paper broker's own)."""

    async def place_list(self, req: ListRequest) -> ExchangeList:
        """Place an order list (``req.kind`` in :attr:`list_kinds`); raises like :meth:`place`."""

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        """Cancel an open order list (every leg); raises BrokerError if the venue refuses."""

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        """The venue's view of one order list, or None if it never received it."""

    async def open_lists(self) -> list[ExchangeList]:
        """Every open order list."""

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        """Cancel an open order; raises BrokerError if the venue refuses."""

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        """The venue's view of one order, or None if it never received it."""

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        """Every open order (of ``symbol``, or all)."""

    async def balances(self) -> list[Balance]:
        """Non-zero balances of the account."""

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        """Fills of ``symbol`` with trade id ≥ ``from_id`` (all recent ones without it)."""

    async def last_price(self, symbol: str) -> Decimal | None:
        """The venue's ticker price (the order guard's second source after the engine's, and for
        marking positions when the engine has none); None or BrokerError when it cannot be had."""
