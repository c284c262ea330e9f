"""VWAP and VWAP bands, anchored to the UTC day (or the whole window for sample data)."""

from __future__ import annotations

import math

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Fill, Line, PanelResult
from engine.indicators.panels.volatility import bars_per_year
from engine.indicators.params import Param

DAY_S = 86_400


def session_warmup(params: object, interval: str) -> int:
    """Bars of one UTC day before the first shown bar, so its session starts where it really did."""
    per_day = bars_per_year(interval) / 365.0
    return max(0, math.ceil(per_day - 1e-9) - 1)


def _session_cumsum(x: FloatArray, starts: np.ndarray) -> FloatArray:
    """Cumulative sum that restarts at every index in ``starts`` (which includes 0)."""
    total = np.cumsum(x)
    if len(starts) > 1:
        offsets = np.zeros(len(x))
        before = total[starts[1:] - 1]
        offsets[starts[1:]] = np.diff(np.concatenate(([0.0], before)))
        total = total - np.cumsum(offsets)
    return total


def _session_starts(bars: Bars) -> np.ndarray:
    if bars.times is None or len(bars) == 0:
        return np.zeros(1 if len(bars) else 0, dtype=np.int64)
    day = bars.times // DAY_S
    return np.concatenate(([0], np.flatnonzero(np.diff(day)) + 1)).astype(np.int64)


def vwap_and_sigma(bars: Bars) -> tuple[FloatArray, FloatArray]:
    """Session VWAP of the typical price and the volume-weighted standard deviation around it."""
    n = len(bars)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    starts = _session_starts(bars)
    tp = bars.hlc3
    v = bars.volume
    cv = _session_cumsum(v, starts)
    cpv = _session_cumsum(tp * v, starts)
    cp2v = _session_cumsum(tp * tp * v, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        vwap = np.where(cv > 0, cpv / cv, np.nan)
        var = np.where(cv > 0, cp2v / cv - vwap * vwap, np.nan)
    sigma = np.sqrt(np.clip(var, 0.0, None))
    return vwap, sigma


def _vwap(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    vwap, _ = vwap_and_sigma(bars)
    return PanelResult(label="VWAP", is_overlay=True, lines=[Line(vwap, colors.ORANGE, width=2.0, label="VWAP")])


def _vwap_bands(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    vwap, sigma = vwap_and_sigma(bars)
    k = params["std_dev"]
    upper, lower = vwap + k * sigma, vwap - k * sigma
    return PanelResult(
        label="VWAP Bands",
        is_overlay=True,
        lines=[
            Line(upper, colors.LIGHT_BLUE, label="VWAP Upper"),
            Line(vwap, colors.ORANGE, width=2.0, label="VWAP"),
            Line(lower, colors.LIGHT_BLUE, label="VWAP Lower"),
        ],
        fills=[Fill(upper, lower, colors.LIGHT_BLUE, alpha=0.07)],
    )


_ANCHOR = "Sessions restart at 00:00 UTC when bars carry real times; sample data (no times) is one session."

VWAP = IndicatorDef(
    name="vwap",
    kind="overlay",
    description=(
        "Volume Weighted Average Price — the session's average traded price. Formula: VWAP = Σ(TP·V)/ΣV "
        f"over the session so far, TP = (high+low+close)/3. {_ANCHOR}"
    ),
    compute=_vwap,
    warmup=session_warmup,
)

VWAP_BANDS = IndicatorDef(
    name="vwap_bands",
    kind="overlay",
    description=(
        "VWAP Bands — standard-deviation bands around the session VWAP. Formula: Upper/Lower = VWAP ± "
        f"std_dev · σ, σ² = Σ(TP²·V)/ΣV − VWAP² over the session. {_ANCHOR}"
    ),
    compute=_vwap_bands,
    warmup=session_warmup,
    params=(
        Param(
            "std_dev",
            "number",
            2.0,
            "band width in standard deviations",
            minimum=0,
            exclusive_minimum=True,
            maximum=100,
        ),
    ),
)
