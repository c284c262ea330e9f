"""Kalman Volume Filter: a volume zone oscillator smoothed by a constant-gain Kalman filter."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Dot, Fill, Histogram, HLine, PanelResult
from engine.indicators.newest import Newest, crossed_over, crossed_under
from engine.indicators.params import Param, period
from engine.indicators.primitives import crossover, crossunder, ema, safe_div, sma

ZONE = 0.6
Z_WINDOW = 200
Z_MIN = 20
SIGNALS = ("buy", "sell", "buy_oversold", "sell_overbought")


def kalman_smooth(x: FloatArray, gain: float) -> FloatArray:
    """x̂[t] = x̂[t−1] + gain·(x[t] − x̂[t−1]), starting at the first finite value."""
    out = np.full(len(x), np.nan)
    finite = np.flatnonzero(np.isfinite(x))
    if len(finite) == 0:
        return out
    start = int(finite[0])
    vals = x.tolist()
    est = vals[start]
    res = [est]
    for v in vals[start + 1 :]:
        if v == v:  # not NaN
            est += gain * (v - est)
        res.append(est)
    out[start:] = res
    return out


def _zscore(x: FloatArray) -> FloatArray:
    """x divided by its standard deviation over the last ≤ 200 bars (needs 20)."""
    n = len(x)
    out = np.full(n, np.nan)
    clean = np.where(np.isfinite(x), x, 0.0)
    c1 = np.cumsum(clean)
    c2 = np.cumsum(clean * clean)
    cnt = np.cumsum(np.isfinite(x))
    idx = np.arange(n)
    lo = idx - Z_WINDOW
    s1 = c1 - np.where(lo >= 0, c1[np.maximum(lo, 0)], 0.0)
    s2 = c2 - np.where(lo >= 0, c2[np.maximum(lo, 0)], 0.0)
    k = cnt - np.where(lo >= 0, cnt[np.maximum(lo, 0)], 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(k >= Z_MIN, s2 / np.maximum(k, 1) - (s1 / np.maximum(k, 1)) ** 2, np.nan)
    sd = np.sqrt(np.clip(var, 0.0, None))
    ok = np.isfinite(x) & (sd > 0)
    out[ok] = x[ok] / sd[ok]
    return np.clip(out, -2.5, 2.5)


def _warmup(p: Params, interval: str) -> int:
    """VZO's EMAs, the Kalman filter settling, the 200-bar z-score window and the signal SMA."""
    return wu.ema(p["vzo_length"]) + wu.smoothing(p["k"]) + wu.window(Z_WINDOW) + wu.window(p["sig_length"])


def _value_and_signal(bars: Bars, p: Params) -> tuple[FloatArray, FloatArray]:
    n = len(bars)
    length = p["vzo_length"]
    prev_close = np.concatenate(([np.nan], bars.close[:-1])) if n else np.zeros(0)
    with np.errstate(invalid="ignore"):
        direction = np.sign(bars.close - prev_close)
    signed = np.where(np.isfinite(direction), direction * bars.volume, np.nan)
    vzo = safe_div(ema(signed, length), ema(bars.volume, length), fill=0.0)
    vzo[np.isnan(ema(bars.volume, length))] = np.nan
    value = _zscore(kalman_smooth(vzo, p["k"]))
    return value, sma(value, p["sig_length"])


def _newest(bars: Bars, p: Params) -> Newest:
    """The newest bar: the same value and signal as _compute, the cross rules at the last index."""
    value, signal = _value_and_signal(bars, p)
    i = len(bars) - 1
    if crossed_over(value, signal, i):
        label = "buy_oversold" if value[i - 1] < -ZONE else "buy"
    elif crossed_under(value, signal, i):
        label = "sell_overbought" if value[i - 1] > ZONE else "sell"
    else:
        return Newest((), ())
    return Newest((), ((label, float(value[i])),))


def _compute(bars: Bars, p: Params, ctx: ComputeContext) -> PanelResult:
    n = len(bars)
    length = p["vzo_length"]
    value, signal = _value_and_signal(bars, p)
    dots = [Dot(i, float(value[i]), colors.WHITE, 1.5) for i in np.flatnonzero(np.isfinite(value)).tolist()]
    dots += [Dot(i, float(signal[i]), colors.ORANGE, 1.0) for i in np.flatnonzero(np.isfinite(signal)).tolist()]
    for i in np.flatnonzero(crossover(value, signal)).tolist():
        label = "buy_oversold" if value[i - 1] < -ZONE else "buy"
        dots.append(Dot(i, float(value[i]), colors.UP, 6.0, label))
    for i in np.flatnonzero(crossunder(value, signal)).tolist():
        label = "sell_overbought" if value[i - 1] > ZONE else "sell"
        dots.append(Dot(i, float(value[i]), colors.DOWN, 6.0, label))
    with np.errstate(invalid="ignore"):
        bull = np.where(value >= signal, value, np.nan)
        bear = np.where(value < signal, value, np.nan)
        vol_norm = np.clip(safe_div(bars.volume, 2.0 * sma(bars.volume, length)), 0.0, 2.0)
    full = np.ones(n)
    return PanelResult(
        label="KVF",
        is_overlay=False,
        fills=[
            Fill(bull, np.where(np.isfinite(bull), signal, np.nan), colors.UP, alpha=0.3),
            Fill(bear, np.where(np.isfinite(bear), signal, np.nan), colors.DOWN, alpha=0.3),
            Fill(2.0 * full, ZONE * full, colors.DOWN, alpha=0.06),
            Fill(-ZONE * full, -2.0 * full, colors.UP, alpha=0.06),
        ],
        histograms=[
            Histogram(vol_norm, [colors.DARK_GREY] * n),
            Histogram(-vol_norm, [colors.DARK_GREY] * n),
        ],
        dots=dots,
        hlines=[HLine(0.0, colors.GREY)],
        y_range=(-2.5, 2.5),
    )


KALMAN_VOLUME = IndicatorDef(
    name="kalman_volume",
    kind="panel",
    description=(
        "Kalman Volume Filter — smoothed volume zone oscillator. Formula: VZO = EMA(sign(ΔC)·V, vzo_length) / "
        "EMA(V, vzo_length); smoothed by a constant-gain Kalman filter x̂ += k·(VZO − x̂); normalised by its "
        "standard deviation over the last ≤ 200 bars (from 20 bars; clipped to ±2.5); signal = SMA(value, "
        "sig_length). Signals where value crosses its signal: up → buy_oversold if the previous value was "
        "below −0.6 else buy; down → sell_overbought if above 0.6 else sell."
    ),
    compute=_compute,
    warmup=_warmup,
    newest=_newest,
    params=(
        period("vzo_length", 70, "volume zone EMA length"),
        Param("k", "number", 0.06, "Kalman gain (0-1]", minimum=0, exclusive_minimum=True, maximum=1),
        period("sig_length", 10, "signal SMA length"),
    ),
    aliases=("kalman", "kvf"),
    signals=SIGNALS,
)
