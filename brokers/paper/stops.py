"""The paper broker's conditional orders: STOP_LOSS, STOP_LOSS_LIMIT, TAKE_PROFIT, TAKE_PROFIT_LIMIT.

Owns what :class:`~brokers.paper.broker.PaperBroker` does with a stop or trailing order: Binance's
refusals at placement (a stop price or trailing delta is required, TRAILING_DELTA,
MAX_NUM_ALGO_ORDERS, "Order would trigger immediately."), its trigger and trailing state
(persisted on every change, so it survives restarts), and what happens when a tick triggers it:
a STOP_LOSS / TAKE_PROFIT fills at once as a MARKET order (with the broker's slippage), a
…_LIMIT order fills if marketable and otherwise rests like a LIMIT order.  The rules are
:mod:`brokers.trigger_rules`, shared with the simulator; balances and fills are the account's.
A resting limit order (a LIMIT, or a triggered …_LIMIT) meets each trade as a :class:`Touch`,
which carries the broker's one size rule (brokers/paper/broker.py) into :meth:`PaperStops.on_tick`.

Funds and fills go through :class:`~brokers.paper.account.PaperAccount`.  The placement checks are
functions (:func:`check`, :func:`check_algo`) because an order list checks its legs with them too;
what a list does when one of its legs triggers comes in as a :data:`TriggerHook`, so this module
does not know the lists (they know it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from sqlite3 import Row

import structlog
from aiosqlite import Connection

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import STOP_TYPES, ExchangeOrder, InsufficientBalance, OrderRejected, OrderRequest
from brokers.paper import store as ps
from brokers.paper.account import PaperAccount

log = structlog.get_logger(__name__)
MAX_ALGO_ORDERS = 5

TriggerHook = Callable[[Connection, SymbolRules, Row, int], Awaitable[None]]
"""Called (tx, rules, the order's row, now) when a conditional order has triggered, before it works:
an OCO leg's list expires the other leg there, releasing what it held."""


@dataclass(slots=True)
class Touch:
    """One trade as the resting orders of its symbol meet it, oldest first: its ``price`` and, when the
    price source reports it, the ``quantity`` still available to orders resting exactly at that price."""

    price: Decimal
    quantity: Decimal | None = None

    def take(self, limit: Decimal, left: Decimal) -> Decimal | None:
        """How much an order resting at ``limit`` with ``left`` to fill takes: None all of it (the trade
        went through its price, or its size is unknown), else up to what the trade has left (0: none)."""
        if self.quantity is None or self.price != limit:
            return None
        took = min(left, self.quantity)
        self.quantity -= took
        return took


def check(req: OrderRequest, last: Decimal, bounds: tr.TrailingBounds) -> None:
    """Binance's refusals of a conditional order: parameters, TRAILING_DELTA, would trigger immediately."""
    if req.stop_price is None and req.trailing_delta is None:
        raise OrderRejected(f"{req.type} needs a stop price or a trailing delta", code=-1102)
    if req.type.endswith("_LIMIT") and req.price is None:
        raise OrderRejected(f"{req.type} needs a limit price", code=-1102)
    if req.trailing_delta is not None:
        refusal = tr.check_trailing_delta(req.type, req.side, req.trailing_delta, bounds)
        if refusal is not None:
            raise OrderRejected(refusal.msg, code=refusal.code)
    if req.stop_price is not None and tr.would_trigger_immediately(req.type, req.side, req.stop_price, last):
        raise OrderRejected(tr.WOULD_TRIGGER.msg, code=tr.WOULD_TRIGGER.code)


async def check_algo(tx: Connection, symbol: str, new: int) -> None:
    """MAX_NUM_ALGO_ORDERS: refuse ``new`` more conditional orders beyond the symbol's limit."""
    refusal = tr.algo_limit(await ps.open_stop_count(tx, symbol, STOP_TYPES), new, MAX_ALGO_ORDERS)
    if refusal is not None:
        raise OrderRejected(refusal.msg, code=refusal.code)


class PaperStops:
    """Conditional orders of one paper account."""

    def __init__(self, account: PaperAccount, *, before_trigger: TriggerHook) -> None:
        self.account = account
        self._before_trigger = before_trigger

    async def place(self, req: OrderRequest, rules: SymbolRules, last: Decimal, now: int) -> ExchangeOrder:
        assert req.quantity is not None
        check(req, last, self.account.trailing_bounds)
        state = tr.start(req.type, req.side, req.stop_price, req.trailing_delta, last)
        async with self.account.db.transaction() as tx:
            await check_algo(tx, req.symbol, 1)
            need = self.account.need(req, req.quantity, last)
            await self.account.hold(tx, rules, req.side, need)
            await ps.insert_order(
                tx, req, req.quantity, "NEW", now, reserved=need, tracking=state.tracking, extreme=state.extreme
            )
            return ps.exchange_order(await ps.order_row(tx, req.client_order_id))

    async def on_tick(self, tx: Connection, rules: SymbolRules, row: Row, touch: Touch) -> ExchangeOrder | None:
        """One open order against a trade (``touch``): the update if it changed visibly."""
        now = ps.now_ms()
        price = touch.price
        if row["type"] in STOP_TYPES and not row["triggered"]:
            state = tr.TriggerState(
                row["type"], row["side"],
                None if row["stop_price"] is None else Decimal(row["stop_price"]), row["trailing_delta"],
                tracking=bool(row["tracking"]), extreme=None if row["extreme"] is None else Decimal(row["extreme"]),
            )  # fmt: skip
            after = tr.on_trade(state, price)
            if not after.triggered:
                if after != state:
                    await ps.update_order(tx, row["client_order_id"], tracking=after.tracking, extreme=after.extreme)
                return None
            return await self.fire(tx, rules, row, price, now)
        limit = Decimal(row["price"])
        if (row["side"] == "BUY" and price <= limit) or (row["side"] == "SELL" and price >= limit):
            took = touch.take(limit, Decimal(row["quantity"]) - Decimal(row["executed_qty"]))
            if took is not None and took <= 0:
                return None  # the trade at its price went to orders resting before it
            return await self.account.execute(tx, row["client_order_id"], rules, limit, now, took)
        return None

    async def fire(self, tx: Connection, rules: SymbolRules, row: Row, last: Decimal, now: int) -> ExchangeOrder:
        """A conditional order triggered: it works as MARKET, or as LIMIT (filling now or resting)."""
        cid = row["client_order_id"]
        await ps.update_order(tx, cid, triggered=True, updated_ms=now)
        await self._before_trigger(tx, rules, row, now)
        try:
            if row["type"] in ("STOP_LOSS", "TAKE_PROFIT"):
                return await self.account.execute(
                    tx, cid, rules, self.account.market_price(row["side"], last, rules), now
                )
            limit = Decimal(row["price"])
            if tr.limit_marketable(row["side"], limit, last):
                price = min(last, limit) if row["side"] == "BUY" else max(last, limit)
                return await self.account.execute(tx, cid, rules, price, now)
            if row["time_in_force"] in ("IOC", "FOK"):
                return await self.account.set_status(tx, rules, cid, "EXPIRED", now)
            row = await ps.order_row(tx, cid)
            await self.account.release(tx, rules, row)
            need = self.account.need(ps.request_of(row), Decimal(row["quantity"]), last)
            await self.account.hold(tx, rules, row["side"], need)
            await ps.update_order(tx, cid, reserved=need)
            return ps.exchange_order(await ps.order_row(tx, cid))
        except InsufficientBalance as exc:
            log.info("paper_stop_expired", client_order_id=cid, reason=str(exc))
            return await self.account.set_status(tx, rules, cid, "EXPIRED", now)
