"""MACD panel: the difference of two SMA-seeded EMAs, its signal EMA and the histogram.

Kept lean because it is part of the default engine set computed on every closed bar:
three TA-Lib EMA passes and one subtraction per output.
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.incremental import MacdState
from engine.indicators.model import Histogram, HLine, Line, PanelResult
from engine.indicators.newest import Newest, values_of
from engine.indicators.params import period
from engine.indicators.primitives import ema

# index = 2·(hist ≥ 0) + (hist rising): falling/rising shades below and above zero
_HIST_PALETTE = np.array([colors.DOWN, "#ffcdd2", "#b2dfdb", colors.UP])


def _warmup(p: Params, interval: str) -> int:
    """The slower of the two EMAs, then the signal EMA over their difference."""
    return max(wu.ema(p["fast"]), wu.ema(p["slow"])) + wu.ema(p["signal"])


def _lines(bars: Bars, params: Params) -> tuple[np.ndarray, np.ndarray]:
    close = bars.close
    macd = ema(close, params["fast"]) - ema(close, params["slow"])
    return macd, ema(macd, params["signal"])


def _newest(bars: Bars, params: Params) -> Newest:
    return Newest(values_of(("MACD", "Signal"), _lines(bars, params)), ())


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    macd, signal = _lines(bars, params)
    hist = macd - signal
    with np.errstate(invalid="ignore"):
        rising = np.concatenate(([False], hist[1:] >= hist[:-1])) if len(hist) else np.zeros(0, bool)
        positive = hist >= 0
    hist_colors = _HIST_PALETTE[positive.astype(np.int8) * 2 + rising.astype(np.int8)].tolist()
    return PanelResult(
        label="MACD",
        is_overlay=False,
        lines=[Line(macd, colors.BLUE, label="MACD"), Line(signal, colors.ORANGE, label="Signal")],
        histograms=[Histogram(hist, hist_colors)],
        hlines=[HLine(0.0, colors.GREY)],
    )


MACD = IndicatorDef(
    name="macd",
    kind="panel",
    description=(
        "Moving Average Convergence Divergence — trend momentum from the gap between a fast and a "
        "slow EMA. Formula: MACD = EMA(close, fast) − EMA(close, slow); Signal = EMA(MACD, signal); "
        "Histogram = MACD − Signal; EMAs use α = 2/(n+1) seeded with the SMA of their first n values "
        "(MACD from bar slow−1, Signal from bar slow+signal−2)."
    ),
    compute=_compute,
    warmup=_warmup,
    newest=_newest,
    incremental=MacdState,
    params=(
        period("fast", 12, "fast EMA length in bars"),
        period("slow", 26, "slow EMA length in bars"),
        period("signal", 9, "signal EMA length in bars"),
    ),
)
