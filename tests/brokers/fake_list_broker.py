"""An in-memory exchange with stop orders and OCO / OTOCO lists, as Binance documents them (for unit tests).

Stops wait until the price crosses their stop price (a SELL STOP_LOSS / BUY TAKE_PROFIT when it
falls to it, a SELL TAKE_PROFIT / BUY STOP_LOSS when it rises to it) and then fill at the price;
a LIMIT_MAKER / LIMIT fills when the price reaches it.  An OCO leg that fills cancels the other;
an OTOCO's pending pair (PENDING_NEW) goes live when its working order fills.  Events go to the
handlers like a user stream; ``fail_list_with`` makes place_list fail (after accepting the list
when ``accept_on_failure``).
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal as D

from brokers.filters import SymbolRules
from brokers.models import STOP_TYPES, ExchangeList, ExchangeOrder, Fill, ListRequest, OrderRequest
from tests.brokers.test_filters_and_positions import ENTRY

ALL_TYPES = frozenset(
    {"MARKET", "LIMIT", "LIMIT_MAKER", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"}
)
DONE = {"FILLED", "CANCELED", "REJECTED", "EXPIRED"}


class FakeListBroker:
    name = "fake-lists"
    order_types = ALL_TYPES
    list_kinds = frozenset({"OCO", "OTOCO"})

    def __init__(self, price: D = D(65000)) -> None:
        self.price = price
        self.orders: dict[str, ExchangeOrder] = {}
        self.lists: dict[str, ListRequest] = {}
        self.list_status: dict[str, str] = {}
        self.placed: list[str] = []
        self.placed_lists: list[str] = []
        self.fail_list_with: Exception | None = None
        self.accept_on_failure = False
        self.handler = None
        self.list_handler = None
        self._trade = 0

    def set_event_handler(self, handler) -> None:  # type: ignore[no-untyped-def]
        self.handler = handler

    def set_list_handler(self, handler) -> None:  # type: ignore[no-untyped-def]
        self.list_handler = handler

    async def rules(self, symbol: str) -> SymbolRules | None:
        return SymbolRules.from_exchange_info(ENTRY) if symbol == "BTCUSDT" else None

    async def last_price(self, symbol: str) -> D | None:
        return self.price

    # --- orders -------------------------------------------------------------------------
    def _new(self, req: OrderRequest, status: str = "NEW") -> ExchangeOrder:
        return ExchangeOrder(
            req.symbol, req.client_order_id, status, req.side, req.type, req.quantity or D(0), D(0), D(0),
            price=req.price, stop_price=req.stop_price, trailing_delta=req.trailing_delta,
            list_client_id=req.list_client_id,
        )  # fmt: skip

    def _fill(self, o: ExchangeOrder, at: D) -> ExchangeOrder:
        self._trade += 1
        fill = Fill(self._trade, o.symbol, o.side, o.client_order_id, o.orig_qty, at, D(0), "USDT", self._trade)
        done = dataclasses.replace(
            o, status="FILLED", executed_qty=o.orig_qty, cumulative_quote=o.orig_qty * at, fills=(fill,),
            triggered=o.type in STOP_TYPES,
        )  # fmt: skip
        self.orders[o.client_order_id] = done
        return done

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        self.placed.append(req.client_order_id)
        order = self._new(req)
        self.orders[req.client_order_id] = order
        if req.type == "MARKET":
            return self._fill(order, self.price)
        return order

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        o = self.orders[client_order_id]
        if o.list_client_id:
            lst = await self.cancel_list(symbol, o.list_client_id)
            return next(x for x in lst.orders if x.client_order_id == client_order_id)
        self.orders[client_order_id] = dataclasses.replace(o, status="CANCELED")
        return self.orders[client_order_id]

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        return self.orders.get(client_order_id)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        return [o for o in self.orders.values() if o.status in ("NEW", "PARTIALLY_FILLED")]

    async def balances(self) -> list:  # type: ignore[type-arg]
        return []

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        return [f for o in self.orders.values() for f in o.fills if from_id is None or f.trade_id >= from_id]

    # --- lists --------------------------------------------------------------------------
    def _view(self, list_id: str) -> ExchangeList:
        req = self.lists[list_id]
        legs = [x for x in (req.working, req.take_profit, req.stop) if x is not None]
        status = self.list_status[list_id]
        contingency = (
            "OTO" if req.kind == "OTOCO" and self.orders[legs[0].client_order_id].status != "FILLED" else "OCO"
        )
        return ExchangeList(
            req.symbol, list_id, contingency, "ALL_DONE" if status == "ALL_DONE" else "EXEC_STARTED", status,
            tuple(self.orders[leg.client_order_id] for leg in legs), exchange_list_id=str(len(self.placed_lists)),
        )  # fmt: skip

    async def place_list(self, req: ListRequest) -> ExchangeList:
        self.placed_lists.append(req.list_client_id)
        pending = "PENDING_NEW" if req.working is not None else "NEW"
        if req.working is not None:
            self.orders[req.working.client_order_id] = self._new(req.working)
        self.orders[req.take_profit.client_order_id] = self._new(req.take_profit, pending)
        self.orders[req.stop.client_order_id] = self._new(req.stop, pending)
        self.lists[req.list_client_id] = req
        self.list_status[req.list_client_id] = "EXECUTING"
        if self.fail_list_with is not None:
            if not self.accept_on_failure:
                for leg in (req.working, req.take_profit, req.stop):
                    if leg is not None:
                        del self.orders[leg.client_order_id]
                del self.lists[req.list_client_id], self.list_status[req.list_client_id]
            raise self.fail_list_with
        return self._view(req.list_client_id)

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        req = self.lists[list_client_id]
        for leg in (req.working, req.take_profit, req.stop):
            if leg is not None and self.orders[leg.client_order_id].status not in DONE:
                self.orders[leg.client_order_id] = dataclasses.replace(
                    self.orders[leg.client_order_id], status="CANCELED"
                )
        self.list_status[list_client_id] = "ALL_DONE"
        return self._view(list_client_id)

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        return self._view(list_client_id) if list_client_id in self.lists else None

    async def open_lists(self) -> list[ExchangeList]:
        return [self._view(k) for k, v in self.list_status.items() if v == "EXECUTING"]

    # --- the market -----------------------------------------------------------------------
    def _reached(self, o: ExchangeOrder) -> bool:
        if o.type in ("LIMIT", "LIMIT_MAKER"):
            assert o.price is not None
            return self.price >= o.price if o.side == "SELL" else self.price <= o.price
        stop = o.stop_price or o.price
        assert stop is not None
        falls = (o.side == "SELL") == o.type.startswith("STOP")
        return self.price <= stop if falls else self.price >= stop

    async def move(self, price: D) -> None:
        """The last price moves: resting orders and stops that it reaches fill (events are emitted)."""
        self.price = price
        for cid in list(self.orders):
            o = self.orders[cid]
            if o.status == "NEW" and self._reached(o):
                await self.fill(cid)

    async def fill(self, client_order_id: str) -> None:
        o = self.orders[client_order_id]
        at = o.price if o.type in ("LIMIT", "LIMIT_MAKER") and o.price is not None else self.price
        updates = [self._fill(o, at)]
        list_id = o.list_client_id
        if list_id and list_id in self.lists:
            req = self.lists[list_id]
            if req.working is not None and client_order_id == req.working.client_order_id:
                for leg in (req.take_profit, req.stop):
                    self.orders[leg.client_order_id] = dataclasses.replace(
                        self.orders[leg.client_order_id], status="NEW"
                    )
                    updates.append(self.orders[leg.client_order_id])
            else:
                for leg in (req.take_profit, req.stop):
                    if leg.client_order_id != client_order_id and self.orders[leg.client_order_id].status not in DONE:
                        self.orders[leg.client_order_id] = dataclasses.replace(
                            self.orders[leg.client_order_id], status="EXPIRED"
                        )
                        updates.append(self.orders[leg.client_order_id])
                self.list_status[list_id] = "ALL_DONE"
        for u in updates:
            if self.handler is not None:
                await self.handler(u)
        if list_id and list_id in self.lists and self.list_handler is not None:
            await self.list_handler(self._view(list_id))
