"""The paper account's ledger: what its orders hold and what a fill moves, under one lock.

Owns the money side of :class:`~brokers.paper.broker.PaperBroker`: the venue's terms it trades on
(commission, slippage, Binance's trailing-delta bounds), the symbol rules and live price it reads
(:meth:`PaperAccount.context`), the funds an open order holds (:meth:`PaperAccount.need`,
:meth:`~PaperAccount.hold`, :meth:`~PaperAccount.release`), a fill at a price
(:meth:`~PaperAccount.execute`: balances moved, commission charged in the asset received, the trade
recorded) and a cancel or expiry (:meth:`~PaperAccount.set_status`).  Conditional orders
(:mod:`brokers.paper.stops`), order lists (:mod:`brokers.paper.lists`) and the broker itself all
change the account through it, inside one SQLite transaction each, holding :attr:`PaperAccount.lock`.

Why a class of its own: the stops and the lists used to hold a pointer back to the broker and take
its private lock and lookups; they now share this object, which says in public what they may use,
and the broker keeps only what faces its callers (the broker protocol, events, the resting index).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from decimal import ROUND_FLOOR, Decimal
from sqlite3 import Row

from aiosqlite import Connection

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import ExchangeOrder, Fill, InsufficientBalance, OrderRejected, OrderRequest
from brokers.paper import store as ps
from storage import Database

RulesLookup = Callable[[str], Awaitable[SymbolRules | None]]
PriceLookup = Callable[[str], Awaitable[Decimal | None]]
DEFAULT_TRAILING_BOUNDS = tr.TrailingBounds()


class PaperAccount:
    """One paper account's balances and orders in SQLite, changed under :attr:`lock`."""

    def __init__(
        self,
        db: Database,
        *,
        rules: RulesLookup,
        price: PriceLookup,
        fee_rate: Decimal = Decimal("0.001"),
        slippage: Decimal = Decimal("0.0005"),
        trailing_bounds: tr.TrailingBounds = DEFAULT_TRAILING_BOUNDS,
    ) -> None:
        self.db = db
        self._rules = rules
        self._price = price
        self.fee_rate = fee_rate
        self.slippage = slippage
        self.trailing_bounds = trailing_bounds
        self.lock = asyncio.Lock()
        """Held by whoever changes the account (placing, cancelling, a tick): one change at a time."""

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self._rules(symbol)

    async def last_price(self, symbol: str) -> Decimal | None:
        return await self._price(symbol)

    async def listed_rules(self, symbol: str) -> SymbolRules:
        """The symbol's rules; OrderRejected (-32003) when it is not listed."""
        rules = await self._rules(symbol)
        if rules is None:
            raise OrderRejected(f"symbol {symbol} is not listed", code=-32003)
        return rules

    async def context(self, symbol: str) -> tuple[SymbolRules, Decimal]:
        """The symbol's rules and last price, or the refusal a venue would give without them."""
        rules = await self.listed_rules(symbol)
        last = await self._price(symbol)
        if last is None:
            raise OrderRejected(f"no live price for {symbol} yet; try again in a moment")
        return rules, last

    def market_price(self, side: str, last: Decimal, rules: SymbolRules) -> Decimal:
        """Where a market order (or a triggered STOP_LOSS / TAKE_PROFIT) fills: ``last`` with slippage."""
        price = last * (1 + self.slippage) if side == "BUY" else last * (1 - self.slippage)
        return to_tick(price, rules.tick_size)

    @staticmethod
    def need(req: OrderRequest, qty: Decimal, last: Decimal) -> Decimal:
        """Funds an open order locks: the quantity (SELL), else its worth at its limit, stop or ``last``."""
        if req.side == "SELL":
            return qty
        if req.type in ("LIMIT", "LIMIT_MAKER", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT") and req.price is not None:
            return qty * req.price
        return qty * (req.stop_price or last)

    async def hold(self, tx: Connection, rules: SymbolRules, side: str, amount: Decimal) -> None:
        """Move ``amount`` of what a ``side`` order spends from free to locked; InsufficientBalance if not free."""
        asset = rules.quote_asset if side == "BUY" else rules.base_asset
        free, locked = await ps.balance(tx, asset)
        if free < amount:
            raise InsufficientBalance(
                f"insufficient {asset} balance: the order needs {_plain(amount)}, {_plain(free)} is free"
            )
        await ps.set_balance(tx, asset, free - amount, locked + amount)

    async def release(self, tx: Connection, rules: SymbolRules, row: Row) -> None:
        """Unlock what an open order holds."""
        amount = ps.reserved_of(row)
        asset = rules.quote_asset if row["side"] == "BUY" else rules.base_asset
        free, locked = await ps.balance(tx, asset)
        await ps.set_balance(tx, asset, free + amount, locked - amount)
        await ps.update_order(tx, row["client_order_id"], reserved=Decimal(0))

    async def execute(
        self,
        tx: Connection,
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
        self, tx: Connection, rules: SymbolRules, client_order_id: str, status: str, now: int
    ) -> ExchangeOrder:
        """Cancel or expire an open (or pending) order, releasing what it holds."""
        row = await ps.order_row(tx, client_order_id)
        if row["status"] in ps.OPEN_STATUSES:
            await self.release(tx, rules, row)
        await ps.update_order(tx, client_order_id, status=status, updated_ms=now)
        return ps.exchange_order(await ps.order_row(tx, client_order_id))


def to_tick(price: Decimal, tick: Decimal) -> Decimal:
    return (price / tick).to_integral_value() * tick if tick > 0 else price


def to_step(qty: Decimal, step: Decimal) -> Decimal:
    return (qty / step).to_integral_value(rounding=ROUND_FLOOR) * step if step > 0 else qty


def _plain(x: Decimal) -> str:
    return format(x.normalize(), "f")
