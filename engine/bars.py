"""OHLCV bar series: the one in-memory shape every indicator, chart and payload reads.

A :class:`Bars` holds parallel numpy arrays (float64 prices and volume) plus the bar open
times.  Real market data carries unix-second open times; chartgen's seeded sample data has
none and is dated ``"D{i}"`` instead, which is what the wire payloads echo as ``date``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Bars:
    """Parallel OHLCV arrays, oldest bar first.

    ``times`` holds each bar's open time in unix seconds, or is ``None`` for synthetic
    sample data (whose bars are labelled ``D0``, ``D1``, ...).
    """

    open: FloatArray
    high: FloatArray
    low: FloatArray
    close: FloatArray
    volume: FloatArray
    times: IntArray | None = None

    def __post_init__(self) -> None:
        n = len(self.close)
        for name in ("open", "high", "low", "volume"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Bars.{name} has {len(getattr(self, name))} values, expected {n}")
        if self.times is not None and len(self.times) != n:
            raise ValueError(f"Bars.times has {len(self.times)} values, expected {n}")

    def __len__(self) -> int:
        return len(self.close)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[tuple[float, float, float, float, float]],
        times: Sequence[int] | None = None,
    ) -> Bars:
        """Build from ``(open, high, low, close, volume)`` rows and optional open times."""
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
        t = None if times is None else np.asarray(times, dtype=np.int64)
        return cls(
            open=np.ascontiguousarray(arr[:, 0]),
            high=np.ascontiguousarray(arr[:, 1]),
            low=np.ascontiguousarray(arr[:, 2]),
            close=np.ascontiguousarray(arr[:, 3]),
            volume=np.ascontiguousarray(arr[:, 4]),
            times=t,
        )

    @classmethod
    def empty(cls) -> Bars:
        return cls.from_rows([], [])

    def date(self, i: int) -> str:
        """chartgen's date string for bar ``i``: unix seconds, or ``D{i}`` for sample data."""
        if self.times is None:
            return f"D{i}"
        return str(int(self.times[i]))

    def time_of(self, i: int) -> int | None:
        """Open time (unix seconds) of bar ``i``, or ``None`` for sample data."""
        if self.times is None:
            return None
        return int(self.times[i])

    def tail(self, n: int) -> Bars:
        """The newest ``n`` bars (all of them when ``n`` >= len)."""
        if n >= len(self):
            return self
        s = slice(len(self) - n, None)
        return Bars(
            open=self.open[s],
            high=self.high[s],
            low=self.low[s],
            close=self.close[s],
            volume=self.volume[s],
            times=None if self.times is None else self.times[s],
        )

    @property
    def hlc3(self) -> FloatArray:
        return (self.high + self.low + self.close) / 3.0

    @property
    def hl2(self) -> FloatArray:
        return (self.high + self.low) / 2.0
