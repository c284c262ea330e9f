"""Parabolic SAR overlay (Wilder): a stop-and-reverse dot per bar, with flip signals."""

from __future__ import annotations

import numpy as np
import talib

from engine.bars import Bars
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import PanelResult
from engine.indicators.newest import Newest
from engine.indicators.overlays.trend_dots import FLIP_SIGNALS, trend_dots, trend_newest
from engine.indicators.params import IndicatorParamError, Param


def parabolic_sar(bars: Bars, af_start: float, af_step: float, af_max: float) -> tuple[np.ndarray, np.ndarray]:
    """(sar, up) — Wilder's SAR via TA-Lib's SAREXT (negative values there mean a short position)."""
    n = len(bars)
    if n < 2:
        return np.full(n, np.nan), np.zeros(n, dtype=bool)
    raw = talib.SAREXT(
        np.ascontiguousarray(bars.high, dtype=np.float64),
        np.ascontiguousarray(bars.low, dtype=np.float64),
        accelerationinitlong=af_start,
        accelerationlong=af_step,
        accelerationmaxlong=af_max,
        accelerationinitshort=af_start,
        accelerationshort=af_step,
        accelerationmaxshort=af_max,
    )
    with np.errstate(invalid="ignore"):
        up = raw > 0
    return np.abs(raw), up


def _checked(bars: Bars, params: Params) -> tuple[np.ndarray, np.ndarray]:
    if params["af_max"] < params["af_start"]:
        raise IndicatorParamError("sar: parameter 'af_max' must be ≥ af_start")
    return parabolic_sar(bars, params["af_start"], params["af_step"], params["af_max"])


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    sar, up = _checked(bars, params)
    return trend_dots("SAR", sar, up, size=2.5)


def _newest(bars: Bars, params: Params) -> Newest:
    return trend_newest(*_checked(bars, params))


def _af(name: str, default: float, text: str) -> Param:
    return Param(name, "number", default, text, minimum=0, exclusive_minimum=True, maximum=1)


SAR = IndicatorDef(
    name="sar",
    kind="overlay",
    description=(
        "Parabolic SAR — trailing stop and trend reversal (Wilder). Formula: SAR[t+1] = SAR[t] + "
        "AF·(EP − SAR[t]), EP the extreme price of the trend, AF starting at af_start, growing by af_step "
        "at each new extreme up to af_max; the SAR never enters the previous two bars' range and flips to "
        "the other side when price crosses it (signals flip_up / flip_down)."
    ),
    compute=_compute,
    newest=_newest,
    warmup=wu.Rule("bars", extra=wu.STATE_SETTLE),
    params=(
        _af("af_start", 0.02, "initial acceleration factor"),
        _af("af_step", 0.02, "acceleration increment at each new extreme"),
        _af("af_max", 0.2, "maximum acceleration factor"),
    ),
    aliases=("parabolic_sar", "psar"),
    signals=FLIP_SIGNALS,
)
