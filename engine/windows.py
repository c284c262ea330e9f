"""Rolling OHLCV windows: the closed bars of one (symbol, interval), plus its open kline.

Closed bars live in preallocated numpy buffers with some headroom (at most
:data:`HEADROOM_MAX` bars); when the headroom is used up the newest ``capacity`` bars are moved to
the front (one memmove per ``headroom`` appends).  A window only ever grows forward in time: a closed bar whose open
time is already stored is a duplicate, an older one is stale, and one that would leave a
hole is reported as a gap (the feed then backfills over REST).  The currently forming
kline is kept apart, so an open candle is never stored as closed.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from engine.bars import Bars
from engine.market_data.intervals import interval_seconds, to_binance

MONTH_MAX_S = 31 * 86_400

HEADROOM_MAX = 64
"""Spare bars after a window's newest: one move of the window to the front per 64 closes (about
5 µs for 1,000 bars) instead of a quarter more memory per window (1,250 → 1,064 slots of 48 bytes)."""


class Applied(Enum):
    """What :meth:`RollingWindow.apply_closed` did with a bar."""

    APPENDED = "appended"
    DUPLICATE = "duplicate"
    STALE = "stale"
    GAP = "gap"


class OpenKline(NamedTuple):
    """The still-forming kline (open time in unix seconds); a named tuple for the reason ``Tick`` is one."""

    time: int
    open: float
    high: float
    low: float
    close: float
    volume: float


class RollingWindow:
    """The newest ``capacity`` closed bars of one market, oldest first."""

    __slots__ = (
        "_end",
        "_start",
        "_times",
        "_vals",
        "capacity",
        "interval",
        "max_step_s",
        "open_kline",
        "step_s",
        "symbol",
    )

    def __init__(self, symbol: str, interval: str, capacity: int = 1000, headroom: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"window capacity must be at least 1 bar, got {capacity}")
        self.symbol = symbol.upper()
        self.interval = to_binance(interval)
        self.capacity = capacity
        self.step_s = interval_seconds(self.interval)
        self.max_step_s = MONTH_MAX_S if self.interval == "1M" else self.step_s
        room = min(HEADROOM_MAX, max(16, capacity // 4)) if headroom is None else max(1, headroom)
        self._times = np.zeros(capacity + room, dtype=np.int64)
        self._vals = np.zeros((5, capacity + room), dtype=np.float64)
        self._start = 0
        self._end = 0
        self.open_kline: OpenKline | None = None

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def last_time(self) -> int | None:
        """Open time (unix seconds) of the newest closed bar, or None when empty."""
        return int(self._times[self._end - 1]) if self._end > self._start else None

    @property
    def first_time(self) -> int | None:
        return int(self._times[self._start]) if self._end > self._start else None

    def _make_room(self, n: int) -> None:
        """Ensure ``n`` more bars fit after ``_end`` (compacting or growing the buffer)."""
        size = self._times.shape[0]
        if self._end + n <= size:
            return
        keep = min(len(self), self.capacity)
        s = self._end - keep
        if keep + n > size:  # a batch larger than the headroom: grow once
            new_size = keep + n + min(HEADROOM_MAX, max(16, self.capacity // 4))
            times = np.zeros(new_size, dtype=np.int64)
            vals = np.zeros((5, new_size), dtype=np.float64)
            times[:keep] = self._times[s : self._end]
            vals[:, :keep] = self._vals[:, s : self._end]
            self._times, self._vals = times, vals
        else:
            self._times[:keep] = self._times[s : self._end]
            self._vals[:, :keep] = self._vals[:, s : self._end]
        self._start, self._end = 0, keep

    def _trim(self) -> None:
        if self._end - self._start > self.capacity:
            self._start = self._end - self.capacity

    def apply_closed(self, time: int, o: float, h: float, low: float, c: float, v: float) -> Applied:
        """Store one closed bar if it is the next one; idempotent by open time."""
        last = self.last_time
        if last is not None:
            if time == last:
                return Applied.DUPLICATE
            if time < last:
                return Applied.STALE
            if time - last > self.max_step_s:
                return Applied.GAP
        self._make_room(1)
        e = self._end
        self._times[e] = time
        col = self._vals[:, e]
        col[0], col[1], col[2], col[3], col[4] = o, h, low, c, v
        self._end = e + 1
        self._trim()
        ok = self.open_kline
        if ok is not None and ok.time <= time:
            self.open_kline = None
        return Applied.APPENDED

    def merge_closed(self, times: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> int:
        """Append the bars of an ascending batch that are newer than the last stored one.

        ``values`` is shaped ``(5, n)`` (open, high, low, close, volume rows).  The batch is
        trusted to be complete (REST), so holes between its bars are accepted; returns how
        many bars were appended.
        """
        if len(times) == 0:
            return 0
        last = self.last_time
        if last is not None:
            newer = times > last
            if not newer.all():
                times, values = times[newer], values[:, newer]
        else:
            # de-duplicate within the batch itself (keep the first of equal open times)
            if len(times) > 1 and not (np.diff(times) > 0).all():
                _, first = np.unique(times, return_index=True)
                times, values = times[first], values[:, first]
        n = len(times)
        if n == 0:
            return 0
        if n > self.capacity:
            times, values = times[-self.capacity :], values[:, -self.capacity :]
            n = self.capacity
        self._make_room(n)
        e = self._end
        self._times[e : e + n] = times
        self._vals[:, e : e + n] = values
        self._end = e + n
        self._trim()
        ok = self.open_kline
        if ok is not None and ok.time <= int(times[-1]):
            self.open_kline = None
        return n

    def clear(self) -> None:
        """Forget every closed bar (used when a backfill cannot bridge the hole)."""
        self._start = self._end = 0

    def update_open(self, kline: OpenKline) -> bool:
        """Replace the forming kline; ignored (False) if it is not newer than the last closed bar."""
        last = self.last_time
        if last is not None and kline.time <= last:
            return False
        self.open_kline = kline
        return True

    def bars(self, n: int | None = None, *, include_open: bool = False) -> Bars:
        """A copy of the newest ``n`` closed bars (all when None), optionally plus the open kline."""
        ok = self.open_kline if include_open else None
        total = len(self) + (1 if ok is not None else 0)
        count = total if n is None else max(0, min(n, total))
        closed = min(count - (1 if ok is not None and count > 0 else 0), len(self))
        s = self._end - closed
        times = self._times[s : self._end].copy()
        vals = self._vals[:, s : self._end].copy()
        if ok is not None and count > 0:
            times = np.append(times, np.int64(ok.time))
            vals = np.concatenate([vals, np.array([[ok.open], [ok.high], [ok.low], [ok.close], [ok.volume]])], axis=1)
        return Bars(open=vals[0], high=vals[1], low=vals[2], close=vals[3], volume=vals[4], times=times)

    def times(self) -> npt.NDArray[np.int64]:
        """A copy of the stored open times."""
        return self._times[self._start : self._end].copy()
