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

This class is what faces the broker's callers: the :class:`~brokers.protocol.Broker` methods, the
event and list handlers it publishes to (outside the account's lock), and the index of symbols with
resting orders that decides which ticks matter.  What an order holds and what a fill moves is the
account's (:mod:`brokers.paper.account`); conditional orders and lists change the account the same way.
"""

from __future__ import annotations

from decimal import Decimal

import structlog

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import (
    STOP_TYPES,
    Balance,
    ExchangeList,
    ExchangeOrder,
    Fill,
    ListRequest,
    OrderRejected,
    OrderRequest,
)
from brokers.paper import store as ps
from brokers.paper.account import DEFAULT_TRAILING_BOUNDS, PaperAccount, PriceLookup, RulesLookup, to_step
from brokers.paper.lists import LIST_KINDS, PaperLists
from brokers.paper.stops import PaperStops, Touch
from brokers.protocol import ExecutionHandler, ListHandler
from storage import Database

MIGRATIONS = ps.MIGRATIONS
__all__ = ["MIGRATIONS", "PaperBroker"]

log = structlog.get_logger(__name__)


def _now_ms() -> int:
    return ps.now_ms()


class PaperBroker:
    """A simulated account on live prices, persisted in SQLite."""

    name = "paper"
    order_types = frozenset(
        {"MARKET", "LIMIT", "LIMIT_MAKER", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"}
    )
    list_kinds = LIST_KINDS

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
        self._starting = starting_balances
        self.account = PaperAccount(
            db, rules=rules, price=price, fee_rate=fee_rate, slippage=slippage, trailing_bounds=trailing_bounds
        )
        self._handler: ExecutionHandler | None = None
        self._list_handler: ListHandler | None = None
        self._resting: dict[str, set[str]] = {}
        self.lists = PaperLists(self.account)
        self.stops = PaperStops(self.account, before_trigger=self.lists.before_trigger)

    @property
    def fee_rate(self) -> Decimal:
        """The commission it charges (read by :func:`brokers.trade_simulation.fee_rates`)."""
        return self.account.fee_rate

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
        return await self.account.rules(symbol)

    async def last_price(self, symbol: str) -> Decimal | None:
        return await self.account.last_price(symbol)

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

    # --- orders ----------------------------------------------------------------------
    async def place(self, req: OrderRequest) -> ExchangeOrder:
        rules, last = await self.account.context(req.symbol)
        async with self.account.lock:
            order = await self._place(req, rules, last)
        self.track(order)
        return order

    async def _place(self, req: OrderRequest, rules: SymbolRules, last: Decimal) -> ExchangeOrder:
        now = _now_ms()
        qty = req.quantity
        if req.type in STOP_TYPES:
            return await self.stops.place(req, rules, last, now)
        if req.type == "MARKET":
            fill_price = self.account.market_price(req.side, last, rules)
            if qty is None:
                assert req.quote_quantity is not None
                qty = to_step(req.quote_quantity / fill_price, rules.step_size)
                if qty <= 0:
                    raise OrderRejected(f"quoteOrderQty {req.quote_quantity} buys less than one LOT_SIZE step")
            async with self.db.transaction() as tx:
                await ps.insert_order(tx, req, qty, "NEW", now)
                return await self.account.execute(tx, req.client_order_id, rules, fill_price, now)
        assert qty is not None and req.price is not None
        marketable = last <= req.price if req.side == "BUY" else last >= req.price
        if marketable:
            if req.type == "LIMIT_MAKER":
                raise OrderRejected("Order would immediately match and take.", code=-2010)
            price = min(last, req.price) if req.side == "BUY" else max(last, req.price)
            async with self.db.transaction() as tx:
                await ps.insert_order(tx, req, qty, "NEW", now)
                return await self.account.execute(tx, req.client_order_id, rules, price, now)
        async with self.db.transaction() as tx:
            if req.time_in_force in ("IOC", "FOK"):
                await ps.insert_order(tx, req, qty, "EXPIRED", now)
            else:
                need = self.account.need(req, qty, last)
                await self.account.hold(tx, rules, req.side, need)
                await ps.insert_order(tx, req, qty, "NEW", now, reserved=need)
            return ps.exchange_order(await ps.order_row(tx, req.client_order_id))

    # --- ticks ------------------------------------------------------------------------
    async def on_price(self, symbol: str, price: Decimal, quantity: Decimal | None = None) -> None:
        """A trade at ``price``: move conditional orders' trigger state, fire those it triggers, and
        fill resting limit orders it reaches (at their limit price); ``quantity``, when the source
        reports the trade's size, bounds what orders resting exactly at ``price`` fill (the module
        docstring's rule)."""
        if not self._resting.get(symbol):
            return
        rules = await self.account.rules(symbol)
        if rules is None:
            return
        updates: list[ExchangeOrder] = []
        lists: list[ExchangeList] = []
        async with self.account.lock:
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
        rules = await self.account.rules(symbol)
        assert rules is not None
        async with self.account.lock, self.db.transaction() as tx:
            row = await ps.find_order(tx, client_order_id)
            if row is None or row["symbol"] != symbol or row["status"] not in (*ps.OPEN_STATUSES, "PENDING_NEW"):
                raise OrderRejected("Unknown order sent.", code=-2011)
            now = _now_ms()
            if row["list_client_id"]:
                updates, lists = await self.lists.cancel_in(tx, rules, row["list_client_id"], now)
                order = next(u for u in updates if u.client_order_id == client_order_id)
                others = [u for u in updates if u.client_order_id != client_order_id]
            else:
                order, others, lists = (
                    await self.account.set_status(tx, rules, client_order_id, "CANCELED", now),
                    [],
                    [],
                )
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
        view, updates = await self.lists.place(req)
        for order in view.orders:
            self.track(order)
        await self.publish(updates, [])
        return view

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        view, updates = await self.lists.cancel(symbol, list_client_id)
        for update in updates:
            self.track(update)
        await self.publish(updates, [])
        return view

    async def query_list(self, list_client_id: str) -> ExchangeList | None:
        return await self.lists.query(list_client_id)

    async def open_lists(self) -> list[ExchangeList]:
        return await self.lists.open()
