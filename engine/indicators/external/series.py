"""What the external indicators share: preconditions, the no-data result, time alignment.

Fetched samples are matched to bars by time: a bar takes the newest sample published no
later than the end of the bar, provided that sample is not older than ``max_age`` seconds
before the bar's open; otherwise the bar's value is NaN (null on the wire).
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray, IntArray
from engine.indicators.base import ComputeContext, ExternalUnavailable
from engine.indicators.external.sources import TimedSeries
from engine.indicators.model import PanelResult
from engine.market_data.errors import MarketDataError
from engine.market_data.intervals import interval_seconds
from engine.market_data.source import is_crypto

NOT_CRYPTO = "not a crypto symbol"
NO_TIMES = "sample data has no bar times"
NO_BARS = "no bars"
NO_OVERLAP = "no samples for these bars"
NOT_FETCHED = "not fetched"

# chartgen's interval → Binance futures-data period map (contract §3.4)
_PERIODS = {
    "1m": "5m",
    "5m": "5m",
    "15m": "15m",
    "30m": "30m",
    "1h": "1h",
    "60m": "1h",
    "2h": "2h",
    "4h": "4h",
    "6h": "6h",
    "12h": "12h",
    "1d": "1d",
    "1wk": "1d",
    "1mo": "1d",
}


def futures_period(interval: str) -> str:
    """The Binance futures-data ``period`` for a chart interval (4h when there is no match)."""
    return _PERIODS.get(interval, "4h")


def unavailable_before_fetch(bars: Bars, ctx: ComputeContext, *, needs_crypto: bool) -> ExternalUnavailable | None:
    """Why no request should be made at all, or None when fetching makes sense."""
    if needs_crypto and (ctx.symbol is None or not is_crypto(ctx.symbol)):
        return ExternalUnavailable(NOT_CRYPTO)
    if len(bars) == 0:
        return ExternalUnavailable(NO_BARS)
    if bars.times is None:
        return ExternalUnavailable(NO_TIMES)
    return None


def fetched_series(bars: Bars, ctx: ComputeContext, *, needs_crypto: bool) -> TimedSeries | ExternalUnavailable:
    """The data compute should use: the fetched series, or why there is none."""
    blocked = unavailable_before_fetch(bars, ctx, needs_crypto=needs_crypto)
    if blocked is not None:
        return blocked
    data = ctx.external
    if isinstance(data, ExternalUnavailable | TimedSeries):
        return data
    return ExternalUnavailable(NOT_FETCHED)


def no_data(label: str, reason: str) -> PanelResult:
    """The empty result of an external indicator without data: ``LABEL (no data: reason)``."""
    return PanelResult(label=f"{label} (no data: {reason})", is_overlay=False)


def bar_seconds(bars: Bars, interval: str) -> int:
    """Length of one bar: from the interval name, else the median spacing of the bar times."""
    try:
        return interval_seconds(interval)
    except (MarketDataError, KeyError):
        pass
    if bars.times is not None and len(bars.times) > 1:
        return max(int(np.median(np.diff(bars.times))), 1)
    return 1


def align_asof(
    bar_times: IntArray, bar_len: int, sample_times: IntArray, values: FloatArray, max_age: int
) -> tuple[FloatArray, IntArray]:
    """Per-bar value of the newest sample at or before the bar's end, if fresh enough.

    Returns the aligned values (NaN where none) and the chosen sample index (−1 where none).
    """
    n = len(bar_times)
    if len(sample_times) == 0 or n == 0:
        return np.full(n, np.nan), np.full(n, -1, dtype=np.int64)
    bar_end = bar_times.astype(np.int64) + max(bar_len, 1) - 1
    idx = np.searchsorted(sample_times, bar_end, side="right") - 1
    safe = np.maximum(idx, 0)
    ok = (idx >= 0) & (sample_times[safe] >= bar_times - max_age)
    out = np.where(ok, values[safe], np.nan)
    return out, np.where(ok, idx, -1)
