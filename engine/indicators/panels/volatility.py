"""Volatility panels: Wilder's Average True Range and annualised historical volatility.

Historical volatility annualises by the chart's interval (crypto trades 24/7, so a year is
365 days of bars); an interval we do not recognise falls back to 252 daily bars.
"""

from __future__ import annotations

import math

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Line, PanelResult
from engine.indicators.params import period
from engine.indicators.primitives import atr, nans, stdev

_DAY = 86_400.0
_YEAR = 365.0 * _DAY
_FALLBACK_BARS_PER_YEAR = 252.0

# bar length in seconds for Binance and chartgen/Yahoo spellings
_INTERVAL_SECONDS: dict[str, float] = {
    "1s": 1.0,
    "1m": 60.0,
    "1min": 60.0,
    "3m": 180.0,
    "5m": 300.0,
    "15m": 900.0,
    "30m": 1800.0,
    "1h": 3600.0,
    "60m": 3600.0,
    "2h": 7200.0,
    "4h": 14_400.0,
    "6h": 21_600.0,
    "8h": 28_800.0,
    "12h": 43_200.0,
    "1d": _DAY,
    "3d": 3 * _DAY,
    "1w": 7 * _DAY,
    "1wk": 7 * _DAY,
}
_MONTHLY = ("1M", "1mo")


def bars_per_year(interval: str | None) -> float:
    """How many bars of ``interval`` make a 365-day (24/7) year; 252 when unknown."""
    if interval in _MONTHLY:
        return 12.0
    seconds = _INTERVAL_SECONDS.get(interval or "")
    return _YEAR / seconds if seconds else _FALLBACK_BARS_PER_YEAR


# --- ATR ---------------------------------------------------------------------------------


def _atr(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    out = atr(bars.high, bars.low, bars.close, n) if len(bars) > n else nans(len(bars))
    return PanelResult(label="ATR", is_overlay=False, lines=[Line(out, colors.ORANGE, label="ATR")])


ATR = IndicatorDef(
    name="atr",
    kind="panel",
    description=(
        "Average True Range — volatility measure in price units. Formula: TR = max(high − low, "
        "|high − prev close|, |low − prev close|); ATR = RMA(TR, n), Wilder smoothing (α=1/n) seeded "
        "with the mean of the first n true ranges after bar 0; first value at bar n."
    ),
    compute=_atr,
    warmup=wu.Rule("rma", ("period",)),
    params=(period("period", 14, "smoothing length in bars"),),
)


# --- Historical volatility ---------------------------------------------------------------


def _log_returns(close: FloatArray) -> FloatArray:
    out = nans(len(close))
    if len(close) < 2:
        return out
    prev, cur = close[:-1], close[1:]
    ok = (prev > 0) & (cur > 0) & np.isfinite(prev) & np.isfinite(cur)
    np.log(cur / np.where(ok, prev, 1.0), out=out[1:], where=ok)
    return out


def _histvol(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    returns = _log_returns(bars.close)
    scale = 100.0 * math.sqrt(bars_per_year(ctx.interval))
    out = nans(len(bars))
    if len(bars) > n:
        out[1:] = stdev(returns[1:], n, ddof=1) * scale
    return PanelResult(label="HV", is_overlay=False, lines=[Line(out, colors.PURPLE, label="HV")])


HISTVOL = IndicatorDef(
    name="histvol",
    kind="panel",
    description=(
        "Historical Volatility — annualized log-return standard deviation, in percent. Formula: "
        "HV = sample stdev(ln(close/prev close), n) · √(bars per year) · 100, where bars per year "
        "counts a 365-day 24/7 year at the chart interval (1h → 8760, 4h → 2190, 1d → 365, "
        "1w → 52.14, 1M → 12) and is 252 for an unknown interval; first value at bar n."
    ),
    compute=_histvol,
    warmup=wu.Rule("bars", ("period",)),
    params=(period("period", 20, "number of log returns in the window", minimum=2),),
    aliases=("hv",),
)
