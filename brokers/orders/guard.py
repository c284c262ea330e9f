"""OrderGuard: the one gate every order path passes before anything is sent (design.md §8 guard rails).

:meth:`OrderGuard.admit` takes an :class:`~brokers.models.OrderRequest` (its ``owner`` included)
and either records it as an intent (PENDING_SUBMIT) or refuses it, in this order:

Steps 1-6 are :class:`brokers.orders.checks.OrderChecks` (shared with the cluster's order leader):

1. the operator's allow-list (``trading_allowed_symbols``);
2. the symbol is listed and trading on the venue;
3. the exchange filters (price tick and range, LOT_SIZE, minimum notional), exact decimals;
4. a reference price: the engine's last trade on a live stream first, the venue's ticker
   second, else the order is refused — a missing price never values an order at zero;
5. the order's value: a market order at the reference price (or its quote quantity), a
   limit order at the larger of its limit price and the reference price, so a buy far above
   the market or a sell far below it cannot pass as small;
6. the per-order limit (``trading_max_order_notional``);
7. the daily limit (``trading_max_daily_notional``) checked and the intent inserted in one
   database transaction (:func:`brokers.orders.admission.admit_in`), so concurrent orders are
   serialized and cannot all pass a limit only one fits under.

Every check fails closed: when one cannot be evaluated the order is refused with a message
naming the reason and the fix.  The tool calls it today; alert actions, schedules, brackets
and OCO legs (design.md §8) call the same method.

Order lists (:meth:`OrderGuard.admit_list`, :meth:`OrderGuard.admit_bracket`) pass the same
checks on every leg — a stop's ``stop_price`` against the price filter like a limit price, each
leg's value against the per-order limit — before anything is recorded; the daily limit then
counts the list once: its working order (an OTOCO's, or a bracket's entry) plus the larger of
its take-profit and stop legs, since only one of an OCO pair can fill.  All legs are recorded in
one transaction (:mod:`brokers.orders.list_store`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from decimal import Decimal

import structlog

from brokers.filters import SymbolRules
from brokers.halt import check_not_halted
from brokers.models import ListRequest, OrderRequest
from brokers.orders.admission import Admission, admit_in, daily_used
from brokers.orders.args import plain_decimal as plain
from brokers.orders.checks import (
    Admitted,
    EnginePrice,
    LimitExceeded,
    OrderChecks,
    OrderRefused,
    ReferencePrice,
    RulesLookup,
    SafetyLimits,
    TickerPrice,
    daily_limit_refusal,
    order_value,
)
from brokers.orders.list_store import BracketPlan, ListStore, legs_of
from brokers.orders.store import OrderStore
from brokers.suspensions import check_principal_in

__all__ = [
    "Admitted",
    "EnginePrice",
    "LimitExceeded",
    "OrderGuard",
    "OrderRefused",
    "ReferencePrice",
    "SafetyLimits",
    "order_value",
]

log = structlog.get_logger(__name__)

DAY_S = 86400.0


class OrderGuard(OrderChecks):
    """Admits orders for one broker account: checks (:class:`OrderChecks`), values and records them (or refuses)."""

    def __init__(
        self,
        store: OrderStore,
        broker_name: str,
        *,
        rules: RulesLookup,
        ticker: TickerPrice,
        engine_price: EnginePrice | None = None,
        limits: SafetyLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(rules=rules, ticker=ticker, engine_price=engine_price, limits=limits)
        self.store = store
        self.broker_name = broker_name
        self._clock = clock

    async def admit(self, req: OrderRequest) -> Admitted:
        """Check, value and record ``req`` as an intent (PENDING_SUBMIT); raises OrderInputError/OrderRefused."""
        checked = await self.check(req)
        now = self._clock()
        admission = await self.store.admit_intent(
            self.broker_name, req, checked.notional, now, daily_limit=self.limits.max_daily_notional, since=now - DAY_S
        )
        self.raise_unless_recorded(checked, admission)
        return checked

    async def evaluate(self, req: OrderRequest, *, pending: Decimal = Decimal(0)) -> Admitted:
        """A dry run of :meth:`admit`: the same checks — steps 1-6, the halt switch and the daily
        limit, counting ``pending`` (the value of orders the caller means to place before this one)
        on top of today's — and nothing recorded.  Raises what :meth:`admit` would raise."""
        checked = await self.check(req)
        now = self._clock()

        def used_in(conn: sqlite3.Connection) -> Decimal:
            check_not_halted(conn)
            check_principal_in(conn, req.owner)
            return daily_used(conn, self.broker_name, now - DAY_S)

        daily = self.limits.max_daily_notional
        used = await self.store.db.run_transaction(used_in) + pending
        if daily is not None and used + checked.notional > daily:
            self.raise_unless_recorded(checked, Admission(False, used))
        return checked

    def _refuse_list(self, admission: Admission, what: str, added: Decimal) -> None:
        if admission.duplicate:
            raise OrderRefused(f"{what} was already used; choose another")
        if not admission.recorded:
            daily = self.limits.max_daily_notional
            assert daily is not None
            raise OrderRefused(
                f"order refused: value {plain(added)} (the entry and the larger exit leg) would take today's "
                f"traded value to {plain(admission.used + added)}, over the daily limit {plain(daily)}; wait until "
                "earlier orders are more than 24 hours old, or the operator raises trading_max_daily_notional"
            )

    async def admit_list(self, req: ListRequest) -> tuple[SymbolRules, ReferencePrice]:
        """Check every leg of an OCO / OTOCO, then record the list and all its legs in one transaction;
        the daily limit counts the working order (if any) plus the larger exit leg."""
        legs = [leg for leg, _ in legs_of(req)]
        rules, ref, values = await self.check_legs(req.symbol, legs)
        notionals = {leg.client_order_id: v for leg, v in zip(legs, values, strict=True)}
        exits = max(notionals[req.take_profit.client_order_id], notionals[req.stop.client_order_id])
        counted = exits + (notionals[req.working.client_order_id] if req.working is not None else Decimal(0))
        now = self._clock()
        admission = await ListStore(self.store.db).admit_list(
            self.broker_name, req, notionals, counted, now,
            daily_limit=self.limits.max_daily_notional, since=now - DAY_S,
        )  # fmt: skip
        self._refuse_list(admission, f"list id {req.list_client_id} (or one of its order ids)", counted)
        return rules, ref

    async def admit_bracket(self, entry: OrderRequest, exit_oco: ListRequest) -> tuple[Admitted, BracketPlan]:
        """Check the entry and both legs of its exit OCO (placed by the daemon once the entry fills),
        then record the entry intent and the waiting bracket in one transaction, counted together."""
        legs = [entry, exit_oco.take_profit, exit_oco.stop]
        rules, ref, values = await self.check_legs(entry.symbol, legs)
        stop, tp = exit_oco.stop, exit_oco.take_profit
        tp_price = tp.price if tp.price is not None else tp.stop_price
        assert stop.quantity is not None and stop.stop_price is not None and tp_price is not None
        plan = BracketPlan(
            exit_oco.list_client_id, stop.side, stop.quantity, tp_price, stop.stop_price, stop.price,
            values[1], values[2],
        )  # fmt: skip
        now = self._clock()
        admission = await ListStore(self.store.db).admit_bracket(
            self.broker_name, entry, values[0], plan, now,
            daily_limit=self.limits.max_daily_notional, since=now - DAY_S,
        )  # fmt: skip
        self._refuse_list(admission, f"client_order_id {entry.client_order_id}", values[0] + plan.reserved)
        return Admitted(entry, values[0], ref, rules), plan

    def admit_checked_in(self, conn: sqlite3.Connection, checked: Admitted) -> None:
        """Step 7 inside the caller's transaction (database thread): the daily limit and the insert.

        Raises :class:`OrderRefused` before writing anything when the order cannot be recorded."""
        now = self._clock()
        admission = admit_in(
            conn,
            self.broker_name,
            checked.request,
            checked.notional,
            now,
            daily_limit=self.limits.max_daily_notional,
            since=now - DAY_S,
        )
        self.raise_unless_recorded(checked, admission)

    def raise_unless_recorded(self, checked: Admitted, admission: Admission) -> None:
        req = checked.request
        if admission.duplicate:
            raise OrderRefused(f"client_order_id {req.client_order_id} was already used; choose another")
        if not admission.recorded:
            daily = self.limits.max_daily_notional
            assert daily is not None
            raise daily_limit_refusal(checked.notional, admission.used, daily)
