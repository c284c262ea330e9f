"""Volume-flow panels: On-Balance Volume, Accumulation/Distribution, Chaikin Money Flow, CVD.

All four weight volume by where or whether price moved.  Bars with no range (high == low)
contribute nothing to the close-location based ones instead of dividing by zero.
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import HLine, Line, PanelResult
from engine.indicators.params import period
from engine.indicators.primitives import nans, rolling_sum, safe_div


def _money_flow_volume(bars: Bars) -> FloatArray:
    """Volume · close location value, CLV = ((close − low) − (high − close)) / (high − low), 0 on flat bars."""
    clv = safe_div((bars.close - bars.low) - (bars.high - bars.close), bars.high - bars.low, fill=0.0)
    return clv * bars.volume


def _single(
    label: str, y: FloatArray, color: str, zero_line: bool = False, y_range: tuple[float, float] | None = None
) -> PanelResult:
    return PanelResult(
        label=label,
        is_overlay=False,
        lines=[Line(y, color, label=label)],
        hlines=[HLine(0.0, colors.GREY)] if zero_line else [],
        y_range=y_range,
    )


# --- OBV ---------------------------------------------------------------------------------


def _obv(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    close, volume = bars.close, bars.volume
    step = np.empty(len(close))
    if len(close):
        step[0] = volume[0]
        step[1:] = np.sign(close[1:] - close[:-1]) * volume[1:]
    return _single("OBV", np.cumsum(step), colors.BLUE)


OBV = IndicatorDef(
    name="obv",
    kind="panel",
    description=(
        "On-Balance Volume — cumulative volume flow. Formula: OBV[0] = volume[0]; OBV += volume when "
        "close rises, −= volume when it falls, unchanged when it is equal."
    ),
    compute=_obv,
)


# --- A/D ---------------------------------------------------------------------------------


def _ad(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    return _single("A/D", np.cumsum(_money_flow_volume(bars)), colors.TEAL)


AD = IndicatorDef(
    name="ad",
    kind="panel",
    description=(
        "Accumulation/Distribution Line — volume flow weighted by the close's place in the bar. "
        "Formula: A/D = Σ volume · ((close − low) − (high − close)) / (high − low), a bar with "
        "high = low adding 0."
    ),
    compute=_ad,
    aliases=("ad_line",),
)


# --- CMF ---------------------------------------------------------------------------------


def _cmf(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    out = nans(len(bars))
    if len(bars) >= n:
        out = safe_div(rolling_sum(_money_flow_volume(bars), n), rolling_sum(bars.volume, n))
    return _single("CMF", out, colors.CYAN, zero_line=True, y_range=(-1.0, 1.0))


CMF = IndicatorDef(
    name="cmf",
    kind="panel",
    description=(
        "Chaikin Money Flow — buying/selling pressure (−1..1). Formula: CMF = Σ(volume · CLV) / "
        "Σ volume over n bars, CLV = ((close − low) − (high − close)) / (high − low) (0 when high = "
        "low); first value at bar n−1, NaN while the window has no volume."
    ),
    compute=_cmf,
    warmup=wu.Rule("window", ("period",)),
    params=(period("period", 20, "look-back in bars"),),
)


# --- CVD ---------------------------------------------------------------------------------


def _cvd(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    return _single("CVD", np.cumsum(_money_flow_volume(bars)), colors.LIME, zero_line=True)


CVD = IndicatorDef(
    name="cvd",
    kind="panel",
    description=(
        "Cumulative Volume Delta — buy vs sell pressure, estimated from OHLCV bars (no taker split "
        "needed). Formula: delta = volume · ((close − low) − (high − close)) / (high − low) (0 when "
        "high = low); CVD = Σ delta from the first bar of the window."
    ),
    compute=_cvd,
)
