"""PaperBroker: a local account that fills at the live engine's prices (the default broker).

Market orders fill at once at the engine's last price moved against you by the
configured slippage; limit orders fill at once if marketable (at the last price), else
rest with their funds locked and fill at their limit when a tick reaches it.  IOC/FOK
orders that cannot fill expire; LIMIT_MAKER orders that would take are rejected, as on
Binance.  Commission (default 0.1 %) is charged in the asset received, like Binance.

Size (the one partial-fill rule): a resting limit order fills in full when a trade goes
through its price, and when a trade is exactly at its price it fills only up to that trade's
quantity, if the price source reports one (:meth:`PaperBroker.on_price` ``quantity``, shared
by the orders resting at that price oldest first), staying PARTIALLY_FILLED with the rest
resting.  The engine's price ticks are kline updates, which carry no trade quantity, so in the
daemon a touch still fills in full; a partly filled order is cancelled or expired with what it
filled kept (its unfilled part's funds released), as on Binance.

Conditional orders (STOP_LOSS, STOP_LOSS_LIMIT, TAKE_PROFIT, TAKE_PROFIT_LIMIT, with a stop
price and/or a trailing delta) follow :mod:`brokers.trigger_rules`, the simulator's rules:
refused when they would trigger immediately, open but untriggered with their funds locked,
moved by every tick (:meth:`PaperBroker.on_price`), then working as a MARKET order (with
slippage) or as a LIMIT order that may rest.  OCO and OTOCO lists are :mod:`brokers.paper.lists`.
Balances, orders, trigger and trailing state and lists live in SQLite (:mod:`brokers.paper.store`),
so the account survives restarts; exchange filters come from the real exchangeInfo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import structlog

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import (
    STOP_TYPES,
    Balance,
    ExchangeList,
    ExchangeOrder,
    Fill,
    InsufficientBalance,
    ListRequest,
    OrderRejected,
    OrderRequest,
)
from brokers.paper import store as ps
from brokers.paper.lists import PaperLists
from brokers.paper.stops import PaperStops, Touch
from brokers.protocol import ExecutionHandler, ListHandler
from storage import Database

MIGRATIONS = ps.MIGRATIONS
__all__ = ["MIGRATIONS", "PaperBroker"]

log = structlog.get_logger(__name__)

RulesLookup = Callable[[str], Awaitable[SymbolRules | None]]
PriceLookup = Callable[[str], Awaitable[Decimal | None]]
DEFAULT_TRAILING_BOUNDS = tr.TrailingBounds()


def _now_ms() -> int:
    return ps.now_ms()


class PaperBroker:
    """A simulated account on live prices, persisted in SQLite."""

    name = "paper"
    order_types = frozenset(
        {"MARKET", "LIMIT", "LIMIT_MAKER", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"}
    )
    list_kinds = frozenset({"OCO", "OTOCO"})

    def __init__(
        self,
        db: Database,
        *,
        rules: RulesLookup,
        price: PriceLookup,
        starting_balances: dict[str, Decimal],
        fee_rate: Decimal = Decimal("0.001"),
        slippage: Decimal = Decimal("0.0005"),
        trailing_bounds: tr.TrailingBounds = DEFAULT_TRAILING_BOUNDS,
    ) -> None:
        self.db = db
        self._rules = rules
        self._price = price
        self._starting = starting_balances
        self.fee_rate = fee_rate
        self.slippage = slippage
        self.trailing_bounds = trailing_bounds
        self._handler: ExecutionHandler | None = None
        self._list_handler: ListHandler | None = None
        self._lock = asyncio.Lock()
        self._resting: dict[str, set[str]] = {}
        self.lists = PaperLists(self)
        self.stops = PaperStops(self)

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        self._handler = handler

    def set_list_handler(self, handler: ListHandler) -> None:
        self._list_handler = handler

    async def start(self) -> None:
        """Seed the starting balances on first use; load resting orders (untriggered stops too)."""
        row = await self.db.fetchone("SELECT COUNT(*) AS n FROM paper_balances")
        if row is not None and int(row["n"]) == 0:
            async with self.db.transaction() as tx:
                await tx.executemany(
                    "INSERT INTO paper_balances (asset, free, locked) VALUES (?, ?, '0')",
                    [(a, str(v)) for a, v in self._starting.items()],
                )
        for r in await self.db.fetchall(
            "SELECT client_order_id, symbol FROM paper_orders WHERE status IN ('NEW', 'PARTIALLY_FILLED')"
        ):
            self._resting.setdefault(r["symbol"], set()).add(r["client_order_id"])

    def resting_symbols(self) -> list[str]:
        return [s for s, ids in self._resting.items() if ids]

    def track(self, order: ExchangeOrder) -> None:
        """Keep :meth:`resting_symbols` in step with an order's status."""
        ids = self._resting.setdefault(order.symbol, set())
        if order.status in ps.OPEN_STATUSES:
            ids.add(order.client_order_id)
        else:
            ids.discard(order.client_order_id)

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self._rules(symbol)

    async def last_price(self, symbol: str) -> Decimal | None:
        return await self._price(symbol)

    async def balances(self) -> list[Balance]:
        rows = await self.db.fetchall("SELECT * FROM paper_balances ORDER BY asset")
        out = [Balance(r["asset"], Decimal(r["free"]), Decimal(r["locked"])) for r in rows]
        return [b for b in out if b.total != 0]

    # --- publishing --------------------------------------------------------------------
    async def publish(self, updates: list[ExchangeOrder], lists: list[ExchangeList]) -> None:
        """Send order updates, then list updates, to the handlers (outside the lock)."""
        for update in updates:
            if self._handler is not None:
                await self._handler(update)
        for lst in lists:
            if self._list_handler is not None:
                await self._list_handler(lst)

    async def _context(self, symbol: str) -> tuple[SymbolRules, Decimal]:
        rules = await self._rules(symbol)
        if rules is None:
            raise OrderRejected(f"symbol {symbol} is not listed", code=-32003)
        last = await self._price(symbol)
        if last is None:
            raise OrderRejected(f"no live price for {symbol} yet; try again in a moment")
        return rules, last

    # --- orders ----------------------------------------------------------------------
    async def place(self, req: OrderRequest) -> ExchangeOrder:
        rules, last = await self._context(req.symbol)
        async with self._lock:
            order = await self._place(req, rules, last)
        self.track(order)
        return order

    async def _place(self, req: OrderRequest, rules: SymbolRules, last: Decimal) -> ExchangeOrder:
        now = _now_ms()
        qty = req.quantity
        if req.type in STOP_TYPES:
            return await self.stops.place(req, rules, last, now)
        if req.type == "MARKET":
            fill_price = self.market_price(req.side, last, rules)
            if qty is None:
                assert req.quote_quantity is not None
                qty = _to_step(req.quote_quantity / fill_price, rules.step_size)
                if qty <= 0:
                    raise OrderRejected(f"quoteOrderQty {req.quote_quantity} buys less than one LOT_SIZE step")
            async with self.db.transaction() as tx:
                await ps.insert_order(tx, req, qty, "NEW", now)
                return await self.execute(tx, req.client_order_id, rules, fill_price, now)
        assert qty is not None and req.price is not None
        marketable = last <= req.price if req.side == "BUY" else last >= req.price
        if marketable:
            if req.type == "LIMIT_MAKER":
                raise OrderRejected("Order would immediately match and take.", code=-2010)
            price = min(last, req.price) if req.side == "BUY" else max(last, req.price)
            async with self.db.transaction() as tx:
                await ps.insert_order(tx, req, qty, "NEW", now)
                return await self.execute(tx, req.client_order_id, rules, price, now)
        async with self.db.transaction() as tx:
            if req.time_in_force in ("IOC", "FOK"):
                await ps.insert_order(tx, req, qty, "EXPIRED", now)
            else:
                need = self.need(req, qty, last)
                await self.lock(tx, rules, req.side, need)
                await ps.insert_order(tx, req, qty, "NEW", now, reserved=need)
            return ps.exchange_order(await ps.order_row(tx, req.client_order_id))

    def market_price(self, side: str, last: Decimal, rules: SymbolRules) -> Decimal:
        """Where a market order (or a triggered STOP_LOSS / TAKE_PROFIT) fills: ``last`` with slippage."""
        price = last * (1 + self.slippage) if side == "BUY" else last * (1 - self.slippage)
        return _to_tick(price, rules.tick_size)

    @staticmethod
    def need(req: OrderRequest, qty: Decimal, last: Decimal) -> Decimal:
        """Funds an open order locks: the quantity (SELL), else its worth at its limit, stop or ``last``."""
        if req.side == "SELL":
            return qty
        if req.type in ("LIMIT", "LIMIT_MAKER", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT") and req.price is not None:
            return qty * req.price
        return qty * (req.stop_price or last)

    async def lock(self, tx: Any, rules: SymbolRules, side: str, amount: Decimal) -> None:
        asset = rules.quote_asset if side == "BUY" else rules.base_asset
        free, locked = await ps.balance(tx, asset)
        if free < amount:
            raise InsufficientBalance(
                f"insufficient {asset} balance: the order needs {_plain(amount)}, {_plain(free)} is free"
            )
        await ps.set_balance(tx, asset, free - amount, locked + amount)

    async def release(self, tx: Any, rules: SymbolRules, row: Any) -> None:
        """Unlock what an open order holds."""
        amount = ps.reserved_of(row)
        asset = rules.quote_asset if row["side"] == "BUY" else rules.base_asset
        free, locked = await ps.balance(tx, asset)
        await ps.set_balance(tx, asset, free + amount, locked - amount)
        await ps.update_order(tx, row["client_order_id"], reserved=Decimal(0))

    async def execute(
        self,
        tx: Any,
        client_order_id: str,
        rules: SymbolRules,
        price: Decimal,
        now: int,
        quantity: Decimal | None = None,
    ) -> ExchangeOrder:
        """Fill an open order at ``price`` now — what is left of it, or at most ``quantity`` of it
        (PARTIALLY_FILLED while some is left): the share of its locked funds released, balances moved,
        the trade recorded (inside ``tx``); raises InsufficientBalance when the account cannot pay."""
        row = await ps.order_row(tx, client_order_id)
        req = ps.request_of(row)
        left = Decimal(row["quantity"]) - Decimal(row["executed_qty"])
        qty = left if quantity is None else min(quantity, left)
        held = ps.reserved_of(row)
        reserved = held if qty == left else held * qty / left  # the filled share of what the order locks
        quote = qty * price
        base_free, base_locked = await ps.balance(tx, rules.base_asset)
        quote_free, quote_locked = await ps.balance(tx, rules.quote_asset)
        if req.side == "BUY":
            commission, commission_asset = qty * self.fee_rate, rules.base_asset
            if quote_free + reserved < quote:
                raise InsufficientBalance(
                    f"insufficient {rules.quote_asset} balance: the order needs about {_plain(quote)}, "
                    f"{_plain(quote_free + reserved)} is free"
                )
            quote_locked -= reserved
            quote_free += reserved - quote
            base_free += qty - commission
        else:
            commission, commission_asset = quote * self.fee_rate, rules.quote_asset
            if base_free + reserved < qty:
                raise InsufficientBalance(
                    f"insufficient {rules.base_asset} balance: the order sells {_plain(qty)}, "
                    f"{_plain(base_free + reserved)} is free"
                )
            base_locked -= reserved
            base_free -= qty - reserved
            quote_free += quote - commission
        await ps.set_balance(tx, rules.base_asset, base_free, base_locked)
        await ps.set_balance(tx, rules.quote_asset, quote_free, quote_locked)
        await ps.update_order(
            tx, client_order_id, status="FILLED" if qty == left else "PARTIALLY_FILLED",
            executed_qty=Decimal(row["executed_qty"]) + qty, cumulative_quote=Decimal(row["cumulative_quote"]) + quote,
            updated_ms=now, reserved=held - reserved,
        )  # fmt: skip
        fill = Fill(0, req.symbol, req.side, client_order_id, qty, price, commission, commission_asset, now)
        trade_id = await ps.insert_trade(tx, fill)
        fill = Fill(trade_id, req.symbol, req.side, client_order_id, qty, price, commission, commission_asset, now)
        return ps.exchange_order(await ps.order_row(tx, client_order_id), (fill,))

    async def set_status(
        self, tx: Any, rules: SymbolRules, client_order_id: str, status: str, now: int
    ) -> ExchangeOrder:
        """Cancel or expire an open (or pending) order, releasing what it holds."""
        row = await ps.order_row(tx, client_order_id)
        if row["status"] in ps.OPEN_STATUSES:
            await self.release(tx, rules, row)
        await ps.update_order(tx, client_order_id, status=status, updated_ms=now)
        return ps.exchange_order(await ps.order_row(tx, client_order_id))

    # --- ticks ------------------------------------------------------------------------
    async def on_price(self, symbol: str, price: Decimal, quantity: Decimal | None = None) -> None:
        """A trade at ``price``: move conditional orders' trigger state, fire those it triggers, and
        fill resting limit orders it reaches (at their limit price); ``quantity``, when the source
        reports the trade's size, bounds what orders resting exactly at ``price`` fill (the module
        docstring's rule)."""
        if not self._resting.get(symbol):
            return
        rules = await self._rules(symbol)
        if rules is None:
            return
        updates: list[ExchangeOrder] = []
        lists: list[ExchangeList] = []
        async with self._lock:
            rows = await self.db.fetchall(
                "SELECT * FROM paper_orders WHERE symbol = ? AND status IN ('NEW', 'PARTIALLY_FILLED')"
                " ORDER BY created_ms, order_id",
                (symbol,),
            )
            touch = Touch(price, quantity)
            for r in rows:
                async with self.db.transaction() as tx:
                    current = await ps.order_row(tx, r["client_order_id"])
                    if current["status"] not in ps.OPEN_STATUSES:
                        continue  # an OCO's other leg, done by an earlier row
                    changed = await self.stops.on_tick(tx, rules, current, touch)
                    if changed is not None:
                        more, more_lists = await self.lists.react(tx, rules, changed, price)
                        updates += [changed, *more]
                        lists += more_lists
        for update in updates:
            self.track(update)
        await self.publish(updates, lists)

    # --- cancel and queries ------------------------------------------------------------
    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        """Cancel an open order; a leg of an order list cancels the whole list (as on Binance)."""
        rules = await self._rules(symbol)
        assert rules is not None
        async with self._lock, self.db.transaction() as tx:
            row = await ps.order_row(tx, client_order_id)
            if row is None or row["symbol"] != symbol or row["status"] not in (*ps.OPEN_STATUSES, "PENDING_NEW"):
                raise OrderRejected("Unknown order sent.", code=-2011)
            now = _now_ms()
            if row["list_client_id"]:
                updates, lists = await self.lists.cancel_in(tx, rules, row["list_client_id"], now)
                order = next(u for u in updates if u.client_order_id == client_order_id)
                others = [u for u in updates if u.client_order_id != client_order_id]
            else:
                order, others, lists = await self.set_status(tx, rules, client_order_id, "CANCELED", now), [], []
        for update in (order, *others):
            self.track(update)
        await self.publish(others, lists)
        return order

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        row = await self.db.fetchone(
            "SELECT * FROM paper_orders WHERE client_order_id = ? AND symbol = ?", (client_order_id, symbol)
        )
        return None if row is None else ps.exchange_order(row)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        sql = "SELECT * FROM paper_orders WHERE status IN ('NEW', 'PARTIALLY_FILLED', 'PENDING_NEW')"
        sql += " AND symbol = ?" if symbol else ""
        rows = await self.db.fetchall(sql + " ORDER BY order_id", (symbol,) if symbol else ())
        return [ps.exchange_order(r) for r in rows]

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        rows = await self.db.fetchall(
            "SELECT * FROM paper_trades WHERE symbol = ? AND trade_id >= ? ORDER BY trade_id", (symbol, from_id or 0)
        )
        return [ps.fill_of(r) for r in rows]

    # --- order lists (brokers.paper.lists) -------------------------------------------------
    async def place_list(self, req: ListRequest) -> ExchangeList:
        return await self.lists.place(req)

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        return await self.lists.cancel(symbol, list_client_id)

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        return await self.lists.query(list_client_id)

    async def open_lists(self) -> list[ExchangeList]:
        return await self.lists.open()


def _to_tick(price: Decimal, tick: Decimal) -> Decimal:
    return (price / tick).to_integral_value() * tick if tick > 0 else price


def _to_step(qty: Decimal, step: Decimal) -> Decimal:
    return (qty / step).to_integral_value(rounding=ROUND_FLOOR) * step if step > 0 else qty


def _plain(x: Decimal) -> str:
    return format(x.normalize(), "f")
