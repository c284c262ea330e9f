"""One simulated market: its price path and its klines for every Binance interval.

A kline is sampled from the price path at every 15 s lattice point (intervals up to 1h: its
high and low then bound every trade of the tape) or at 17 evenly spaced moments (longer
intervals), plus every posted trade inside it; closed klines are cached (they can no longer
change: trades are always "now").
The open kline is sampled up to the current time.  Rows come out exactly as Binance's REST
sends them (12 elements, strings for prices and volumes).  Prices come from the path already
on the symbol's tick grid, so every OHLC value is a multiple of tickSize.

Speed (issue 41): the simulator is the floor under every warm-up and storm measurement, so
klines are built a window at a time with numpy — many markets at once on a clock advance
(:func:`klines_of`), a REST window straight from its columns to its JSON body without a Python
object per kline (:meth:`Market.klines_body`, kline_rows.py) — always with the same float
operations as one kline at a time, so what a client sees does not depend on how it was computed
(tests/simulator/test_sim_golden.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple, cast

import numpy as np
import orjson

from simulator.kline_cache import RECORD, ClosedKlines
from simulator.kline_rows import format_8f as format_8f  # re-exported (both lived here)
from simulator.kline_rows import kline_row as kline_row
from simulator.kline_rows import klines_body
from simulator.prices import PricePath, _stable_hash

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


class Kline(NamedTuple):
    """One kline; ``closed`` is False for the one still forming.

    A named tuple rather than a dataclass: a window of a thousand is built per request, and a
    tuple is built in C (and, holding only numbers, is no work for the garbage collector).
    """

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


_new_kline = partial(tuple.__new__, Kline)
"""``Kline._make`` without its length check: builds in C (a cold window builds a thousand)."""


class KlineColumns(NamedTuple):
    """Klines as numpy columns (a window's, from the cache and the path), one row per kline."""

    open_time: np.ndarray
    close_time: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    trades: np.ndarray
    closed: np.ndarray

    def klines(self) -> list[Kline]:
        return list(map(_new_kline, zip(*(col.tolist() for col in self), strict=True)))

    def records(self) -> np.ndarray:
        """The rows as kline_cache.py's records."""
        rows = np.empty(len(self.open_time), dtype=RECORD)
        for name, col in zip(RECORD.names or (), self, strict=True):
            rows[name] = col
        return rows

    @staticmethod
    def of(records: np.ndarray) -> KlineColumns:
        """Columns viewing kline_cache.py's records."""
        return KlineColumns(*(records[name] for name in RECORD.names or ()))


class Market:
    """A symbol's klines, derived from its deterministic price path and posted trades."""

    def __init__(self, symbol: str, seed: int, origin_ms: int) -> None:
        self.symbol = symbol
        self.path = PricePath(symbol, seed, origin_ms)
        self._base_volume = 5.0 + (_stable_hash(f"vol:{seed}:{symbol}") % 1000) / 10.0
        self.volume_key = _stable_hash(f"{seed}:{symbol}:volume")
        """Seeds each kline's volume draw with its open time (:func:`klines_of` computes them together)."""
        self._closed: dict[str, ClosedKlines] = {}
        """Closed klines by interval (kline_cache.py)."""
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

    def _store(self, interval: str) -> ClosedKlines:
        store = self._closed.get(interval)
        if store is None:
            store = self._closed[interval] = ClosedKlines(INTERVAL_MS[interval], open_time_of(interval, 0))
        return store

    def _held(self, interval: str, now_ms: int) -> Kline | None:
        """The open kline kept while neither the clock nor the tape moved since it was priced."""
        held = self._open.get(interval)
        return held[1] if held is not None and held[0] == (now_ms, len(self.path.trades_t)) else None

    def cached(self, interval: str, open_times: Sequence[int], now_ms: int) -> list[Kline | None]:
        """The cached klines of ``open_times`` (closed ones, and the open one while nothing moved), else None."""
        get = self._store(interval).get
        out: list[Kline | None] = [None if v is None else _new_kline(v) for v in map(get, open_times)]
        held = self._held(interval, now_ms)
        if held is not None:
            out = [held if k is None and t == held.open_time else k for t, k in zip(open_times, out, strict=True)]
        return out

    def keep(self, interval: str, k: Kline, now_ms: int) -> None:
        """Cache a kline just built: closed ones for good, the open one while neither clock nor tape moves."""
        if k.closed:
            self._store(interval).keep(k)
        else:
            self._open[interval] = ((now_ms, len(self.path.trades_t)), k)

    def klines(self, interval: str, open_times: list[int], now_ms: int) -> list[Kline]:
        """Klines opening at ``open_times`` (all ≤ now), closed ones from the cache.

        The open kline is also kept while neither the clock nor the tape moved: the periodic
        push of every subscribed stream would otherwise price the same instant again for each
        of them (with a manual clock and a thousand streams that was most of the simulator's CPU).
        """
        return klines_of([(self, interval, open_times)], now_ms)[0]

    def kline_window(
        self, interval: str, now_ms: int, *, start: int | None, end: int | None, limit: int
    ) -> list[Kline]:
        """Binance's klines selection: from ``start`` oldest first, else the newest ≤ ``end`` (or now)."""
        times = _window_times(interval, now_ms, start, end, limit)
        return self._window_columns(interval, times, now_ms).klines()

    def klines_body(self, interval: str, now_ms: int, *, start: int | None, end: int | None, limit: int) -> bytes:
        """``GET /api/v3/klines``'s JSON body for :meth:`kline_window`'s selection, written from columns.

        The same bytes as ``orjson.dumps([kline_row(k) for k in self.kline_window(...)])``
        (kline_rows.py) without a Python object per kline.
        """
        times = _window_times(interval, now_ms, start, end, limit)
        return klines_body(*self._window_columns(interval, times, now_ms)[:-1])  # every column but ``closed``

    def _window_columns(self, interval: str, times: np.ndarray, now_ms: int) -> KlineColumns:
        """The klines opening at consecutive ``times``: kept ones from the cache, the rest built together (and kept)."""
        if not times.size:
            return KlineColumns.of(np.zeros(0, dtype=RECORD))
        store = self._store(interval)
        first = int(times[0])
        rows = store.run(first, len(times))
        found = rows["x"].copy()  # closed ones kept
        held = self._held(interval, now_ms)
        if held is not None and not found[-1] and held.open_time == times[-1]:
            rows[-1], found[-1] = held, True
        if found.all():
            return KlineColumns.of(rows)
        missing = np.flatnonzero(~found)
        built = _build_columns([self], np.zeros(len(missing), dtype=np.int64), interval, times[missing], now_ms)
        cold = len(missing) == len(times)
        if cold:
            rows = built.records()
        else:
            rows[missing] = built.records()
        store.keep_run(first, rows if rows["x"][-1] else rows[:-1])  # only the newest can be open
        if not built.closed[-1]:  # the open kline was built: held while nothing moves
            self._open[interval] = ((now_ms, len(self.path.trades_t)), _new_kline(rows[-1].item()))
        return built if cold else KlineColumns.of(rows)  # built: contiguous columns, quicker to read


def _window_times(interval: str, now_ms: int, start: int | None, end: int | None, limit: int) -> np.ndarray:
    """The open times Binance's klines selection gives: from ``start`` oldest first, else the newest ≤ ``end``."""
    step = INTERVAL_MS[interval]
    current = open_time_of(interval, now_ms)
    last = current if end is None else min(current, open_time_of(interval, end))
    if start is not None:
        first = open_time_of(interval, start)
        if first < start:
            first += step
        if first > last:
            return np.zeros(0, dtype=np.int64)
        count = min(limit, (last - first) // step + 1)
        return first + np.arange(count, dtype=np.int64) * step
    return np.arange(last - (limit - 1) * step, last + 1, step, dtype=np.int64)


def _sample_times(starts: np.ndarray, step: int, now_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """Where the path is priced inside each kline (a column each), and whether before trades at that instant.

    Up to an hour: the open, every 15 s lattice point (where the path's pieces join, so its
    extremes) priced before trades posted at that instant as the tape's trades are (the
    trades themselves count through ``trades_between``), then the close.  Longer: 17
    evenly spaced moments.  The first row is the open, the last the close; a column per kline
    keeps numpy's inner loops a window long.
    """
    if step > _EXACT_MAX_STEP:
        frac = np.linspace(0.0, 1.0, _SAMPLES)
        grid = np.minimum(starts[None, :] + (frac[:, None] * (step - 1)).astype(np.int64), now_ms)
        return grid, np.zeros(grid.shape, dtype=bool)
    lattice = np.minimum(starts[None, :] + np.arange(0, step, _LATTICE_MS)[:, None], now_ms)
    times = np.vstack([np.minimum(starts, now_ms), lattice, np.minimum(starts + step - 1, now_ms)])
    before = np.ones(times.shape, dtype=bool)
    before[0] = before[-1] = False
    return times, before


def _build_columns(
    markets: Sequence[Market], own: np.ndarray, interval: str, starts: np.ndarray, now_ms: int
) -> KlineColumns:
    """The klines opening at ``starts``, the ``i``-th of ``markets[own[i]]``, from the path and the tape.

    Vectorised over all klines (of one market for a REST window, of every subscribed market for
    a clock advance); klines with posted trades, and the open one, get the tape's trades one
    by one with the same float operations as ever.
    """
    step = INTERVAL_MS[interval]
    n = len(starts)
    times, before = _sample_times(starts, step, now_ms)
    if len(markets) == 1:
        path = markets[0].path
        if step <= _EXACT_MAX_STEP and n:  # the open is the first lattice point: one instant, priced once
            base = path.base(times[1:])
            base = np.vstack((base[:1], base))
        else:
            base = path.base(times)  # a column of ascending instants per kline (prices.py)
        prices = path.price(times.ravel(), before_trades_at_t=before.ravel(), base=base.ravel()).reshape(times.shape)
    else:
        owner = np.tile(own, times.shape[0])
        prices = PricePath.price_many([m.path for m in markets], owner, times.ravel(), before.ravel())
        prices = prices.reshape(times.shape)
    ends = np.minimum(starts + step, now_ms + 1)
    lo_idx = np.zeros(n, dtype=np.int64)
    n_trades = np.zeros(n, dtype=np.int64)
    for j, m in enumerate(markets):
        if m.path.trades_t:
            rows = np.flatnonzero(own == j) if len(markets) > 1 else np.arange(n)
            trades_t = np.asarray(m.path.trades_t, dtype=np.int64)
            lo_idx[rows] = np.searchsorted(trades_t, starts[rows], side="left")
            n_trades[rows] = np.searchsorted(trades_t, ends[rows], side="left") - lo_idx[rows]
    closed = starts + step <= now_ms
    opens, closes = prices[0], prices[-1]
    highs, lows = prices.max(axis=0), prices.min(axis=0)
    # volume: deterministic per (market, open time); × 1.0 (unchanged) for a closed kline without trades
    base_volume = np.array([m.base_volume for m in markets])[own]
    keys = np.array([m.volume_key for m in markets], dtype=np.uint64)[own]
    h = (starts.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ keys
    h ^= h >> np.uint64(29)
    u = (h % np.uint64(1_000_003)).astype(np.float64) / 1_000_003
    volumes = base_volume * (step / 60_000) * (0.5 + u)
    counts = (np.minimum(starts + step - 1, now_ms) - starts) // 1000 + 1 + n_trades  # the tape's
    owners = own.tolist()
    for row in np.flatnonzero((n_trades > 0) | ~closed).tolist():
        path = markets[owners[row]].path
        first, count = int(lo_idx[row]), int(n_trades[row])
        tp, tq = path.trades_p[first : first + count], path.trades_q[first : first + count]
        highs[row] = max(float(highs[row]), max(tp, default=-np.inf))
        lows[row] = min(float(lows[row]), min(tp, default=np.inf))
        elapsed = 1.0 if closed[row] else max(0.0, (now_ms - int(starts[row])) / step)
        volumes[row] = float(volumes[row]) * elapsed + sum(tq)
    return KlineColumns(starts, starts + step - 1, opens, highs, lows, closes, volumes, counts, closed)


def _build(markets: Sequence[Market], own: np.ndarray, interval: str, starts: np.ndarray, now_ms: int) -> list[Kline]:
    """:func:`_build_columns` as Klines, each kept by its market (closed ones, and the open one while nothing moves)."""
    built = _build_columns(markets, own, interval, starts, now_ms).klines()
    for k, j in zip(built, own.tolist(), strict=True):
        markets[j].keep(interval, k, now_ms)
    return built


def klines_of(requests: Sequence[tuple[Market, str, Sequence[int]]], now_ms: int) -> list[list[Kline]]:
    """``market.klines(interval, open_times, now_ms)`` of every request, computed together.

    A clock advance closes a kline of every subscribed market at once: building them in one
    vectorised pass per interval (:meth:`PricePath.price_many`, the same arithmetic element by
    element) costs one round of numpy calls instead of one per market.  Each (market, interval)
    appears at most once.
    """
    found = [m.cached(interval, times, now_ms) for m, interval, times in requests]
    groups: dict[str, list[int]] = {}  # interval → the requests with klines to build
    for r, (_, interval, _) in enumerate(requests):
        if any(k is None for k in found[r]):
            groups.setdefault(interval, []).append(r)
    for interval, members in groups.items():
        markets: list[Market] = []
        slot: dict[int, int] = {}  # id(market) → its index in markets
        starts: list[int] = []
        own: list[int] = []
        where: list[tuple[int, list[int]]] = []
        for r in members:
            market, _, times = requests[r]
            if id(market) not in slot:
                slot[id(market)] = len(markets)
                markets.append(market)
            todo = [i for i, k in enumerate(found[r]) if k is None]
            starts += [times[i] for i in todo] if len(todo) < len(times) else times
            own += [slot[id(market)]] * len(todo)
            where.append((r, todo))
        built = _build(markets, np.asarray(own, dtype=np.int64), interval, np.asarray(starts, dtype=np.int64), now_ms)
        at = 0
        for r, todo in where:
            if len(todo) == len(found[r]):
                found[r] = list[Kline | None](built[at : at + len(todo)])  # nothing was cached (a cold window)
            else:
                for i, k in zip(todo, built[at : at + len(todo)], strict=True):
                    found[r][i] = k
            at += len(todo)
    return cast(list[list[Kline]], found)  # every missing kline was built


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


def kline_frame(symbol: str, interval: str, k: Kline, event_ms: int) -> orjson.Fragment:
    """:func:`kline_event` serialised: one payload for every connection of the stream (combined or raw)."""
    return orjson.Fragment(orjson.dumps(kline_event(symbol, interval, k, event_ms)))
