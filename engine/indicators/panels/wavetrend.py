"""WaveTrend oscillator panel (LazyBear's channel index), and its core reused by cipher_b."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Dot, Fill, HLine, Line, PanelResult
from engine.indicators.newest import Newest, crossed_over, crossed_under, values_of
from engine.indicators.params import period
from engine.indicators.primitives import crossover, crossunder, ema, sma

OB, OS = 53.0, -53.0
WT_SIGNALS = ("cross_up_os", "cross_down_ob", "cross_up", "cross_down")


def wavetrend_core(bars: Bars, channel: int, average: int) -> tuple[FloatArray, FloatArray]:
    """(WT1, WT2): ap = hlc3; esa = EMA(ap, ch); de = EMA(|ap−esa|, ch); ci = (ap−esa)/(0.015·de);
    WT1 = EMA(ci, avg); WT2 = SMA(WT1, 3).  ci is 0 where de is 0 (flat prices)."""
    ap = bars.hlc3
    esa = ema(ap, channel)
    de = ema(np.abs(ap - esa), channel)
    with np.errstate(divide="ignore", invalid="ignore"):
        ci = np.where(de > 0, (ap - esa) / (0.015 * de), 0.0)
    ci[np.isnan(de)] = np.nan
    wt1 = ema(ci, average)
    return wt1, sma(wt1, 3)


def wavetrend_warmup(channel: int, average: int) -> int:
    """esa and de (two chained channel EMAs), WT1 (an average EMA), WT2 (an SMA 3)."""
    return 2 * wu.ema(channel) + wu.ema(average) + wu.window(3)


def _warmup(p: Params, interval: str) -> int:
    return wavetrend_warmup(p["ch_len"], p["avg_len"])


def cross_dots(wt1: FloatArray, wt2: FloatArray, ob: float, os_: float) -> list[Dot]:
    """WT1/WT2 crosses: in the zones cross_up_os / cross_down_ob, elsewhere cross_up / cross_down."""
    dots: list[Dot] = []
    for i in np.flatnonzero(crossover(wt1, wt2)).tolist():
        label = "cross_up_os" if wt2[i] <= os_ else "cross_up"
        dots.append(Dot(i, float(wt2[i]), colors.UP, size=5.0, label=label))
    for i in np.flatnonzero(crossunder(wt1, wt2)).tolist():
        label = "cross_down_ob" if wt2[i] >= ob else "cross_down"
        dots.append(Dot(i, float(wt2[i]), colors.DOWN, size=5.0, label=label))
    dots.sort(key=lambda d: d.x)
    return dots


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    wt1, wt2 = wavetrend_core(bars, params["ch_len"], params["avg_len"])
    return PanelResult(
        label="WaveTrend",
        is_overlay=False,
        lines=[Line(wt1, colors.LIGHT_BLUE, label="WT1"), Line(wt2, colors.BLUE, label="WT2", dashed=True)],
        fills=[Fill(wt1, wt2, colors.BLUE, alpha=0.2), Fill(wt1 - wt2, np.zeros(len(bars)), colors.PURPLE, alpha=0.3)],
        dots=cross_dots(wt1, wt2, OB, OS),
        hlines=[HLine(OB, colors.DOWN), HLine(OS, colors.UP), HLine(0.0, colors.GREY)],
        y_range=(-105.0, 105.0),
    )


def _newest(bars: Bars, params: Params) -> Newest:
    """The newest bar: WT1/WT2 as _compute, the cross rules at the last index only."""
    wt1, wt2 = wavetrend_core(bars, params["ch_len"], params["avg_len"])
    i = len(bars) - 1
    signals: tuple[tuple[str, float], ...] = ()
    if crossed_over(wt1, wt2, i):
        signals = (("cross_up_os" if wt2[i] <= OS else "cross_up", float(wt2[i])),)
    elif crossed_under(wt1, wt2, i):
        signals = (("cross_down_ob" if wt2[i] >= OB else "cross_down", float(wt2[i])),)
    return Newest(values_of(("WT1", "WT2"), (wt1, wt2)), signals)


WAVETREND = IndicatorDef(
    name="wavetrend",
    kind="panel",
    description=(
        "WaveTrend Oscillator — cycle-based momentum. Formula: ap = (H+L+C)/3; esa = EMA(ap, ch_len); "
        "d = EMA(|ap − esa|, ch_len); ci = (ap − esa)/(0.015·d); WT1 = EMA(ci, avg_len); WT2 = SMA(WT1, 3). "
        "Signals on WT1/WT2 crosses: cross_up_os (up with WT2 ≤ −53), cross_down_ob (down with WT2 ≥ 53), "
        "else cross_up / cross_down."
    ),
    compute=_compute,
    warmup=_warmup,
    newest=_newest,
    params=(period("ch_len", 9, "channel EMA length"), period("avg_len", 12, "average EMA length")),
    aliases=("wt",),
    signals=WT_SIGNALS,
)
