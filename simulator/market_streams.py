"""What the public market streams other than klines push: trades, depth, book and price tickers.

One *feed* per subscribed stream name computes that stream's payloads once per push and
the exchange fans them out to every connection subscribed to the name (klines stay in
exchange.py).  A feed is created when a connection first subscribes to its name (its
baseline is taken then: a trade stream starts after the newest trade, a diff-depth stream
from the book as it is) and dropped when the last subscriber leaves.

When pushes happen (``push``): with the manual clock, whenever the clock advances or a
trade is posted (every feed of the market at once, whatever its update speed); with the
real clock, also on the periodic timer, each feed at its documented speed (real-time feeds
on every 100 ms tick).  Nothing is pushed for a stream whose content did not change.

The diff-depth streams follow web-socket-streams.md's contract with ``GET /api/v3/depth``:
both come from ``SimExchange.book``, whose ``last_update_id`` never decreases and grows
whenever the book's content changes.  Each market's book is *sampled* on every push and
periodic tick (also with the manual clock, which catches book changes made by orders), and
the levels that changed since the previous sample (quantity 0 for a level that left) are
added to every diff feed's pending set; a feed emits its pending levels when due, with
``U`` = its previous event's ``u`` + 1 and ``u`` = the book's id now.  A client that
buffers the stream, fetches the snapshot (``lastUpdateId`` L), drops events with u ≤ L and
applies the rest therefore ends with exactly the book REST answers, whatever sampled state
its snapshot saw.  (A state no sample saw cannot be rebuilt: every path that changes the
book must end in ``SimExchange.push_updates``, as trades and clock moves do.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from simulator.book import Book
from simulator.streams import REAL_TIME, WINDOWS_MS, StreamSpec, parse_spec
from simulator.tickers import (
    WindowStats,
    mini_ticker_event,
    ticker_event,
    window_stats,
    window_ticker_event,
)

if TYPE_CHECKING:
    from simulator.exchange import SimExchange

DEPTH_LIMIT = 5_000
"""Levels a side sampled for the diff streams: Binance's largest ``GET /api/v3/depth`` limit."""
TRADE_BATCH = 1_000
AVG_PRICE_MINS = 5
_UNSTABLE = frozenset({"E", "O", "C"})
"""Ticker fields that move with the clock alone: a ticker whose other fields are unchanged is not pushed."""

LevelKey = tuple[str, Decimal]  # ("b" | "a", price)


class _Moment:
    """What a push reads, computed at most once per push: the time, books and ticker statistics."""

    def __init__(self, ex: SimExchange) -> None:
        self.ex = ex
        self.now = ex.now_ms()
        self._books: dict[str, Book] = {}
        self._stats: dict[tuple[str, int | None], WindowStats] = {}

    def book(self, symbol: str) -> Book:
        if symbol not in self._books:
            self._books[symbol] = self.ex.book(symbol, DEPTH_LIMIT)
        return self._books[symbol]

    def stats(self, symbol: str, window: int | None) -> WindowStats:
        if (symbol, window) not in self._stats:
            self._stats[(symbol, window)] = window_stats(self.ex, symbol, window)
        return self._stats[(symbol, window)]


class Feed(Protocol):
    """One stream name's payloads: ``collect`` returns what is new since its last call."""

    spec: StreamSpec

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]: ...


def _levels(book: Book) -> dict[LevelKey, Decimal]:
    return {**{("b", p): q for p, q in book.bids}, **{("a", p): q for p, q in book.asks}}


def _rows(levels: list[tuple[Decimal, Decimal]]) -> list[list[str]]:
    return [[f"{p:.8f}", f"{q:.8f}"] for p, q in levels]


@dataclass
class _TradeFeed:
    """``<symbol>@trade`` / ``@aggTrade``: every tape trade after the cursor, once, in id order."""

    spec: StreamSpec
    cursor: int

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        sym = self.spec.symbol or ""
        tape = at.ex.tapes[sym]
        out: list[Any] = []
        while True:
            batch = tape.from_id(self.cursor + 1, at.now, TRADE_BATCH)
            for t in batch:
                if self.spec.kind == "trade":
                    row = {"t": t.id, "p": f"{t.price:.8f}", "q": f"{t.qty:.8f}", "T": t.time}
                    out.append({"e": "trade", "E": at.now, "s": sym, **row, "m": t.buyer_maker, "M": True})
                else:
                    out.append({"e": "aggTrade", "E": at.now, "s": sym, **t.agg_row()})
            if batch:
                self.cursor = batch[-1].id
            if len(batch) < TRADE_BATCH:
                return out


@dataclass
class _SilentFeed:
    """``<symbol>@blockTrade``: the simulator has no block trades, so the stream never speaks."""

    spec: StreamSpec

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        return []


@dataclass
class _DiffDepthFeed:
    """``<symbol>@depth`` / ``@depth@100ms``: the levels changed since its last event."""

    spec: StreamSpec
    emitted_u: int
    """``u`` of the last event sent (the baseline's id before the first)."""
    pending: dict[LevelKey, Decimal] = field(default_factory=dict)
    book_id: int = 0

    def changed(self, levels: dict[LevelKey, Decimal], book_id: int) -> None:
        self.pending.update(levels)
        self.book_id = book_id

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        if not self.pending:
            return []
        bids = sorted(((p, q) for (side, p), q in self.pending.items() if side == "b"), reverse=True)
        asks = sorted((p, q) for (side, p), q in self.pending.items() if side == "a")
        event = {
            "e": "depthUpdate",
            "E": at.now,
            "s": self.spec.symbol,
            "U": self.emitted_u + 1,
            "u": self.book_id,
            "b": _rows(bids),
            "a": _rows(asks),
        }
        self.emitted_u = self.book_id
        self.pending = {}
        return [event]


@dataclass
class _DepthSampler:
    """A market's book as last sampled, feeding its diff-depth feeds the levels that changed."""

    levels: dict[LevelKey, Decimal]
    book_id: int
    feeds: list[_DiffDepthFeed] = field(default_factory=list)

    def sample(self, book: Book) -> None:
        levels = _levels(book)
        if levels != self.levels:
            changed = {k: levels.get(k, Decimal(0)) for k in levels.keys() | self.levels.keys()}
            changed = {k: q for k, q in changed.items() if q != self.levels.get(k, Decimal(0))}
            for feed in self.feeds:
                feed.changed(changed, book.last_update_id)
        self.levels, self.book_id = levels, book.last_update_id


@dataclass
class _PartialDepthFeed:
    """``<symbol>@depth<5|10|20>`` (and ``@100ms``): the top levels whenever the book's id moved."""

    spec: StreamSpec
    last_id: int | None = None

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        book = at.book(self.spec.symbol or "")
        if book.last_update_id == self.last_id:
            return []
        self.last_id = book.last_update_id
        n = int(self.spec.arg)
        return [{"lastUpdateId": book.last_update_id, "bids": _rows(book.bids[:n]), "asks": _rows(book.asks[:n])}]


@dataclass
class _BookTickerFeed:
    """``<symbol>@bookTicker``: the best bid and ask, whenever either's price or quantity changes."""

    spec: StreamSpec
    last: tuple[Any, ...] | None = None

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        book = at.book(self.spec.symbol or "")
        top = (*book.best_bid, *book.best_ask)
        if top == self.last:
            return []
        self.last = top
        (bid, bid_qty), (ask, ask_qty) = book.best_bid, book.best_ask
        return [
            {
                "u": book.last_update_id,
                "s": book.symbol,
                "b": f"{bid:.8f}",
                "B": f"{bid_qty:.8f}",
                "a": f"{ask:.8f}",
                "A": f"{ask_qty:.8f}",
            }
        ]


@dataclass
class _TickerFeed:
    """``@ticker``, ``@miniTicker``, ``@ticker_<w>`` and the ``!…@arr`` streams: changed tickers only."""

    spec: StreamSpec
    last: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _payload(self, at: _Moment, sym: str) -> dict[str, Any]:
        kind = self.spec.kind
        stats = at.stats(sym, WINDOWS_MS[self.spec.arg] if kind == "windowTicker" else None)
        if kind == "ticker":
            return ticker_event(at.ex, stats, at.now)
        if kind == "miniTicker":
            return mini_ticker_event(stats, at.now)
        return window_ticker_event(stats, self.spec.arg, at.now)

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        if self.spec.symbol is not None:
            symbols = [self.spec.symbol]
        else:
            symbols = sorted(at.ex.markets) if symbol is None else [symbol]
        changed = []
        for sym in symbols:
            payload = self._payload(at, sym)
            stable = {k: v for k, v in payload.items() if k not in _UNSTABLE}
            if stable != self.last.get(sym):
                self.last[sym] = stable
                changed.append(payload)
        if self.spec.symbol is not None or not changed:
            return changed
        return [changed]  # one array event for the all-market streams


@dataclass
class _AvgPriceFeed:
    """``<symbol>@avgPrice``: the 5-minute average price (as ``GET /api/v3/avgPrice``) when it changed."""

    spec: StreamSpec
    last: tuple[Decimal, int] | None = None

    def collect(self, at: _Moment, symbol: str | None) -> list[Any]:
        sym = self.spec.symbol or ""
        price, last_trade = at.ex.tapes[sym].average(at.now, AVG_PRICE_MINS)
        if (price, last_trade) == self.last:
            return []
        self.last = (price, last_trade)
        return [
            {"e": "avgPrice", "E": at.now, "s": sym, "i": f"{AVG_PRICE_MINS}m", "w": f"{price:.8f}", "T": last_trade}
        ]


class MarketStreams:
    """The feeds of every subscribed non-kline market stream of one exchange."""

    def __init__(self, ex: SimExchange) -> None:
        self._ex = ex
        self._feeds: dict[str, Feed] = {}
        self._samplers: dict[str, _DepthSampler] = {}

    def subscribe(self, name: str) -> None:
        """Start the feed of ``name`` (already validated) unless one runs: its baseline is now."""
        spec = parse_spec(name)
        if spec is None or spec.kind == "kline" or name in self._feeds:
            return
        at = _Moment(self._ex)
        sym = spec.symbol or ""
        feed: Feed
        if spec.kind in ("trade", "aggTrade"):
            feed = _TradeFeed(spec, self._ex.tapes[sym].last_trade(at.now).id)
        elif spec.kind == "depth":
            sampler = self._sampler(sym, at)
            sampler.sample(at.book(sym))  # pending levels of the other feeds are theirs, not this one's
            diff = _DiffDepthFeed(spec, sampler.book_id, book_id=sampler.book_id)
            sampler.feeds.append(diff)
            feed = diff
        elif spec.kind == "partialDepth":
            feed = _PartialDepthFeed(spec)
        elif spec.kind == "bookTicker":
            feed = _BookTickerFeed(spec)
        elif spec.kind == "avgPrice":
            feed = _AvgPriceFeed(spec)
        elif spec.kind == "blockTrade":
            feed = _SilentFeed(spec)
        else:
            feed = _TickerFeed(spec)
        self._feeds[name] = feed

    def _sampler(self, symbol: str, at: _Moment) -> _DepthSampler:
        if symbol not in self._samplers:
            book = at.book(symbol)
            self._samplers[symbol] = _DepthSampler(_levels(book), book.last_update_id)
        return self._samplers[symbol]

    def release(self) -> None:
        """Drop the feeds no connection subscribes to any more."""
        held = self._ex.hub.by_stream()
        for name in [n for n in self._feeds if n not in held]:
            feed = self._feeds.pop(name)
            if isinstance(feed, _DiffDepthFeed):
                sym = feed.spec.symbol or ""
                sampler = self._samplers[sym]
                sampler.feeds.remove(feed)
                if not sampler.feeds:
                    del self._samplers[sym]

    def push(self, symbol: str | None = None, *, elapsed_ms: int | None = None) -> int:
        """Push what is due; returns the number of frames queued.

        ``elapsed_ms`` None: something happened now (a trade in ``symbol``, or the clock
        moved): every feed of the market(s) is due.  Otherwise the periodic timer's time since
        the simulator started: with the real clock, each feed whose period divides it is due;
        with the manual clock nothing is pushed (the books are only sampled).
        """
        if not self._feeds:
            return 0
        subscribers = self._ex.hub.by_stream()
        if any(name not in subscribers for name in self._feeds):
            self.release()
        at = _Moment(self._ex)
        for sym, sampler in self._samplers.items():
            if symbol is None or sym == symbol:
                sampler.sample(at.book(sym))
        if elapsed_ms is not None and self._ex.clock.mode == "manual":
            return 0
        frames = 0
        for name, feed in self._feeds.items():
            spec = feed.spec
            if symbol is not None and spec.symbol not in (symbol, None):
                continue
            if elapsed_ms is not None and spec.period_ms != REAL_TIME and elapsed_ms % spec.period_ms:
                continue
            for payload in feed.collect(at, symbol):
                for conn in subscribers.get(name, ()):
                    conn.push(name, payload)
                    frames += 1
        return frames
