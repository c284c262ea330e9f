"""The account as a portfolio: holdings from the broker's balances, priced, valued and weighted.

This module owns the valuation rule get_portfolio, trade_simulate and trade_execute share:

- the valuation currency is :data:`VALUATION` (USDT);
- ``cash`` is the total (free + locked) of the USD stablecoins in :data:`CASH_ASSETS` (USDT,
  USDC, FDUSD, BUSD), each counted 1:1 as USDT — a stated simplification (a de-pegged
  stablecoin is not marked down);
- every other asset with a balance is a position on the pair ``<ASSET>USDT``, priced by the
  engine's live last trade when it follows that pair, else by the quote source (Binance's
  24 h ticker, :class:`~engine.market_data.quotes.QuoteSource`), else the venue's ticker;
- an asset without such a pair, or without any price, is *unvalued*: listed with the reason
  and left out of ``total_value`` (never valued at zero silently);
- ``weight`` = market value / total value (cash included in the total).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Protocol

import structlog

from brokers.filters import SymbolRules
from brokers.models import Balance, BrokerError
from brokers.orders.service import OrderService
from engine import MarketDataError, QuoteSource

log = structlog.get_logger(__name__)

VALUATION = "USDT"
CASH_ASSETS = ("USDT", "USDC", "FDUSD", "BUSD")
"""USD stablecoins counted as cash, 1:1 with USDT."""


def pair_of(asset: str) -> str:
    """The pair an asset is priced on (``BTC`` → ``BTCUSDT``)."""
    return f"{asset}{VALUATION}"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class Holdings:
    """Balances by asset (free, locked), mutable so a simulation can move them."""

    free: dict[str, Decimal] = field(default_factory=dict)
    locked: dict[str, Decimal] = field(default_factory=dict)

    @classmethod
    def of(cls, balances: list[Balance]) -> Holdings:
        h = cls()
        for b in balances:
            h.free[b.asset] = h.free.get(b.asset, Decimal(0)) + b.free
            h.locked[b.asset] = h.locked.get(b.asset, Decimal(0)) + b.locked
        return h

    def copy(self) -> Holdings:
        return Holdings(dict(self.free), dict(self.locked))

    def total(self, asset: str) -> Decimal:
        return self.free.get(asset, Decimal(0)) + self.locked.get(asset, Decimal(0))

    def add(self, asset: str, amount: Decimal) -> None:
        self.free[asset] = self.free.get(asset, Decimal(0)) + amount

    def assets(self) -> list[str]:
        return sorted(a for a in set(self.free) | set(self.locked) if self.total(a) != 0)

    def cash(self) -> float:
        return float(sum((self.total(a) for a in CASH_ASSETS), Decimal(0)))

    def non_cash(self) -> list[str]:
        return [a for a in self.assets() if a not in CASH_ASSETS]


@dataclass(frozen=True, slots=True)
class PositionView:
    asset: str
    symbol: str
    quantity: float
    current_price: float
    market_value: float
    weight: float
    avg_price: float | None = None


@dataclass(frozen=True, slots=True)
class Unvalued:
    asset: str
    quantity: float
    reason: str


@dataclass(frozen=True, slots=True)
class PortfolioView:
    positions: list[PositionView]
    cash: float
    cash_by_asset: dict[str, float]
    total_value: float
    unvalued: list[Unvalued]


@dataclass(frozen=True, slots=True)
class Priced:
    """A pair's current price and where it came from."""

    price: float
    refs: tuple[str, ...]


def value(holdings: Holdings, prices: dict[str, Priced | str], avg: dict[str, float] | None = None) -> PortfolioView:
    """The portfolio of ``holdings`` at ``prices`` (pair → Priced, or the reason it has no price)."""
    cash = holdings.cash()
    rows: list[tuple[str, float, float]] = []
    unvalued: list[Unvalued] = []
    for asset in holdings.non_cash():
        qty = float(holdings.total(asset))
        got = prices.get(pair_of(asset), f"no price asked for {pair_of(asset)}")
        if isinstance(got, str):
            unvalued.append(Unvalued(asset, qty, got))
        else:
            rows.append((asset, qty, got.price))
    total = cash + sum(q * p for _, q, p in rows)
    positions = [
        PositionView(
            asset=a,
            symbol=pair_of(a),
            quantity=q,
            current_price=p,
            market_value=q * p,
            weight=(q * p / total) if total > 0 else 0.0,
            avg_price=(avg or {}).get(pair_of(a)),
        )
        for a, q, p in rows
    ]
    by_asset = {a: float(holdings.total(a)) for a in CASH_ASSETS if holdings.total(a) != 0}
    return PortfolioView(positions, cash, by_asset, total, unvalued)


class Venue(Protocol):
    """Where pairs are listed and priced: a broker, or a cluster front's public market data
    (brokers/public_venue.py)."""

    @property
    def name(self) -> str: ...

    async def rules(self, symbol: str) -> SymbolRules | None: ...

    async def last_price(self, symbol: str) -> Decimal | None: ...


class LivePrices(Protocol):
    """The engine's live trades (:class:`engine.live.LiveEngine`); it may also offer
    ``exchange_time_ms(symbol)``, the exchange time of that trade, which :class:`Pricer` cites."""

    def last_price(self, symbol: str) -> float | None: ...


class Pricer:
    """Current prices of pairs: the engine's live trade, else the quote source, else the venue's ticker."""

    def __init__(self, venue: Venue, engine: LivePrices | None, quotes: QuoteSource | None) -> None:
        self.venue = venue
        self.engine = engine
        self.quotes = quotes
        """A :class:`~engine.market_data.quotes.QuoteSource`, or None (then the venue's ticker)."""

    async def prices(self, symbols: list[str]) -> dict[str, Priced | str]:
        """Each pair's :class:`Priced`, or the reason it has none (not listed, no price)."""
        out: dict[str, Priced | str] = {}
        rest: list[str] = []
        for s in dict.fromkeys(symbols):
            try:
                rules = await self.venue.rules(s)
            except BrokerError as exc:
                out[s] = f"{s}: the venue's symbol list cannot be read ({exc})"
                continue
            if rules is None or rules.status != "TRADING":
                out[s] = f"{s} is not a trading pair on {self.venue.name}"
                continue
            live = self.engine.last_price(s) if self.engine is not None else None
            if live is not None and live > 0:
                at_ms = getattr(self.engine, "exchange_time_ms", lambda _s: None)(s)
                out[s] = Priced(float(live), (f"engine:{s}@{iso(at_ms / 1000 if at_ms else time.time())}",))
            else:
                rest.append(s)
        if rest and self.quotes is not None:
            try:
                for q in await self.quotes.quotes(rest):
                    if q.price > 0:
                        out[q.symbol] = Priced(q.price, tuple(q.refs))
            except MarketDataError as exc:
                log.info("portfolio_quotes_failed", symbols=rest, error=str(exc))
        for s in rest:
            if s not in out:
                out[s] = await self._ticker(s)
        return out

    async def _ticker(self, symbol: str) -> Priced | str:
        try:
            price = await self.venue.last_price(symbol)
        except BrokerError as exc:
            return f"no price for {symbol}: {exc}"
        if price is None or not price.is_finite() or price <= 0:
            return f"no price for {symbol}"
        return Priced(float(price), (f"{self.venue.name}:ticker {symbol}@{iso(time.time())}",))


async def load(orders: OrderService, pricer: Pricer) -> tuple[Holdings, dict[str, Priced | str]]:
    """The account's holdings (the broker's balances) and the prices of its non-cash assets."""
    holdings = Holdings.of(await orders.broker.balances())
    prices = await pricer.prices([pair_of(a) for a in holdings.non_cash()])
    return holdings, prices
