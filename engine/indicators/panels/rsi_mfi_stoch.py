"""RSI + MFI + Stochastic combo panel (all on 0-100) with entry dots and a trend band."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Dot, Histogram, HLine, Line, PanelResult
from engine.indicators.newest import Newest, crossed_over, crossed_under, values_of
from engine.indicators.panels.oscillators import money_flow_index
from engine.indicators.params import IndicatorParamError, Param, period
from engine.indicators.primitives import crossover, crossunder, highest, lowest, rsi, sma

SIGNALS = ("rsi_oversold", "rsi_overbought", "stoch_oversold", "stoch_overbought")


def slow_stochastic(bars: Bars, k_len: int, smooth: int, d_len: int) -> tuple[FloatArray, FloatArray]:
    """(K, D): fast %K over k_len smoothed by SMA(smooth); D = SMA(K, d_len); fast %K = 50 on a flat range."""
    hh, ll = highest(bars.high, k_len), lowest(bars.low, k_len)
    rng = hh - ll
    with np.errstate(invalid="ignore", divide="ignore"):
        fast = np.where(rng > 0, 100.0 * (bars.close - ll) / np.where(rng > 0, rng, 1.0), 50.0)
    fast[np.isnan(rng)] = np.nan
    k = sma(fast, smooth)
    return k, sma(k, d_len)


def _level_crosses(x: FloatArray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Bars where ``x`` crosses up through ``level`` and down through it."""
    flat = np.full(len(x), level)
    return np.flatnonzero(crossover(x, flat)), np.flatnonzero(crossunder(x, flat))


def _check_levels(p: Params) -> None:
    if p["oversold"] >= p["overbought"]:
        raise IndicatorParamError("rsi_mfi_stoch: parameter 'oversold' must be below 'overbought'")


def _compute(bars: Bars, p: Params, ctx: ComputeContext) -> PanelResult:
    _check_levels(p)
    r = rsi(bars.close, p["rsi_length"])
    m = money_flow_index(bars, p["mfi_length"])
    k, d = slow_stochastic(bars, p["stoch_k"], p["stoch_smooth"], p["stoch_d"])
    dots: list[Dot] = []
    if p["show_entry_dots"]:
        up_os, _ = _level_crosses(r, p["oversold"])
        _, down_ob = _level_crosses(r, p["overbought"])
        dots += [Dot(i, float(r[i]), colors.UP, 5.0, "rsi_oversold") for i in up_os.tolist()]
        dots += [Dot(i, float(r[i]), colors.DOWN, 5.0, "rsi_overbought") for i in down_ob.tolist()]
        with np.errstate(invalid="ignore"):
            k_up = crossover(k, d) & (k < 20)
            k_down = crossunder(k, d) & (k > 80)
        dots += [Dot(i, float(k[i]), colors.LIME, 4.0, "stoch_oversold") for i in np.flatnonzero(k_up).tolist()]
        dots += [Dot(i, float(k[i]), colors.PINK, 4.0, "stoch_overbought") for i in np.flatnonzero(k_down).tolist()]
        dots.sort(key=lambda dot: dot.x)
    histograms = []
    if p["show_trend_bars"]:
        with np.errstate(invalid="ignore"):
            bull = (r > 50) & (m > 50) & (k > 50)
            bear = (r < 50) & (m < 50) & (k < 50)
        band_colors = np.where(bull, colors.UP, np.where(bear, colors.DOWN, colors.DARK_GREY)).tolist()
        ready = np.isfinite(r) & np.isfinite(m) & np.isfinite(k)
        histograms.append(Histogram(np.where(ready, 5.0, np.nan), band_colors))
    return PanelResult(
        label="RSI/MFI/Stoch",
        is_overlay=False,
        lines=[
            Line(r, colors.PURPLE, label="RSI"),
            Line(m, colors.GOLD, width=1.0, label="MFI"),
            Line(k, colors.CYAN, width=1.0, label="Stoch K"),
            Line(d, colors.ORANGE, width=1.0, label="Stoch D"),
        ],
        histograms=histograms,
        dots=dots,
        hlines=[HLine(p["overbought"], colors.DOWN), HLine(50.0, colors.GREY), HLine(p["oversold"], colors.UP)],
        y_range=(0.0, 100.0),
    )


def _newest(bars: Bars, p: Params) -> Newest:
    """The newest bar: the same four lines as _compute, the entry rules at the last index only."""
    _check_levels(p)
    r = rsi(bars.close, p["rsi_length"])
    m = money_flow_index(bars, p["mfi_length"])
    k, d = slow_stochastic(bars, p["stoch_k"], p["stoch_smooth"], p["stoch_d"])
    values = values_of(("RSI", "MFI", "Stoch K", "Stoch D"), (r, m, k, d))
    i = len(bars) - 1
    if not p["show_entry_dots"] or i < 1:
        return Newest(values, ())
    signals: list[tuple[str, float]] = []
    lo, hi = p["oversold"], p["overbought"]
    if r[i] > lo and r[i - 1] <= lo:
        signals.append(("rsi_oversold", float(r[i])))
    if r[i] < hi and r[i - 1] >= hi:
        signals.append(("rsi_overbought", float(r[i])))
    if crossed_over(k, d, i) and k[i] < 20:
        signals.append(("stoch_oversold", float(k[i])))
    if crossed_under(k, d, i) and k[i] > 80:
        signals.append(("stoch_overbought", float(k[i])))
    return Newest(values, tuple((label, v) for label, v in signals if np.isfinite(v)))


def _warmup(p: Params, interval: str) -> int:
    stoch = wu.window(p["stoch_k"]) + wu.window(p["stoch_smooth"]) + wu.window(p["stoch_d"])
    return max(wu.rma(p["rsi_length"]), p["mfi_length"], stoch)


def _level(name: str, default: float, text: str) -> Param:
    return Param(name, "number", default, text, minimum=0, maximum=100)


RSI_MFI_STOCH = IndicatorDef(
    name="rsi_mfi_stoch",
    kind="panel",
    description=(
        "RSI + Money Flow Index + Stochastic combo panel (all 0-100). Formula: RSI(rsi_length) Wilder; "
        "MFI(mfi_length) = 100·Σ positive flow / Σ flow of typical price × volume; Stoch K = SMA(fast %K over "
        "stoch_k, stoch_smooth), D = SMA(K, stoch_d). Signals: rsi_oversold when RSI crosses up through "
        "`oversold`, rsi_overbought when it crosses down through `overbought`, stoch_oversold when K crosses "
        "above D below 20, stoch_overbought when K crosses below D above 80. Trend bars: green when all "
        "three are above 50, red when all are below."
    ),
    compute=_compute,
    warmup=_warmup,
    newest=_newest,
    params=(
        period("rsi_length", 14, "RSI length"),
        period("mfi_length", 14, "MFI length"),
        period("stoch_k", 14, "stochastic look-back"),
        period("stoch_d", 3, "%D smoothing"),
        period("stoch_smooth", 3, "%K smoothing"),
        _level("overbought", 70.0, "overbought level"),
        _level("oversold", 30.0, "oversold level"),
        Param("show_entry_dots", "boolean", True, "emit the entry signals"),
        Param("show_trend_bars", "boolean", True, "draw the trend band"),
    ),
    aliases=("rsi_combo", "combo"),
    signals=SIGNALS,
)
