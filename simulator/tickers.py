"""A market's ticker statistics over a window, and their Binance shapes (REST and streams).

One computation, :func:`window_stats`, serves ``GET /api/v3/ticker/24hr`` and the rolling-window
``GET /api/v3/ticker`` of any ``windowSize`` (rest.py), the 24 h ``<symbol>@ticker`` /
``@miniTicker`` streams and the rolling-window ``<symbol>@ticker_<1h|4h|1d>`` streams, so what a
client reads over REST and over a stream always agrees.  High, low and volume come from the
window's klines (market.py), the open from the price path at the window's start, trade ids from
the tape (tape.py), bid/ask from the book.  The 24 h window uses the last 24 hourly klines (as
the REST 24 h ticker always has); a rolling window opens on a whole minute, as
web-socket-streams.md documents (so it may be up to 59 999 ms wider than its size), and uses
1-minute klines (open of the first minute, quote volumes summed, weighted average = quote
volume / volume).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from simulator.market import open_time_of

if TYPE_CHECKING:
    from simulator.exchange import SimExchange

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A market's statistics between ``open_time`` and ``close_time`` (now)."""

    symbol: str
    open_time: int
    close_time: int
    open: float
    high: float
    low: float
    last: float
    volume: float
    quote_volume: float
    weighted_avg: float
    last_qty: Decimal
    first_id: int
    last_id: int

    def common(self) -> dict[str, Any]:
        """The fields every ticker shape shares, as strings where Binance sends strings."""
        return {
            "priceChange": f"{self.last - self.open:.8f}",
            "priceChangePercent": f"{(self.last - self.open) / self.open * 100:.3f}",
            "weightedAvgPrice": f"{self.weighted_avg:.8f}",
            "openPrice": f"{self.open:.8f}",
            "highPrice": f"{self.high:.8f}",
            "lowPrice": f"{self.low:.8f}",
            "lastPrice": f"{self.last:.8f}",
            "volume": f"{self.volume:.8f}",
            "quoteVolume": f"{self.quote_volume:.8f}",
            "openTime": self.open_time,
            "closeTime": self.close_time,
            "firstId": self.first_id,
            "lastId": self.last_id,
            "count": self.last_id - self.first_id + 1,
        }


def window_stats(ex: SimExchange, symbol: str, window_ms: int | None = None) -> WindowStats:
    """The 24 h statistics (``window_ms`` None) or a rolling window's of any ``window_ms``, opening on the minute."""
    now = ex.now_ms()
    market = ex.markets[symbol]
    last = market.last_price(now)
    if window_ms is None:
        open_time = now - DAY_MS
        klines = market.kline_window("1h", now, start=None, end=None, limit=24)
        first = market.path.price_at(open_time)
        volume = sum(k.volume for k in klines)
        quote_volume, weighted_avg = volume * last, (max(k.high for k in klines) + min(k.low for k in klines)) / 2
    else:
        # GET /api/v3/ticker and the @ticker_<window> streams: open of the first minute, quote volume summed
        open_time = open_time_of("1m", now - window_ms)
        klines = market.kline_window("1m", now, start=open_time, end=None, limit=(now - open_time) // 60_000 + 1)
        first = klines[0].open
        volume = sum(k.volume for k in klines)
        quote_volume = sum(k.quote_volume for k in klines)
        weighted_avg = quote_volume / volume if volume else last
    tape = ex.tapes[symbol]
    first_trade, last_trade = tape.between(open_time, now, 1)[0], tape.last_trade(now)
    return WindowStats(
        symbol=symbol,
        open_time=open_time,
        close_time=now,
        open=first,
        high=max(k.high for k in klines),
        low=min(k.low for k in klines),
        last=last,
        volume=volume,
        quote_volume=quote_volume,
        weighted_avg=weighted_avg,
        last_qty=last_trade.qty,
        first_id=first_trade.id,
        last_id=last_trade.id,
    )


def rest_ticker_24h(ex: SimExchange, symbol: str) -> dict[str, Any]:
    """Binance's ``GET /api/v3/ticker/24hr`` row (FULL)."""
    stats = window_stats(ex, symbol)
    c = stats.common()
    top = ex.book(symbol, 1)
    (bid, bid_qty), (ask, ask_qty) = top.best_bid, top.best_ask
    return {
        "symbol": symbol,
        "priceChange": c["priceChange"],
        "priceChangePercent": c["priceChangePercent"],
        "weightedAvgPrice": c["weightedAvgPrice"],
        "prevClosePrice": c["openPrice"],
        "lastPrice": c["lastPrice"],
        "lastQty": f"{stats.last_qty:.8f}",
        "bidPrice": f"{bid:.8f}",
        "bidQty": f"{bid_qty:.8f}",
        "askPrice": f"{ask:.8f}",
        "askQty": f"{ask_qty:.8f}",
        **{k: c[k] for k in ("openPrice", "highPrice", "lowPrice", "volume", "quoteVolume")},
        **{k: c[k] for k in ("openTime", "closeTime", "firstId", "lastId", "count")},
    }


def ticker_event(ex: SimExchange, stats: WindowStats, event_ms: int) -> dict[str, Any]:
    """Binance's ``<symbol>@ticker`` payload (``24hrTicker``)."""
    c = stats.common()
    top = ex.book(stats.symbol, 1)
    (bid, bid_qty), (ask, ask_qty) = top.best_bid, top.best_ask
    return {
        "e": "24hrTicker",
        "E": event_ms,
        "s": stats.symbol,
        "p": c["priceChange"],
        "P": c["priceChangePercent"],
        "w": c["weightedAvgPrice"],
        "x": c["openPrice"],
        "c": c["lastPrice"],
        "Q": f"{stats.last_qty:.8f}",
        "b": f"{bid:.8f}",
        "B": f"{bid_qty:.8f}",
        "a": f"{ask:.8f}",
        "A": f"{ask_qty:.8f}",
        "o": c["openPrice"],
        "h": c["highPrice"],
        "l": c["lowPrice"],
        "v": c["volume"],
        "q": c["quoteVolume"],
        "O": c["openTime"],
        "C": c["closeTime"],
        "F": c["firstId"],
        "L": c["lastId"],
        "n": c["count"],
    }


def mini_ticker_event(stats: WindowStats, event_ms: int) -> dict[str, Any]:
    """Binance's ``<symbol>@miniTicker`` payload (``24hrMiniTicker``)."""
    c = stats.common()
    return {
        "e": "24hrMiniTicker",
        "E": event_ms,
        "s": stats.symbol,
        "c": c["lastPrice"],
        "o": c["openPrice"],
        "h": c["highPrice"],
        "l": c["lowPrice"],
        "v": c["volume"],
        "q": c["quoteVolume"],
    }


def window_ticker_event(stats: WindowStats, window: str, event_ms: int) -> dict[str, Any]:
    """Binance's ``<symbol>@ticker_<window>`` payload (``1hTicker``, ``4hTicker``, ``1dTicker``)."""
    c = stats.common()
    return {
        "e": f"{window}Ticker",
        "E": event_ms,
        "s": stats.symbol,
        "p": c["priceChange"],
        "P": c["priceChangePercent"],
        "o": c["openPrice"],
        "h": c["highPrice"],
        "l": c["lowPrice"],
        "c": c["lastPrice"],
        "w": c["weightedAvgPrice"],
        "v": c["volume"],
        "q": c["quoteVolume"],
        "O": c["openTime"],
        "C": c["closeTime"],
        "F": c["firstId"],
        "L": c["lastId"],
        "n": c["count"],
    }
