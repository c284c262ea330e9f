"""Bounded momentum oscillators: RSI, slow Stochastic, CCI, ROC, MFI and Williams %R.

Each is a single-line panel with chartgen's labels, reference levels and y-range
(contract §3.4) and the standard math (design.md §5): Wilder RSI, %D = SMA of %K, CCI on
the mean deviation of typical price.  None of them emits signals.
"""

from __future__ import annotations

import numpy as np
import talib

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.incremental import RsiState
from engine.indicators.model import Fill, HLine, Line, PanelResult
from engine.indicators.newest import Newest, values_of
from engine.indicators.params import period
from engine.indicators.primitives import highest, lowest, nans, rolling_sum, rsi, safe_div, sma


def _panel(
    label: str,
    lines: list[Line],
    levels: tuple[float, ...],
    y_range: tuple[float, float] | None = None,
    fills: list[Fill] | None = None,
) -> PanelResult:
    return PanelResult(
        label=label,
        is_overlay=False,
        lines=lines,
        fills=fills or [],
        hlines=[HLine(y, colors.GREY) for y in levels],
        y_range=y_range,
    )


def _channel(bars: Bars, n: int) -> tuple[FloatArray, FloatArray]:
    """Highest high and lowest low over ``n`` bars (NaN for the first n−1)."""
    return highest(bars.high, n), lowest(bars.low, n)


# --- RSI -------------------------------------------------------------------------------


def _rsi_newest(bars: Bars, params: Params) -> Newest:
    return Newest(values_of(("RSI",), (rsi(bars.close, params["length"]),)), ())


def _rsi(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    return _panel(
        "RSI", [Line(rsi(bars.close, params["length"]), colors.PURPLE, label="RSI")], (70.0, 30.0, 50.0), (0.0, 100.0)
    )


RSI = IndicatorDef(
    name="rsi",
    kind="panel",
    description=(
        "Relative Strength Index — momentum oscillator (0-100). Formula: RSI = 100 − 100/(1 + "
        "RMA(gain,n)/RMA(loss,n)) on close-to-close changes, Wilder smoothing (α=1/n) seeded with "
        "the simple average of the first n changes; first value at bar n."
    ),
    compute=_rsi,
    warmup=wu.Rule("rma", ("length",)),
    newest=_rsi_newest,
    incremental=RsiState,
    params=(period("length", 14, "RSI length in bars"),),
)


# --- Stochastic --------------------------------------------------------------------------


def _stoch(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    hh, ll = _channel(bars, params["period"])
    rng = hh - ll
    fast_k = safe_div(100.0 * (bars.close - ll), rng, fill=50.0)
    fast_k[np.isnan(rng)] = np.nan
    k = sma(fast_k, params["k_smooth"])
    d = sma(k, params["d_smooth"])
    return _panel(
        "Stoch",
        [Line(k, colors.BLUE, label="%K"), Line(d, colors.ORANGE, label="%D")],
        (80.0, 20.0),
        (0.0, 100.0),
        fills=[Fill(k, d, colors.BLUE, alpha=0.1)],
    )


STOCH = IndicatorDef(
    name="stoch",
    kind="panel",
    description=(
        "Slow Stochastic — overbought/oversold oscillator (0-100). Formula: fast %K = 100·(close − "
        "lowest low)/(highest high − lowest low) over period bars (50 when the range is 0); "
        "%K = SMA(fast %K, k_smooth); %D = SMA(%K, d_smooth)."
    ),
    compute=_stoch,
    warmup=wu.Rule("window", ("period", "k_smooth", "d_smooth")),
    params=(
        period("period", 14, "look-back for the highest high / lowest low"),
        period("k_smooth", 3, "SMA length smoothing fast %K into %K"),
        period("d_smooth", 3, "SMA length of %D over %K"),
    ),
    aliases=("stochastic",),
)


# --- CCI ---------------------------------------------------------------------------------


def _cci(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    if len(bars) < n:
        out = nans(len(bars))
    else:
        h, lo, c = (np.ascontiguousarray(a, dtype=np.float64) for a in (bars.high, bars.low, bars.close))
        out = talib.CCI(h, lo, c, timeperiod=n)
    return _panel("CCI", [Line(out, colors.CYAN, label="CCI")], (100.0, -100.0), (-250.0, 250.0))


CCI = IndicatorDef(
    name="cci",
    kind="panel",
    description=(
        "Commodity Channel Index — cyclical momentum. Formula: TP = (high+low+close)/3; "
        "CCI = (TP − SMA(TP,n)) / (0.015 · mean absolute deviation of TP from SMA(TP,n) over n bars); "
        "0 when that deviation is 0; first value at bar n−1."
    ),
    compute=_cci,
    warmup=wu.Rule("window", ("period",)),
    params=(period("period", 20, "look-back in bars", minimum=2),),
)


# --- ROC ---------------------------------------------------------------------------------


def _roc(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    close = bars.close
    out = nans(len(close))
    if len(close) > n:
        out[n:] = 100.0 * safe_div(close[n:] - close[:-n], close[:-n])
    return _panel("ROC", [Line(out, colors.TEAL, label="ROC")], (0.0,))


ROC = IndicatorDef(
    name="roc",
    kind="panel",
    description=(
        "Rate of Change — momentum percentage. Formula: ROC = 100 · (close − close[n bars ago]) / "
        "close[n bars ago]; first value at bar n (NaN where the old close is 0)."
    ),
    compute=_roc,
    warmup=wu.Rule("bars", ("period",)),
    params=(period("period", 14, "look-back in bars"),),
)


# --- MFI ---------------------------------------------------------------------------------


def money_flow_index(bars: Bars, n: int) -> FloatArray:
    """MFI over ``n`` bars (NaN for the first n); 50 where there was no money flow at all."""
    size = len(bars)
    out = nans(size)
    if size > n:
        tp = bars.hlc3
        flow = tp * bars.volume
        change = np.diff(tp)
        pos = rolling_sum(np.where(change > 0, flow[1:], 0.0), n)
        neg = rolling_sum(np.where(change < 0, flow[1:], 0.0), n)
        out[1:] = safe_div(100.0 * pos, pos + neg, fill=50.0)
        out[:n] = np.nan
    return out


def _mfi(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    out = money_flow_index(bars, params["period"])
    return _panel("MFI", [Line(out, colors.GOLD, label="MFI")], (80.0, 20.0), (0.0, 100.0))


MFI = IndicatorDef(
    name="mfi",
    kind="panel",
    description=(
        "Money Flow Index — volume-weighted RSI (0-100). Formula: TP = (high+low+close)/3, raw flow "
        "= TP·volume, counted as positive when TP rises and negative when it falls; MFI = 100·Σpos/"
        "(Σpos + Σneg) over the last n bars (50 when both are 0); first value at bar n."
    ),
    compute=_mfi,
    warmup=wu.Rule("bars", ("period",)),
    params=(period("period", 14, "look-back in bars"),),
)


# --- Williams %R -------------------------------------------------------------------------


def _willr(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    hh, ll = _channel(bars, n)
    out = safe_div(-100.0 * (hh - bars.close), hh - ll, fill=0.0)
    out[np.isnan(hh)] = np.nan
    return _panel("W%R", [Line(out, colors.PINK, label="%R")], (-20.0, -80.0), (-100.0, 0.0))


WILLIAMS_R = IndicatorDef(
    name="williams_r",
    kind="panel",
    description=(
        "Williams %R — momentum reversal indicator (−100..0). Formula: %R = −100 · (highest high − "
        "close) / (highest high − lowest low) over n bars (0 when the range is 0); first value at bar n−1."
    ),
    compute=_willr,
    warmup=wu.Rule("window", ("period",)),
    params=(period("period", 14, "look-back in bars"),),
    aliases=("willr",),
)
