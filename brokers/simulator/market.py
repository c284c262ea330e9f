"""One simulated market: its price path and its klines for every Binance interval.

A kline is sampled from the price path at every 15 s lattice point (intervals up to 1h: its
high and low then bound every trade of the tape) or at 17 evenly spaced moments (longer
intervals), plus every posted trade inside it; closed klines are cached (they can no longer
change: trades are always "now").
The open kline is sampled up to the current time.  Rows come out exactly as Binance's REST
sends them (12 elements, strings for prices and volumes).  Prices come from the path already
on the symbol's tick grid, so every OHLC value is a multiple of tickSize.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from brokers.simulator.prices import PricePath, _stable_hash

INTERVAL_MS: dict[str, int] = {
    "1s": 1_000,
    "1m": 60_000,
    "3m": 180_000,
    "5m": 300_000,
    "15m": 900_000,
    "30m": 1_800_000,
    "1h": 3_600_000,
    "2h": 7_200_000,
    "4h": 14_400_000,
    "6h": 21_600_000,
    "8h": 28_800_000,
    "12h": 43_200_000,
    "1d": 86_400_000,
    "3d": 259_200_000,
    "1w": 604_800_000,
    "1M": 2_592_000_000,  # 30-day months keep the grid regular (Binance uses calendar months)
}
_WEEK_OFFSET_MS = 4 * 86_400_000  # Binance weeks open on Monday; the epoch was a Thursday
_SAMPLES = 17
_LATTICE_MS = 15_000  # the finest lattice of prices.py: the path is monotone between its points
_EXACT_MAX_STEP = 3_600_000  # klines up to 1h are sampled at every lattice point (exact high/low)


def open_time_of(interval: str, t_ms: int) -> int:
    """Open time of the ``interval`` kline containing ``t_ms``."""
    step = INTERVAL_MS[interval]
    offset = _WEEK_OFFSET_MS if interval == "1w" else 0
    return (t_ms - offset) // step * step + offset


@dataclass(frozen=True, slots=True)
class Kline:
    """One kline; ``closed`` is False for the one still forming."""

    open_time: int
    close_time: int
    open: float
    high: float
    low: float
    close: float
    volume: float
    trades: int
    closed: bool

    @property
    def quote_volume(self) -> float:
        return self.volume * (self.open + self.close) / 2.0


def fmt_price(x: float) -> str:
    return f"{x:.8f}"


class Market:
    """A symbol's klines, derived from its deterministic price path and posted trades."""

    def __init__(self, symbol: str, seed: int, origin_ms: int) -> None:
        self.symbol = symbol
        self.path = PricePath(symbol, seed, origin_ms)
        self._base_volume = 5.0 + (_stable_hash(f"vol:{seed}:{symbol}") % 1000) / 10.0
        self._vol_key = _stable_hash(f"{seed}:{symbol}:volume")
        self._closed: dict[str, dict[int, Kline]] = {}
        self._open: dict[str, tuple[tuple[int, int], Kline]] = {}
        """The open kline of each interval, with the (clock, tape length) it was priced at."""

    @property
    def base_volume(self) -> float:
        """Typical base-asset volume per minute (klines, the trade tape and the book scale with it)."""
        return self._base_volume

    def last_price(self, now_ms: int) -> float:
        return self.path.price_at(now_ms)

    def trade(self, now_ms: int, price: float, qty: float) -> float:
        """A trade that moves the market (control API); returns its price snapped to the tick."""
        return self.path.add_trade(now_ms, price, qty)

    def record_fill(self, t_ms: int, price: float, qty: float, *, buyer_maker: bool) -> None:
        """An order fill: a public trade that does not re-anchor the path (never before the last trade)."""
        t_ms = max(t_ms, self.path.trades_t[-1]) if self.path.trades_t else t_ms
        self.path.add_trade(t_ms, price, qty, buyer_maker=buyer_maker, anchor=False)

    def _volume(self, interval: str, open_times: np.ndarray) -> np.ndarray:
        step_minutes = INTERVAL_MS[interval] / 60_000
        h = (open_times.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(self._vol_key)
        h ^= h >> np.uint64(29)
        u = (h % np.uint64(1_000_003)).astype(np.float64) / 1_000_003
        return self._base_volume * step_minutes * (0.5 + u)

    def _samples(self, starts: np.ndarray, step: int, now_ms: int) -> np.ndarray:
        """Path prices inside each kline (rows), the first being its open and the last its close.

        Up to an hour: the open, every 15 s lattice point (where the path's pieces join, so its
        extremes) priced before trades posted at that instant as the tape's trades are (the
        trades themselves count through ``trades_between``), then the close.
        """
        if step > _EXACT_MAX_STEP:
            frac = np.linspace(0.0, 1.0, _SAMPLES)
            grid = np.minimum(starts[:, None] + (frac[None, :] * (step - 1)).astype(np.int64), now_ms)
            return self.path.price(grid.ravel()).reshape(grid.shape)
        lattice = np.minimum(starts[:, None] + np.arange(0, step, _LATTICE_MS)[None, :], now_ms)
        inside = self.path.price(lattice.ravel(), before_trades_at_t=True).reshape(lattice.shape)
        ends = self.path.price(np.minimum(np.concatenate([starts, starts + step - 1]), now_ms))  # opens, closes
        return np.column_stack([ends[: len(starts)], inside, ends[len(starts) :]])

    def klines(self, interval: str, open_times: list[int], now_ms: int) -> list[Kline]:
        """Klines opening at ``open_times`` (all ≤ now), closed ones from the cache.

        The open kline is also kept while neither the clock nor the tape moved: the periodic
        push of every subscribed stream would otherwise price the same instant again for each
        of them (with a manual clock and a thousand streams that was most of the simulator's CPU).
        """
        cache = self._closed.setdefault(interval, {})
        step = INTERVAL_MS[interval]
        out: list[Kline | None] = [cache.get(t) for t in open_times]
        stamp = (now_ms, len(self.path.trades_t))
        held = self._open.get(interval)
        if held is not None and held[0] == stamp:
            out = [held[1] if k is None and t == held[1].open_time else k for t, k in zip(open_times, out, strict=True)]
        todo = [i for i, k in enumerate(out) if k is None]
        if todo:
            starts = np.asarray([open_times[i] for i in todo], dtype=np.int64)
            prices = self._samples(starts, step, now_ms)
            volumes = self._volume(interval, starts).tolist()
            highs, lows = prices.max(axis=1).tolist(), prices.min(axis=1).tolist()
            opens, closes = prices[:, 0].tolist(), prices[:, -1].tolist()
            # one look at the tape for the whole span: most history has no posted trades
            span_p, _ = self.path.trades_between(int(starts[0]), min(int(starts[-1]) + step, now_ms + 1))
            for row, i in enumerate(todo):
                t0 = open_times[i]
                closed = t0 + step <= now_ms
                tp, tq = self.path.trades_between(t0, min(t0 + step, now_ms + 1)) if span_p else ([], [])
                hi = max(highs[row], max(tp, default=-np.inf))
                lo = min(lows[row], min(tp, default=np.inf))
                elapsed = 1.0 if closed else max(0.0, (now_ms - t0) / step)
                vol = volumes[row] * elapsed + sum(tq)
                k = Kline(
                    open_time=t0,
                    close_time=t0 + step - 1,
                    open=opens[row],
                    high=hi,
                    low=lo,
                    close=closes[row],
                    volume=vol,
                    trades=(min(t0 + step - 1, now_ms) - t0) // 1000 + 1 + len(tp),  # the tape's trades
                    closed=closed,
                )
                out[i] = k
                if closed:
                    cache[t0] = k
                else:
                    self._open[interval] = (stamp, k)
        return [k for k in out if k is not None]

    def kline_window(
        self, interval: str, now_ms: int, *, start: int | None, end: int | None, limit: int
    ) -> list[Kline]:
        """Binance's klines selection: from ``start`` oldest first, else the newest ≤ ``end`` (or now)."""
        step = INTERVAL_MS[interval]
        current = open_time_of(interval, now_ms)
        last = current if end is None else min(current, open_time_of(interval, end))
        if start is not None:
            first = open_time_of(interval, start)
            if first < start:
                first += step
            if first > last:
                return []
            count = min(limit, (last - first) // step + 1)
            times = [first + i * step for i in range(count)]
        else:
            times = [last - i * step for i in range(limit)][::-1]
        return self.klines(interval, times, now_ms)


def kline_row(k: Kline) -> list[object]:
    """Binance's 12-element REST row."""
    taker = k.volume * 0.5
    return [
        k.open_time,
        fmt_price(k.open),
        fmt_price(k.high),
        fmt_price(k.low),
        fmt_price(k.close),
        fmt_price(k.volume),
        k.close_time,
        fmt_price(k.quote_volume),
        k.trades,
        fmt_price(taker),
        fmt_price(taker * (k.open + k.close) / 2.0),
        "0",
    ]


def kline_event(symbol: str, interval: str, k: Kline, event_ms: int) -> dict[str, object]:
    """Binance's ``<symbol>@kline_<interval>`` stream payload."""
    taker = k.volume * 0.5
    return {
        "e": "kline",
        "E": event_ms,
        "s": symbol,
        "k": {
            "t": k.open_time,
            "T": k.close_time,
            "s": symbol,
            "i": interval,
            "f": 100,
            "L": 100 + k.trades,
            "o": fmt_price(k.open),
            "c": fmt_price(k.close),
            "h": fmt_price(k.high),
            "l": fmt_price(k.low),
            "v": fmt_price(k.volume),
            "n": k.trades,
            "x": k.closed,
            "q": fmt_price(k.quote_volume),
            "V": fmt_price(taker),
            "Q": fmt_price(taker * (k.open + k.close) / 2.0),
            "B": "0",
        },
    }
