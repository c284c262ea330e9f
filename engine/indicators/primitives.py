"""Numerical building blocks shared by the indicators.

Standard definitions (design.md §5): moving averages are SMA-seeded with NaN during
warm-up, RMA is Wilder's smoothing (α = 1/n).  The heavy primitives delegate to TA-Lib's C
implementation; everything takes and returns float64 numpy arrays of the input's length.
Leading NaNs in an input are skipped (TA-Lib starts at the first finite value), so
primitives can be chained (an EMA of an EMA warms up twice).
"""

from __future__ import annotations

import numpy as np
import talib
from numpy.lib.stride_tricks import sliding_window_view

from engine.bars import FloatArray


def _f64(x: FloatArray) -> FloatArray:
    return np.ascontiguousarray(x, dtype=np.float64)


def nans(n: int) -> FloatArray:
    """An all-NaN array of length ``n``."""
    return np.full(n, np.nan, dtype=np.float64)


def sma(x: FloatArray, period: int) -> FloatArray:
    """Simple moving average; NaN for the first ``period - 1`` values."""
    if len(x) == 0:
        return nans(0)
    if period <= 1:
        return _f64(x).copy()
    return talib.SMA(_f64(x), timeperiod=period)


def ema(x: FloatArray, period: int) -> FloatArray:
    """Exponential moving average, α = 2/(period+1), seeded with the SMA of the first ``period`` values."""
    if len(x) == 0:
        return nans(0)
    return talib.EMA(_f64(x), timeperiod=period)


def rma(x: FloatArray, period: int) -> FloatArray:
    """Wilder's moving average (α = 1/period), seeded with the SMA of the first ``period`` values."""
    x = _f64(x)
    out = nans(len(x))
    finite = np.flatnonzero(np.isfinite(x))
    if len(finite) == 0:
        return out
    start = int(finite[0])
    if len(x) - start < period:
        return out
    seed_end = start + period
    prev = float(np.mean(x[start:seed_end]))
    out[seed_end - 1] = prev
    a = 1.0 / period
    vals = x[seed_end:].tolist()
    res = out[seed_end:]
    for i, v in enumerate(vals):
        prev = prev + a * (v - prev)
        res[i] = prev
    return out


def wma(x: FloatArray, period: int) -> FloatArray:
    """Linearly weighted moving average."""
    if len(x) == 0:
        return nans(0)
    if period <= 1:
        return _f64(x).copy()
    return talib.WMA(_f64(x), timeperiod=period)


def highest(x: FloatArray, period: int) -> FloatArray:
    """Rolling maximum over ``period`` bars; NaN for the first ``period - 1``."""
    if len(x) == 0:
        return nans(0)
    if period <= 1:
        return _f64(x).copy()
    return talib.MAX(_f64(x), timeperiod=period)


def lowest(x: FloatArray, period: int) -> FloatArray:
    """Rolling minimum over ``period`` bars; NaN for the first ``period - 1``."""
    if len(x) == 0:
        return nans(0)
    if period <= 1:
        return _f64(x).copy()
    return talib.MIN(_f64(x), timeperiod=period)


def rolling_sum(x: FloatArray, period: int) -> FloatArray:
    """Rolling sum over ``period`` bars; NaN for the first ``period - 1``."""
    if len(x) == 0:
        return nans(0)
    if period <= 1:
        return _f64(x).copy()
    return talib.SUM(_f64(x), timeperiod=period)


def stdev(x: FloatArray, period: int, ddof: int = 0) -> FloatArray:
    """Rolling standard deviation (population for ``ddof=0``, sample for ``ddof=1``)."""
    x = _f64(x)
    out = nans(len(x))
    if period < 1 or len(x) < period or period - ddof <= 0:
        return out
    win = sliding_window_view(x, period)
    out[period - 1 :] = win.std(axis=1, ddof=ddof)
    return out


def true_range(high: FloatArray, low: FloatArray, close: FloatArray) -> FloatArray:
    """True range; the first bar uses high − low (there is no previous close)."""
    n = len(close)
    if n == 0:
        return nans(0)
    prev = np.empty(n)
    prev[0] = np.nan
    prev[1:] = close[:-1]
    tr = np.fmax(high - low, np.fmax(np.abs(high - prev), np.abs(low - prev)))
    tr[0] = high[0] - low[0]
    return tr


def atr(high: FloatArray, low: FloatArray, close: FloatArray, period: int) -> FloatArray:
    """Wilder's Average True Range (TA-Lib ATR: first value at bar ``period``)."""
    if len(close) == 0:
        return nans(0)
    return talib.ATR(_f64(high), _f64(low), _f64(close), timeperiod=period)


def rsi(x: FloatArray, period: int) -> FloatArray:
    """Wilder's RSI (0-100); first value at bar ``period``."""
    if len(x) == 0:
        return nans(0)
    return talib.RSI(_f64(x), timeperiod=period)


def crossover(a: FloatArray, b: FloatArray) -> np.ndarray:
    """True at bars where ``a`` moves from ≤ ``b`` to > ``b`` (both bars finite)."""
    out = np.zeros(len(a), dtype=bool)
    if len(a) < 2:
        return out
    with np.errstate(invalid="ignore"):
        out[1:] = (a[1:] > b[1:]) & (a[:-1] <= b[:-1])
    return out


def crossunder(a: FloatArray, b: FloatArray) -> np.ndarray:
    """True at bars where ``a`` moves from ≥ ``b`` to < ``b`` (both bars finite)."""
    out = np.zeros(len(a), dtype=bool)
    if len(a) < 2:
        return out
    with np.errstate(invalid="ignore"):
        out[1:] = (a[1:] < b[1:]) & (a[:-1] >= b[:-1])
    return out


def safe_div(num: FloatArray, den: FloatArray, fill: float = np.nan) -> FloatArray:
    """Element-wise ``num / den`` with ``fill`` where the denominator is 0 or not finite."""
    num = _f64(num)
    den = np.broadcast_to(_f64(den), num.shape)
    out = np.full(num.shape, fill, dtype=np.float64)
    ok = np.isfinite(den) & (den != 0)
    np.divide(num, den, out=out, where=ok)
    return out


def last_finite(x: FloatArray) -> float | None:
    """The newest finite value, or None."""
    idx = np.flatnonzero(np.isfinite(x))
    return float(x[idx[-1]]) if len(idx) else None
