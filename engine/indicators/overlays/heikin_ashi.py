"""Heikin-Ashi overlay: the smoothed candle close as dots, with colour-flip signals."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import PanelResult
from engine.indicators.newest import Newest
from engine.indicators.overlays.trend_dots import FLIP_SIGNALS, trend_dots, trend_newest


def heikin_ashi(bars: Bars) -> tuple[np.ndarray, np.ndarray]:
    """(HA open, HA close)."""
    n = len(bars)
    ha_close = (bars.open + bars.high + bars.low + bars.close) / 4.0
    ha_open = np.empty(n)
    if n:
        closes = ha_close.tolist()
        prev = (float(bars.open[0]) + float(bars.close[0])) / 2.0
        out = [prev]
        for i in range(1, n):
            prev = (prev + closes[i - 1]) / 2.0
            out.append(prev)
        ha_open[:] = out
    return ha_open, ha_close


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    ha_open, ha_close = heikin_ashi(bars)
    return trend_dots("HA", ha_close, ha_close >= ha_open)


def _newest(bars: Bars, params: Params) -> Newest:
    ha_open, ha_close = heikin_ashi(bars)
    return trend_newest(ha_close, ha_close >= ha_open)


HEIKIN_ASHI = IndicatorDef(
    name="heikin_ashi",
    kind="overlay",
    description=(
        "Heikin Ashi — smoothed trend candles, drawn as dots at the HA close. Formula: HA close = "
        "(O+H+L+C)/4; HA open = (HA open[−1] + HA close[−1])/2, first = (O+C)/2; a bar is bullish when "
        "HA close ≥ HA open; flip_up / flip_down mark colour changes."
    ),
    compute=_compute,
    newest=_newest,
    warmup=wu.Rule("bars", extra=wu.smoothing(0.5)),  # HA open halves the distance each bar
    aliases=("ha",),
    signals=FLIP_SIGNALS,
)
