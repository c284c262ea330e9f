"""The paper broker's conditional orders: STOP_LOSS, STOP_LOSS_LIMIT, TAKE_PROFIT, TAKE_PROFIT_LIMIT.

Owns what :class:`~brokers.paper.broker.PaperBroker` does with a stop or trailing order: Binance's
refusals at placement (a stop price or trailing delta is required, TRAILING_DELTA,
MAX_NUM_ALGO_ORDERS, "Order would trigger immediately."), its trigger and trailing state
(persisted on every change, so it survives restarts), and what happens when a tick triggers it:
a STOP_LOSS / TAKE_PROFIT fills at once as a MARKET order (with the broker's slippage), a
…_LIMIT order fills if marketable and otherwise rests like a LIMIT order.  The rules are
:mod:`brokers.trigger_rules`, shared with the simulator; balances and fills are the broker's.
A resting limit order (a LIMIT, or a triggered …_LIMIT) meets each trade as a :class:`Touch`,
which carries the broker's one size rule (brokers/paper/broker.py) into :meth:`PaperStops.on_tick`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import structlog

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import STOP_TYPES, ExchangeOrder, InsufficientBalance, OrderRejected, OrderRequest
from brokers.paper import store as ps

if TYPE_CHECKING:
    from brokers.paper.broker import PaperBroker

log = structlog.get_logger(__name__)
MAX_ALGO_ORDERS = 5


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


class PaperStops:
    """Conditional orders of one paper account."""

    def __init__(self, broker: PaperBroker) -> None:
        self.broker = broker

    def check(self, req: OrderRequest, last: Decimal) -> None:
        """Binance's refusals of a conditional order: parameters, TRAILING_DELTA, would trigger immediately."""
        if req.stop_price is None and req.trailing_delta is None:
            raise OrderRejected(f"{req.type} needs a stop price or a trailing delta", code=-1102)
        if req.type.endswith("_LIMIT") and req.price is None:
            raise OrderRejected(f"{req.type} needs a limit price", code=-1102)
        if req.trailing_delta is not None:
            refusal = tr.check_trailing_delta(req.type, req.side, req.trailing_delta, self.broker.trailing_bounds)
            if refusal is not None:
                raise OrderRejected(refusal.msg, code=refusal.code)
        if req.stop_price is not None and tr.would_trigger_immediately(req.type, req.side, req.stop_price, last):
            raise OrderRejected(tr.WOULD_TRIGGER.msg, code=tr.WOULD_TRIGGER.code)

    async def check_algo(self, tx: Any, symbol: str, new: int) -> None:
        placeholders = ", ".join("?" for _ in STOP_TYPES)
        async with tx.execute(
            f"SELECT COUNT(*) AS n FROM paper_orders WHERE symbol = ? AND status = 'NEW' AND type IN ({placeholders})",
            (symbol, *sorted(STOP_TYPES)),
        ) as cur:
            row = await cur.fetchone()
        refusal = tr.algo_limit(int(row["n"]), new, MAX_ALGO_ORDERS)
        if refusal is not None:
            raise OrderRejected(refusal.msg, code=refusal.code)

    async def place(self, req: OrderRequest, rules: SymbolRules, last: Decimal, now: int) -> ExchangeOrder:
        assert req.quantity is not None
        self.check(req, last)
        state = tr.start(req.type, req.side, req.stop_price, req.trailing_delta, last)
        async with self.broker.db.transaction() as tx:
            await self.check_algo(tx, req.symbol, 1)
            need = self.broker.need(req, req.quantity, last)
            await self.broker.lock(tx, rules, req.side, need)
            await ps.insert_order(
                tx, req, req.quantity, "NEW", now, reserved=need, tracking=state.tracking, extreme=state.extreme
            )
            return ps.exchange_order(await ps.order_row(tx, req.client_order_id))

    async def on_tick(self, tx: Any, rules: SymbolRules, row: Any, touch: Touch) -> ExchangeOrder | None:
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
            return await self.broker.execute(tx, row["client_order_id"], rules, limit, now, took)
        return None

    async def fire(self, tx: Any, rules: SymbolRules, row: Any, last: Decimal, now: int) -> ExchangeOrder:
        """A conditional order triggered: it works as MARKET, or as LIMIT (filling now or resting)."""
        cid = row["client_order_id"]
        await ps.update_order(tx, cid, triggered=True, updated_ms=now)
        await self.broker.lists.before_trigger(tx, rules, row, now)
        try:
            if row["type"] in ("STOP_LOSS", "TAKE_PROFIT"):
                return await self.broker.execute(
                    tx, cid, rules, self.broker.market_price(row["side"], last, rules), now
                )
            limit = Decimal(row["price"])
            if tr.limit_marketable(row["side"], limit, last):
                price = min(last, limit) if row["side"] == "BUY" else max(last, limit)
                return await self.broker.execute(tx, cid, rules, price, now)
            if row["time_in_force"] in ("IOC", "FOK"):
                return await self.broker.set_status(tx, rules, cid, "EXPIRED", now)
            row = await ps.order_row(tx, cid)
            await self.broker.release(tx, rules, row)
            need = self.broker.need(ps.request_of(row), Decimal(row["quantity"]), last)
            await self.broker.lock(tx, rules, row["side"], need)
            await ps.update_order(tx, cid, reserved=need)
            return ps.exchange_order(await ps.order_row(tx, cid))
        except InsufficientBalance as exc:
            log.info("paper_stop_expired", client_order_id=cid, reason=str(exc))
            return await self.broker.set_status(tx, rules, cid, "EXPIRED", now)
