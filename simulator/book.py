"""The simulated order book of a market: price levels each side around the last price, that takers consume.

The book is derived from the last price (on the tick grid), the symbol's tick and lot step
and the seed (:func:`build_book`): the spread is 1-3 ticks with ``best bid < last ≤ best ask``;
deeper levels sit 1-3 ticks apart with quantities on the LOT_SIZE step that grow with depth.
The same (seed, symbol, second, last price) always gives the same derived book.

:class:`OrderBooks` gives that book a state, cheaply: per market, the derived book of its
current key plus an overlay of the quantity takers consumed from it.  A taker's fill
(:meth:`OrderBooks.take`) removes its quantity from the level it traded at and prints the
trade on the market, re-anchoring the price path at that level as a posted trade does, so
what left the book is exactly what filled.  The overlay lives as long as the key does: the
clock's second, and the last price *as our own takes left it* (a walk that moves the last price
keeps its partly eaten book); a new second or a price move by anything else (a posted trade,
the path as the clock runs) derives a fresh book, as if makers had refilled it.
``last_update_id`` is ``now_ms + trades on the tape + takes``: it never decreases and grows
whenever the content changes, as Binance's ``lastUpdateId`` does.

A side never reads empty: the derived book has no fixed depth.  Its levels are derived in order
(each one's price a seeded 1-3 ticks beyond the previous one's, its quantity seeded and growing
with depth) as deep as a reader goes, so when takers consume the best levels the next ones come
into view and ``GET /api/v3/depth`` keeps showing ``BOOK_LEVELS`` levels a side.  (Only a bid
side walked down to price 0 could run out; its best level would then read ``(0, 0)``.)  The
maximum depth is a level count: one taker's walk reaches at most ``MAX_WALK_LEVELS`` (1,000)
levels of the side it takes from; a MARKET order whose quantity the first 1,000 levels do not
fill expires its rest (``INSUFFICIENT_LIQUIDITY``), as one that meets an empty book does on
Binance.  With the derived quantities and MARKET_LOT_SIZE that limit is far out of reach of
one order; tests narrow it through ``OrderBooks.max_walk_levels``.
Prices and quantities are Decimals so the order matching code can use them exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import islice

from simulator.exchange_info import step_size_for, tick_size_for
from simulator.market import Market
from simulator.prices import _stable_hash, start_price

BOOK_LEVELS = 20
"""Levels each side ``GET /api/v3/depth`` shows (Binance's ``limit`` can ask for more; the simulator shows these)."""
MAX_WALK_LEVELS = 1_000
"""The deepest one taker's walk reaches: its 1,000th level; a MARKET order's rest beyond it expires."""
_CHUNK = 64
"""Levels derived at a time when a reader goes deeper than the book derived so far."""

Level = tuple[Decimal, Decimal]
EMPTY_LEVEL: Level = (Decimal(0), Decimal(0))


@dataclass(frozen=True, slots=True)
class Book:
    """A depth snapshot: bids best (highest) first, asks best (lowest) first."""

    symbol: str
    last_update_id: int
    bids: list[Level]
    asks: list[Level]

    @property
    def best_bid(self) -> Level:
        """The best bid, or ``(0, 0)`` when takers emptied the side."""
        return self.bids[0] if self.bids else EMPTY_LEVEL

    @property
    def best_ask(self) -> Level:
        """The best ask, or ``(0, 0)`` when takers emptied the side."""
        return self.asks[0] if self.asks else EMPTY_LEVEL

    def rest_view(self, limit: int) -> dict[str, object]:
        """Binance's ``GET /api/v3/depth`` answer."""
        return {
            "lastUpdateId": self.last_update_id,
            "bids": [[f"{p:.8f}", f"{q:.8f}"] for p, q in self.bids[:limit]],
            "asks": [[f"{p:.8f}", f"{q:.8f}"] for p, q in self.asks[:limit]],
        }


def _dec(x: float) -> Decimal:
    return Decimal(f"{x:.8f}").normalize()


def _unit(key: int, *parts: object) -> float:
    """A deterministic number in [0, 1) for ``parts``."""
    return (_stable_hash(f"{key}:" + ":".join(map(str, parts))) % 1_000_003) / 1_000_003


def _tick(market: Market) -> Decimal:
    return _dec(tick_size_for(start_price(market.symbol)))


def last_price(market: Market, now_ms: int) -> Decimal:
    """The market's last price now, a Decimal on its tick grid."""
    return Decimal(f"{market.last_price(now_ms):.8f}").quantize(_tick(market))


@dataclass(frozen=True, slots=True)
class _Derivation:
    """How one book is derived: the seed's key, the second and the last price it is anchored at."""

    key: int
    second: int
    last: Decimal
    tick: Decimal
    step: Decimal
    top_qty: float
    best_bid: Decimal
    best_ask: Decimal

    @classmethod
    def of(cls, market: Market, now_ms: int) -> _Derivation:
        p0 = start_price(market.symbol)
        tick, step = _dec(tick_size_for(p0)), _dec(step_size_for(p0))
        last = last_price(market, now_ms)
        key = _stable_hash(f"{market.path.seed}:{market.symbol}:book")
        second = now_ms // 1000
        spread = 1 + int(_unit(key, "spread", second, last) * 3)  # 1-3 ticks
        best_ask = last + tick * (spread // 2)
        # about a tenth of a minute's volume at the top, growing with depth
        return cls(key, second, last, tick, step, market.base_volume / 10.0, best_ask - tick * spread, best_ask)

    def extend(self, name: str, rows: list[Level], count: int) -> None:
        """Append the next ``count`` levels of side ``name`` to ``rows`` (fewer where a bid would reach 0)."""
        direction = -1 if name == "bid" else 1
        first = len(rows)
        if rows:
            gap = 1 + int(_unit(self.key, name, "gap", self.second, first - 1) * 3)
            price = rows[-1][0] + direction * self.tick * gap
        else:
            price = self.best_bid if name == "bid" else self.best_ask
        for i in range(first, first + count):
            if price <= 0:
                return
            u = _unit(self.key, name, self.second, self.last, i)
            lots = max(1, round(self.top_qty * (0.2 + 1.6 * u) * (1 + i / 4) / float(self.step)))
            rows.append((price, self.step * lots))
            price += direction * self.tick * (1 + int(_unit(self.key, name, "gap", self.second, i) * 3))


def build_book(market: Market, now_ms: int, levels: int = BOOK_LEVELS) -> Book:
    """The derived (untouched) book of ``market`` at ``now_ms`` with ``levels`` price levels each side."""
    derivation = _Derivation.of(market, now_ms)
    bids: list[Level] = []
    asks: list[Level] = []
    derivation.extend("bid", bids, levels)
    derivation.extend("ask", asks, levels)
    return Book(market.symbol, now_ms + len(market.path.trades_t), bids, asks)


@dataclass(slots=True)
class _Live:
    """One market's book state: the book derived at ``(second, last)``, as deep as read, and what takers took."""

    second: int
    last: Decimal
    since_ms: int
    """When this book was derived: the resting orders placed before it are ahead of its levels at their price."""
    derivation: _Derivation
    rows: dict[str, list[Level]] = field(default_factory=lambda: {"bid": [], "ask": []})
    """The levels derived so far, per side (deeper ones are derived on demand)."""
    taken: dict[tuple[str, Decimal], Decimal] = field(default_factory=dict)
    """Quantity consumed per (``"bid"``/``"ask"``, price)."""

    def levels(self, name: str) -> Iterator[Level]:
        """The side's non-empty levels, best first, derived deeper as the reader goes on."""
        rows = self.rows[name]
        i = 0
        while True:
            if i == len(rows):
                self.derivation.extend(name, rows, _CHUNK)
                if i == len(rows):  # a bid side that reached price 0
                    return
            price, qty = rows[i]
            left = qty - self.taken.get((name, price), Decimal(0))
            if left > 0:
                yield price, left
            i += 1

    def side(self, name: str, levels: int) -> list[Level]:
        return list(islice(self.levels(name), levels))


class OrderBooks:
    """The books of every market, with the liquidity takers consumed (see the module docstring)."""

    def __init__(self, markets: Mapping[str, Market], *, max_walk_levels: int = MAX_WALK_LEVELS) -> None:
        self._markets = markets
        self._live: dict[str, _Live] = {}
        self._takes: Counter[str] = Counter()
        self.max_walk_levels = max_walk_levels
        """How many levels one taker's walk may reach (``MAX_WALK_LEVELS`` unless a test narrows it)."""

    def _state(self, symbol: str, now_ms: int) -> _Live:
        market = self._markets[symbol]
        second, last = now_ms // 1000, last_price(market, now_ms)
        live = self._live.get(symbol)
        if live is None or live.second != second or live.last != last:
            live = _Live(second, last, now_ms, _Derivation.of(market, now_ms))
            self._live[symbol] = live
        return live

    def book(self, symbol: str, now_ms: int, levels: int = BOOK_LEVELS) -> Book:
        """The book of ``symbol`` now, ``levels`` non-empty levels a side (deeper ones derived on demand)."""
        live = self._state(symbol, now_ms)
        levels = max(1, levels)
        update_id = now_ms + len(self._markets[symbol].path.trades_t) + self._takes[symbol]
        return Book(symbol, update_id, live.side("bid", levels), live.side("ask", levels))

    def since_ms(self, symbol: str, now_ms: int) -> int:
        """When the book of ``symbol`` now was derived (its levels' place in time priority)."""
        return self._state(symbol, now_ms).since_ms

    def opposite(self, symbol: str, taker_side: str, now_ms: int) -> Iterator[Level]:
        """The levels a ``taker_side`` order takes from (asks for a BUY, bids for a SELL), best first.

        At most ``max_walk_levels`` of them; read lazily, so a walk may take from the level it
        was just given before asking for the next one.
        """
        live = self._state(symbol, now_ms)
        return islice(live.levels("ask" if taker_side == "BUY" else "bid"), self.max_walk_levels)

    def take(self, symbol: str, taker_side: str, price: Decimal, qty: Decimal, now_ms: int) -> None:
        """A taker fill of ``qty`` at the level ``price``: the level shrinks and the trade prints there.

        The trade re-anchors the market's price path at ``price`` (the last price is now the level
        traded) and the book keeps its state through that move.
        """
        live = self._state(symbol, now_ms)
        name = "ask" if taker_side == "BUY" else "bid"
        available = Decimal(0)
        for level_price, left in live.levels(name):
            if level_price == price:
                available = left
            if beyond_level(name, level_price, price):
                break
        if qty <= 0 or qty > available:
            raise ValueError(f"cannot take {qty} at {price}: the level holds {available}")
        live.taken[(name, price)] = live.taken.get((name, price), Decimal(0)) + qty
        self._takes[symbol] += 1
        market = self._markets[symbol]
        t_ms = max(now_ms, market.path.trades_t[-1]) if market.path.trades_t else now_ms
        market.path.add_trade(t_ms, float(price), float(qty), buyer_maker=taker_side == "SELL")
        live.last = last_price(market, now_ms)


def beyond_level(name: str, level_price: Decimal, price: Decimal) -> bool:
    """Whether a ``name`` side's level at ``level_price`` is already past ``price`` (deeper than it)."""
    return level_price <= price if name == "bid" else level_price >= price
