"""Supertrend overlay: an ATR trailing line that flips sides when the close crosses it."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import PanelResult
from engine.indicators.newest import Newest
from engine.indicators.overlays.trend_dots import FLIP_SIGNALS, trend_dots, trend_newest
from engine.indicators.params import Param, period
from engine.indicators.primitives import atr


def supertrend(bars: Bars, n: int, mult: float) -> tuple[np.ndarray, np.ndarray]:
    """(line, up) arrays; NaN until ATR exists."""
    size = len(bars)
    line = np.full(size, np.nan)
    up = np.zeros(size, dtype=bool)
    if size == 0:
        return line, up
    a = atr(bars.high, bars.low, bars.close, n)
    mid = bars.hl2
    basic_up = (mid + mult * a).tolist()
    basic_dn = (mid - mult * a).tolist()
    close = bars.close.tolist()
    valid = np.flatnonzero(np.isfinite(a))
    if len(valid) == 0:
        return line, up
    start = int(valid[0])
    upper, lower = basic_up[start], basic_dn[start]
    trend_up = close[start] >= mid[start]
    out = line.tolist()
    ups = up.tolist()
    out[start], ups[start] = (lower if trend_up else upper), trend_up
    for i in range(start + 1, size):
        bu, bl, prev_close = basic_up[i], basic_dn[i], close[i - 1]
        upper = bu if (bu < upper or prev_close > upper) else upper
        lower = bl if (bl > lower or prev_close < lower) else lower
        if trend_up and close[i] < lower:
            trend_up = False
        elif not trend_up and close[i] > upper:
            trend_up = True
        out[i] = lower if trend_up else upper
        ups[i] = trend_up
    return np.asarray(out), np.asarray(ups, dtype=bool)


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    line, up = supertrend(bars, params["period"], params["multiplier"])
    return trend_dots("Supertrend", line, up)


def _newest(bars: Bars, params: Params) -> Newest:
    return trend_newest(*supertrend(bars, params["period"], params["multiplier"]))


SUPERTREND = IndicatorDef(
    name="supertrend",
    kind="overlay",
    description=(
        "Supertrend — ATR-based trend follower drawn as dots below (uptrend) or above (downtrend) price. "
        "Formula: bands = (high+low)/2 ± multiplier·ATR(period) (Wilder); the lower band only rises and "
        "the upper only falls while the trend lasts; the trend flips when the close crosses the active "
        "band (signals flip_up / flip_down on that bar)."
    ),
    compute=_compute,
    newest=_newest,
    warmup=wu.Rule("rma", ("period",), extra=wu.STATE_SETTLE),
    params=(
        period("period", 10, "ATR length in bars"),
        Param("multiplier", "number", 3.0, "band distance in ATRs", minimum=0, exclusive_minimum=True, maximum=100),
    ),
    aliases=("st",),
    signals=FLIP_SIGNALS,
)
