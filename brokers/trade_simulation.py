"""trade_simulate's work: legs checked like real orders, filled on a copy of the account, risk measured.

Nothing here sends an order or records one.  For each leg, in order:

1. a symbol the venue does not list is refused: a stock (the quote source knows it) answers
   MARKET_CLOSED while its session is closed, else INVALID_SYMBOL (the daemon's brokers trade
   exchange pairs only); any other unknown name answers INVALID_SYMBOL;
2. the order guard's dry run (:meth:`brokers.orders.guard.OrderGuard.evaluate`): the same checks a real
   order passes — allowed symbols, listing, exchange filters, a reference price (fail closed),
   the per-order limit, the halt switch and the daily limit, counting the earlier accepted legs
   of this simulation on top of today's traded value;
3. the fill: at the guard's reference price (the engine's live trade, else the venue's ticker)
   for a market leg, at its limit price for a limit leg; the fee at the account's commission rates
   (:func:`fee_rates`, brokers/commission.py: the role's and the side's rate), taken from the asset
   received as on Binance;
4. the funds: the asset spent must be free in the simulated account (INSUFFICIENT_FUNDS).

A refused leg leaves the simulated account unchanged.  The risk metrics
(:mod:`brokers.risk_metrics`) are computed on the account after the accepted legs, from daily
closes of each valued asset over the look-back, fetched through the market data (cached 60 s).

A simulation reads the account through :class:`SimulatedAccount`: a single node's order service
(:class:`ServiceAccount`: its broker and its guard), or a cluster front's mirror of the account with
the order leader's guard rails (cluster/front_desk.py).  Real legs (trade_execute) are
brokers/orders/trade_legs.py.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, Protocol

import numpy as np
import structlog

from brokers.commission import DEFAULT_RATES, FeeRates
from brokers.filters import SymbolRules
from brokers.halt import TradingHalted
from brokers.models import Balance, BrokerError, OrderRejected, OrderRequest, RateLimitedError
from brokers.orders.args import OrderInputError
from brokers.orders.checks import Admitted
from brokers.orders.guard import LimitExceeded, OrderRefused
from brokers.orders.lists import check_order_type
from brokers.orders.service import OrderService
from brokers.portfolio_view import Holdings, PortfolioView, Pricer, iso, pair_of, value
from brokers.risk_metrics import RiskMetrics, align_closes, risk_metrics, value_series
from engine import FloatArray, IntArray, MarketData, MarketDataError, QuoteSource, is_crypto

log = structlog.get_logger(__name__)

HISTORY_TTL_S = 60.0

Code = Literal[
    "RISK_LIMIT_EXCEEDED", "INVALID_SYMBOL", "INSUFFICIENT_FUNDS", "INVALID_ARGUMENT", "MARKET_CLOSED",
    "RATE_LIMITED", "NETWORK_ERROR", "INTERNAL_ERROR",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Leg:
    symbol: str
    side: Literal["BUY", "SELL"]
    quantity: Decimal
    price: Decimal | None = None


@dataclass(slots=True)
class LegResult:
    leg: Leg
    status: Literal["filled", "refused"]
    price: float | None = None
    fees: float = 0.0
    total_cost: float = 0.0
    fee_rate: float | None = None
    liquidity: Literal["maker", "taker"] | None = None
    quote_asset: str | None = None
    fee_source: str | None = None
    code: Code | None = None
    message: str | None = None


@dataclass(slots=True)
class Simulation:
    legs: list[LegResult]
    before: PortfolioView
    after: PortfolioView
    risk: RiskMetrics
    lookback_days: int
    refs: list[str] = field(default_factory=list)


async def fee_rates(broker: object, symbol: str) -> FeeRates:
    """The broker's fee schedule: the paper broker's ``fee_rate`` (paper_fee_rate); a broker exposing
    ``commission_rates(symbol) -> FeeRates`` (the account's own rates: the Binance broker); else, or
    when those cannot be read, Binance's default (the leg's ``fee_source`` says which)."""
    rate = getattr(broker, "fee_rate", None)
    if isinstance(rate, Decimal):
        return FeeRates(rate, rate, "paper_fee_rate")
    lookup = getattr(broker, "commission_rates", None)
    if lookup is not None:
        try:
            rates = await lookup(symbol)
            if isinstance(rates, FeeRates):
                return rates
        except (BrokerError, ValueError, TypeError) as exc:
            log.info("commission_rates_unavailable", symbol=symbol, error=str(exc))
            return dataclasses.replace(DEFAULT_RATES, source=f"{DEFAULT_RATES.source} (account rates unreadable)")
    return DEFAULT_RATES


_VENUE_CODES: dict[int, Code] = {-32003: "INVALID_SYMBOL", -32004: "INSUFFICIENT_FUNDS", -32001: "RATE_LIMITED"}


def refusal_code(exc: BaseException) -> Code:
    """The seed's code for an order-path refusal (the guard's, the filters', the venue's)."""
    if isinstance(exc, LimitExceeded | TradingHalted):
        return "RISK_LIMIT_EXCEEDED"
    if isinstance(exc, RateLimitedError):
        return "RATE_LIMITED"
    if isinstance(exc, OrderRefused):
        return "NETWORK_ERROR"  # no usable price: the limits could not be evaluated, refused (fail closed)
    if isinstance(exc, OrderInputError | BrokerError):
        refused = isinstance(exc, OrderInputError | OrderRejected)  # the caller's order, not the connection
        otherwise: Code = "INVALID_ARGUMENT" if refused else "NETWORK_ERROR"
        return _VENUE_CODES.get(exc.code or 0, otherwise)
    return "NETWORK_ERROR"


async def unlisted(symbol: str, venue: str, quotes: QuoteSource | None) -> tuple[Code, str]:
    """Why a symbol the venue does not list cannot be traded: MARKET_CLOSED for a stock out of its
    session, else INVALID_SYMBOL naming why."""
    if quotes is not None and not is_crypto(symbol):
        try:
            q = await quotes.quote(symbol)
        except MarketDataError:
            q = None
        if q is not None:
            if q.market_open is False:
                return "MARKET_CLOSED", (
                    f"{symbol} is a stock and its market is closed now; besides, this daemon's brokers trade "
                    f"exchange pairs only ({venue}), so it cannot be traded here at any hour"
                )
            return "INVALID_SYMBOL", (
                f"{symbol} is a stock; this daemon's brokers trade exchange pairs only ({venue}), e.g. BTCUSDT"
            )
    return "INVALID_SYMBOL", f"{symbol} is not a trading pair on {venue}; check the spelling (e.g. BTCUSDT)"


class DailyCloses:
    """Daily closes per (symbol, bars), kept ``HISTORY_TTL_S`` with the reference of the request that fetched them."""

    def __init__(self, market: MarketData) -> None:
        self.market = market
        self._cache: dict[tuple[str, int], tuple[float, IntArray, FloatArray, str]] = {}

    async def closes(self, symbol: str, bars: int) -> tuple[IntArray, FloatArray, str]:
        key = (symbol, bars)
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < HISTORY_TTL_S:
            return hit[1], hit[2], hit[3]
        ref = f"binance:GET /api/v3/klines?symbol={symbol}&interval=1d&limit={bars}@{iso(time.time())}"
        got = await self.market.fetch(symbol, "1d", bars)
        times = got.times if got.times is not None else np.arange(-len(got) + 1, 1, dtype=np.int64)
        self._cache[key] = (time.monotonic(), times, got.close, ref)
        return times, got.close, ref


_histories: weakref.WeakKeyDictionary[MarketData, DailyCloses] = weakref.WeakKeyDictionary()


def daily_closes(market: MarketData) -> DailyCloses:
    held = _histories.get(market)
    if held is None:
        held = _histories[market] = DailyCloses(market)
    return held


class SimulatedAccount(Protocol):
    """What a simulation reads: the account's balances, the venue's listing, the guard's dry run
    (steps 1-6, the halt switch, the daily limit; nothing recorded) and the fee schedule."""

    @property
    def name(self) -> str: ...

    async def balances(self) -> list[Balance]: ...

    async def rules(self, symbol: str) -> SymbolRules | None: ...

    async def evaluate(self, req: OrderRequest, *, pending: Decimal) -> Admitted: ...

    async def fee_rates(self, symbol: str) -> FeeRates: ...


class ServiceAccount:
    """A single node's account for a simulation: the order service's broker and guard."""

    def __init__(self, orders: OrderService) -> None:
        self.orders = orders
        self.name = orders.broker.name

    async def balances(self) -> list[Balance]:
        return await self.orders.broker.balances()

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self.orders.broker.rules(symbol)

    async def evaluate(self, req: OrderRequest, *, pending: Decimal) -> Admitted:
        check_order_type(self.orders.broker, req.type)
        return await self.orders.guard.evaluate(req, pending=pending)

    async def fee_rates(self, symbol: str) -> FeeRates:
        return await fee_rates(self.orders.broker, symbol)


class Simulator:
    """One simulation over an account (nothing sent, nothing recorded)."""

    def __init__(
        self, account: SimulatedAccount, pricer: Pricer, market: MarketData | None, *, rf_annual: float, days: int
    ) -> None:
        self.account = account
        self.pricer = pricer
        self.market = market
        self.rf_annual = rf_annual
        self.days = days

    async def run(self, legs: list[Leg]) -> Simulation:
        holdings = Holdings.of(await self.account.balances())
        before_prices = await self.pricer.prices([pair_of(a) for a in holdings.non_cash()])
        before = value(holdings, before_prices)
        after = holdings.copy()
        pending = Decimal(0)
        results: list[LegResult] = []
        for i, leg in enumerate(legs):
            result, notional = await self._leg(i, leg, after, pending)
            pending += notional
            results.append(result)
        prices = await self.pricer.prices([pair_of(a) for a in after.non_cash()])
        view = value(after, prices)
        refs = [r for p in {**before_prices, **prices}.values() if not isinstance(p, str) for r in p.refs]
        risk = await self._risk(view, refs)
        return Simulation(results, before, view, risk, self.days, list(dict.fromkeys(refs)))

    async def _leg(self, i: int, leg: Leg, h: Holdings, pending: Decimal) -> tuple[LegResult, Decimal]:
        account = self.account
        try:
            rules = await account.rules(leg.symbol)
        except BrokerError as exc:
            return LegResult(leg, "refused", code=refusal_code(exc), message=str(exc)), Decimal(0)
        if rules is None:
            code, why = await unlisted(leg.symbol, account.name, self.pricer.quotes)
            return LegResult(leg, "refused", code=code, message=why), Decimal(0)
        req = OrderRequest(
            symbol=leg.symbol,
            side=leg.side,
            type="MARKET" if leg.price is None else "LIMIT",
            client_order_id=f"simulated-{i}",
            quantity=leg.quantity,
            price=leg.price,
            time_in_force=None if leg.price is None else "GTC",
        )
        try:
            checked = await account.evaluate(req, pending=pending)
        except (OrderInputError, BrokerError) as exc:
            return LegResult(leg, "refused", code=refusal_code(exc), message=str(exc)), Decimal(0)
        ref = checked.reference.price
        fill = leg.price if leg.price is not None else ref
        resting = leg.price is not None and (leg.price < ref if leg.side == "BUY" else leg.price > ref)
        rates = await account.fee_rates(leg.symbol)
        rate = rates.rate(maker=resting, side=leg.side)
        base, quote = rules.base_asset, rules.quote_asset
        notional = leg.quantity * fill
        spend, need = (quote, notional) if leg.side == "BUY" else (base, leg.quantity)
        free = h.free.get(spend, Decimal(0))
        if free < need:
            why = f"insufficient {spend}: the leg needs {need.normalize():f}, the simulated account has {free:f} free"
            return LegResult(leg, "refused", code="INSUFFICIENT_FUNDS", message=why), Decimal(0)
        if leg.side == "BUY":
            fee = leg.quantity * rate  # in the base asset received
            h.add(quote, -notional)
            h.add(base, leg.quantity - fee)
            fee_quote = fee * fill
            cost = notional + fee_quote
        else:
            fee_quote = notional * rate  # in the quote asset received
            h.add(base, -leg.quantity)
            h.add(quote, notional - fee_quote)
            cost = -(notional - fee_quote)
        out = LegResult(
            leg, "filled", price=float(fill), fees=float(fee_quote), total_cost=float(cost), fee_rate=float(rate),
            liquidity="maker" if resting else "taker", quote_asset=quote, fee_source=rates.source,
        )  # fmt: skip
        return out, checked.notional

    async def _risk(self, view: PortfolioView, refs: list[str]) -> RiskMetrics:
        if self.market is None:
            why = "no market data in this daemon (daily history unavailable)"
            return RiskMetrics(None, None, None, 0, dict.fromkeys(("var_95_1d", "max_drawdown", "sharpe_ratio"), why))
        history = daily_closes(self.market)
        series = []
        for p in view.positions:
            try:
                times, closes, ref = await history.closes(p.symbol, self.days + 1)
            except MarketDataError as exc:
                why = f"daily history of {p.symbol} unavailable: {exc}"
                return RiskMetrics(
                    None, None, None, 0, dict.fromkeys(("var_95_1d", "max_drawdown", "sharpe_ratio"), why)
                )
            refs.append(ref)
            series.append((times, closes))
        quantities = np.asarray([p.quantity for p in view.positions], dtype=np.float64)
        if series:
            _, matrix = align_closes(series, self.days)
            values = value_series(quantities, matrix, view.cash)
        else:
            values = np.full(self.days + 1, view.cash, dtype=np.float64)
        return risk_metrics(values, self.rf_annual)
