"""OrderGuard: the one gate every order path passes before anything is sent (design.md §8 guard rails).

:meth:`OrderGuard.admit` takes an :class:`~brokers.models.OrderRequest` (its ``owner`` included)
and either records it as an intent (PENDING_SUBMIT) or refuses it, in this order:

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
   database transaction (:func:`brokers.order_admission.admit_in`), so concurrent orders are
   serialized and cannot all pass a limit only one fits under.

Every check fails closed: when one cannot be evaluated the order is refused with a message
naming the reason and the fix.  The tool calls it today; alert actions, schedules, brackets
and OCO legs (design.md §8) call the same method.

Order lists (:meth:`OrderGuard.admit_list`, :meth:`OrderGuard.admit_bracket`) pass the same
checks on every leg — a stop's ``stop_price`` against the price filter like a limit price, each
leg's value against the per-order limit — before anything is recorded; the daily limit then
counts the list once: its working order (an OTOCO's, or a bracket's entry) plus the larger of
its take-profit and stop legs, since only one of an OCO pair can fill.  All legs are recorded in
one transaction (:mod:`brokers.list_store`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import structlog

from brokers.filters import FilterError, SymbolRules
from brokers.halt import check_not_halted
from brokers.list_store import BracketPlan, ListStore, legs_of
from brokers.models import BrokerError, ListRequest, OrderRequest, RateLimitedError
from brokers.order_admission import Admission, admit_in, daily_used
from brokers.order_args import OrderInputError
from brokers.order_args import plain_decimal as plain
from brokers.order_store import OrderStore

log = structlog.get_logger(__name__)

EnginePrice = Callable[[str], Decimal | None]
"""The engine's last trade price of a symbol on a live stream, or None (no I/O: a dictionary look-up)."""
TickerPrice = Callable[[str], Awaitable[Decimal | None]]
"""The venue's REST ticker price; raises BrokerError when the request fails."""
RulesLookup = Callable[[str], Awaitable[SymbolRules | None]]

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class SafetyLimits:
    """The operator's guard rails (config)."""

    max_order_notional: Decimal | None = Decimal("10000")
    max_daily_notional: Decimal | None = Decimal("50000")
    allowed_symbols: frozenset[str] = frozenset()
    """Empty: every symbol the exchange lists."""


class OrderRefused(OrderInputError):
    """The guard refused the order: nothing was recorded and nothing was sent."""


class LimitExceeded(OrderRefused):
    """Refused by one of the operator's limits: allowed symbols, per-order or daily notional."""


@dataclass(frozen=True, slots=True)
class ReferencePrice:
    price: Decimal
    source: Literal["engine", "ticker"]


@dataclass(frozen=True, slots=True)
class Admitted:
    """An order recorded as an intent, ready to send."""

    request: OrderRequest
    notional: Decimal
    reference: ReferencePrice
    rules: SymbolRules


def _usable(price: Decimal | None) -> bool:
    """A price the limits can be evaluated with: present, finite and positive."""
    return price is not None and price.is_finite() and price > 0


def order_value(req: OrderRequest, market: Decimal) -> Decimal:
    """What an order is worth for the limits: see the module docstring, step 5."""
    if req.quote_quantity is not None:
        return req.quote_quantity
    assert req.quantity is not None
    if req.type == "MARKET" or (req.price is None and req.stop_price is None):
        return req.quantity * market
    return req.quantity * max(req.price or market, req.stop_price or market, market)


class OrderGuard:
    """Admits orders for one broker account: checks, values and records them (or refuses)."""

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
        self.store = store
        self.broker_name = broker_name
        self._rules = rules
        self._ticker = ticker
        self._engine_price = engine_price
        self.limits = limits or SafetyLimits()
        self._clock = clock

    async def rules(self, symbol: str) -> SymbolRules:
        rules = await self._rules(symbol)
        if rules is None or rules.status != "TRADING":
            raise OrderInputError(f"invalid symbol: {symbol} is not a tradable symbol on this exchange", code=-32003)
        return rules

    async def reference_price(self, symbol: str) -> ReferencePrice:
        """The engine's live last trade, else the venue's ticker, else :class:`OrderRefused`.

        A rate-limit ban on the ticker is passed on as it is (RateLimitedError carries the wait).
        """
        engine = None if self._engine_price is None else self._engine_price(symbol)
        if _usable(engine):
            assert engine is not None
            return ReferencePrice(engine, "engine")
        why = "the engine has no live trade for it yet" if self._engine_price is not None else "no engine price"
        try:
            ticker = await self._ticker(symbol)
        except RateLimitedError:
            raise
        except BrokerError as exc:
            log.warning("order_price_unavailable", symbol=symbol, error=str(exc))
            raise OrderRefused(
                f"order refused: no price for {symbol} ({why} and the ticker request failed: {exc}); "
                "retry when market data is back"
            ) from None
        if not _usable(ticker):
            raise OrderRefused(
                f"order refused: no price for {symbol} ({why} and the ticker gave no price); "
                "retry when market data is back"
            )
        assert ticker is not None
        return ReferencePrice(ticker, "ticker")

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
            return daily_used(conn, self.broker_name, now - DAY_S)

        daily = self.limits.max_daily_notional
        used = await self.store.db.run_transaction(used_in) + pending
        if daily is not None and used + checked.notional > daily:
            self.raise_unless_recorded(checked, Admission(False, used))
        return checked

    async def check(self, req: OrderRequest) -> Admitted:
        """Steps 1-6 (everything but the daily limit and the insert): no database write.

        A path that commits the intent inside its own transaction (an alert firing) calls this
        first, then :meth:`admit_checked_in` in its transaction."""
        allowed = self.limits.allowed_symbols
        if allowed and req.symbol not in allowed:
            raise LimitExceeded(
                f"order refused: {req.symbol} is not in the allowed symbols ({', '.join(sorted(allowed))}); "
                "the operator sets trading_allowed_symbols"
            )
        rules = await self.rules(req.symbol)
        self._filters(rules, req)
        ref = await self.reference_price(req.symbol)
        notional = self._value(rules, req, ref)
        return Admitted(req, notional, ref, rules)

    # --- order lists: every leg checked, all recorded in one transaction, counted once --------
    @staticmethod
    def _filters(rules: SymbolRules, req: OrderRequest) -> None:
        """Step 3 without the notional: limit price, stop price and quantity against the filters."""
        try:
            if req.price is not None:
                rules.check_price(req.price)
            if req.stop_price is not None:
                try:
                    rules.check_price(req.stop_price)
                except FilterError as exc:
                    raise FilterError(f"stop_price: {exc}") from None
            if req.quantity is not None:
                rules.check_quantity(req.quantity, market=req.type == "MARKET")
        except FilterError as exc:
            raise OrderInputError(str(exc)) from None

    def _value(self, rules: SymbolRules, req: OrderRequest, ref: ReferencePrice) -> Decimal:
        """The minimum notional at the order's own price (limit, else stop, else the reference), then
        its value (step 5) against the per-order limit (step 6); an order that cannot be valued is refused.
        A limit price is also held to PERCENT_PRICE_BY_SIDE around the reference price."""
        if req.price is not None:
            try:
                rules.check_price_band(req.side, req.price, ref.price)
            except FilterError as exc:
                raise OrderInputError(str(exc)) from None
        if req.quantity is not None:
            at = req.price if req.price is not None else (req.stop_price or ref.price)
            try:
                rules.check_notional(req.quantity, at, market=req.type == "MARKET")
            except FilterError as exc:
                raise OrderInputError(str(exc)) from None
        if req.quantity is None and req.quote_quantity is None:
            raise OrderRefused(f"order refused: {req.client_order_id} has no quantity to value; give quantity")
        notional = order_value(req, ref.price)
        if not _usable(notional):
            raise OrderRefused(f"order refused: {req.client_order_id} cannot be valued; give quantity and prices")
        cap = self.limits.max_order_notional
        if cap is not None and notional > cap:
            raise LimitExceeded(
                f"order refused: order value {plain(notional)} exceeds the per-order limit {plain(cap)} "
                f"(valued at {self._valued_at(req, ref)}); lower the quantity, or the operator raises "
                "trading_max_order_notional"
            )
        return notional

    async def _check_legs(
        self, symbol: str, legs: list[OrderRequest]
    ) -> tuple[SymbolRules, ReferencePrice, list[Decimal]]:
        """Steps 1-6 on every leg (one symbol, one reference price); the legs' values in order."""
        allowed = self.limits.allowed_symbols
        if allowed and symbol not in allowed:
            raise OrderRefused(
                f"order refused: {symbol} is not in the allowed symbols ({', '.join(sorted(allowed))}); "
                "the operator sets trading_allowed_symbols"
            )
        rules = await self.rules(symbol)
        for leg in legs:
            if leg.symbol != symbol:
                raise OrderInputError(f"every leg of an order list must be on {symbol}")
            self._filters(rules, leg)
        ref = await self.reference_price(symbol)
        return rules, ref, [self._value(rules, leg, ref) for leg in legs]

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
        rules, ref, values = await self._check_legs(req.symbol, legs)
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
        rules, ref, values = await self._check_legs(entry.symbol, legs)
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
            raise LimitExceeded(
                f"order refused: order value {plain(checked.notional)} would take today's traded value to "
                f"{plain(admission.used + checked.notional)}, over the daily limit {plain(daily)}; wait until "
                "earlier orders are more than 24 hours old, or the operator raises trading_max_daily_notional"
            )

    def _valued_at(self, req: OrderRequest, ref: ReferencePrice) -> str:
        if req.quote_quantity is not None:
            return "its quote quantity"
        if req.type != "MARKET" and req.price is not None and req.price >= ref.price:
            return f"its limit price {plain(req.price)}"
        return f"the market price {plain(ref.price)} ({ref.source})"
