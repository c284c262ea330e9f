"""Wilder's Average Directional Index panel with its +DI and −DI lines (TA-Lib backed)."""

from __future__ import annotations

import numpy as np
import talib

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import HLine, Line, PanelResult
from engine.indicators.params import period
from engine.indicators.primitives import nans


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    size = len(bars)
    if size > n:
        h, lo, c = (np.ascontiguousarray(a, dtype=np.float64) for a in (bars.high, bars.low, bars.close))
        plus = talib.PLUS_DI(h, lo, c, timeperiod=n)
        minus = talib.MINUS_DI(h, lo, c, timeperiod=n)
        adx = talib.ADX(h, lo, c, timeperiod=n) if size >= 2 * n else nans(size)
    else:
        plus, minus, adx = nans(size), nans(size), nans(size)
    return PanelResult(
        label="ADX",
        is_overlay=False,
        lines=[
            Line(adx, colors.WHITE, width=2.0, label="ADX"),
            Line(plus, colors.UP, label="+DI"),
            Line(minus, colors.DOWN, label="-DI"),
        ],
        hlines=[HLine(25.0, colors.GREY)],
        y_range=(0.0, 100.0),
    )


ADX = IndicatorDef(
    name="adx",
    kind="panel",
    description=(
        "Average Directional Index — trend strength with +DI/-DI (Wilder). Formula: +DM = up-move "
        "if it exceeds the down-move and is > 0, −DM likewise; +DI = 100·RMA(+DM,n)/ATR(n), "
        "−DI = 100·RMA(−DM,n)/ATR(n); DX = 100·|+DI − −DI|/(+DI + −DI); ADX = RMA(DX, n). "
        "Wilder smoothing (α=1/n); DI from bar n, ADX from bar 2n−1."
    ),
    compute=_compute,
    warmup=wu.Rule("rma", ("period", "period")),  # DI, then ADX = RMA(DX)
    params=(period("period", 14, "Wilder smoothing length in bars"),),
)
