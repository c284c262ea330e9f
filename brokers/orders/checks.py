"""OrderChecks: steps 1-6 of the guard rails (design.md §8), the part that needs no order store.

An order is checked against the operator's allow-list (``trading_allowed_symbols``), the venue's
listing and filters (price tick and range, LOT_SIZE, minimum notional, PERCENT_PRICE_BY_SIDE),
valued at a reference price (the engine's live last trade, else the venue's ticker, else refused:
a missing price never values an order at zero) and held to the per-order limit
(``trading_max_order_notional``).  Every check fails closed, with a message naming the reason and
the fix.

Two users: :class:`brokers.orders.guard.OrderGuard` (the single node: these checks, then the daily limit
and the intent in one SQLite transaction) and the cluster's order leader
(cluster/order_leader.py: these checks, then the daily limit and the halt switch in one fenced
PostgreSQL transaction).  Keeping them in one class keeps the two paths' refusals identical.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import structlog

from brokers.filters import FilterError, SymbolRules
from brokers.models import BrokerError, OrderRequest, RateLimitedError
from brokers.orders.args import OrderInputError
from brokers.orders.args import plain_decimal as plain

log = structlog.get_logger(__name__)

EnginePrice = Callable[[str], Decimal | None]
"""The engine's last trade price of a symbol on a live stream, or None (no I/O: a dictionary look-up)."""
TickerPrice = Callable[[str], Awaitable[Decimal | None]]
"""The venue's REST ticker price; raises BrokerError when the request fails."""
RulesLookup = Callable[[str], Awaitable[SymbolRules | None]]


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
    """An order that passed the checks, with its value (once admitted: recorded as an intent, ready to send)."""

    request: OrderRequest
    notional: Decimal
    reference: ReferencePrice
    rules: SymbolRules


def _usable(price: Decimal | None) -> bool:
    """A price the limits can be evaluated with: present, finite and positive."""
    return price is not None and price.is_finite() and price > 0


def order_value(req: OrderRequest, market: Decimal) -> Decimal:
    """What an order is worth for the limits: a market order at ``market`` (the reference price) or
    its quote quantity; a limit or stop order at the largest of its prices and ``market``, so a buy
    far above the market or a sell far below it cannot pass as small."""
    if req.quote_quantity is not None:
        return req.quote_quantity
    assert req.quantity is not None
    if req.type == "MARKET" or (req.price is None and req.stop_price is None):
        return req.quantity * market
    return req.quantity * max(req.price or market, req.stop_price or market, market)


def daily_limit_refusal(notional: Decimal, used: Decimal, daily: Decimal) -> LimitExceeded:
    """The refusal of an order whose value would take the rolling 24 h total over ``daily``."""
    return LimitExceeded(
        f"order refused: order value {plain(notional)} would take today's traded value to "
        f"{plain(used + notional)}, over the daily limit {plain(daily)}; wait until "
        "earlier orders are more than 24 hours old, or the operator raises trading_max_daily_notional"
    )


class OrderChecks:
    """Steps 1-6 for one venue: :meth:`check` values an order or refuses it; nothing is recorded."""

    def __init__(
        self,
        *,
        rules: RulesLookup,
        ticker: TickerPrice,
        engine_price: EnginePrice | None = None,
        limits: SafetyLimits | None = None,
    ) -> None:
        self._rules = rules
        self._ticker = ticker
        self._engine_price = engine_price
        self.limits = limits or SafetyLimits()

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

    async def check_legs(
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

    def _valued_at(self, req: OrderRequest, ref: ReferencePrice) -> str:
        if req.quote_quantity is not None:
            return "its quote quantity"
        if req.type != "MARKET" and req.price is not None and req.price >= ref.price:
            return f"its limit price {plain(req.price)}"
        return f"the market price {plain(ref.price)} ({ref.source})"
