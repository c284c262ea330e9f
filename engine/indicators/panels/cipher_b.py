"""Market Cipher B: WaveTrend with RSI, Stoch RSI, an RSI+MFI colour band and divergences.

Signals (alert labels): buy/sell and buy_small/sell_small on WT crosses, rsi_oversold /
rsi_overbought when RSI enters its zone, wt_bull_div / wt_bear_div with any_* companions at
WT2 fractal divergences, and gold_buy.  Fractal-based signals are drawn at the fractal
centre and confirmed two bars later (``Dot.confirmed_at``), which is when an alert fires.
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import DivLine, Dot, Fill, Histogram, HLine, Line, PanelResult
from engine.indicators.newest import EMPTY, Newest, crossed_over, crossed_under, fractal_at, previous_fractal, values_of
from engine.indicators.panels.fractals import divergences
from engine.indicators.panels.wavetrend import wavetrend_core, wavetrend_warmup
from engine.indicators.params import Param, period
from engine.indicators.primitives import crossover, crossunder, highest, lowest, rsi, sma

Y_RANGE = (-105.0, 105.0)
SIGNALS = (
    "buy",
    "sell",
    "buy_small",
    "sell_small",
    "rsi_oversold",
    "rsi_overbought",
    "wt_bull_div",
    "wt_bear_div",
    "any_bull_div",
    "any_bear_div",
    "gold_buy",
)
RSI_OS, RSI_OB = 30.0, 70.0
BEAR_DIV_MIN, BULL_DIV_MAX = 15.0, -40.0  # signal thresholds (chartgen's second pass)
BEAR_LINE_MIN, BULL_LINE_MAX = 45.0, -65.0  # divergence lines (chartgen's first pass)
GOLD_LEVEL = -75.0


def stoch_rsi(close: FloatArray, n: int = 14) -> tuple[FloatArray, FloatArray]:
    """(K, D): stochastic of RSI(ln close) over n bars, K = SMA 3, D = SMA(K, 3)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logc = np.where(close > 0, np.log(np.where(close > 0, close, 1.0)), np.nan)
    r = rsi(logc, n)
    hi, lo = highest(r, n), lowest(r, n)
    rng = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = np.where(rng > 0, 100.0 * (r - lo) / np.where(rng > 0, rng, 1.0), 0.0)
    raw[np.isnan(rng)] = np.nan
    k = sma(raw, 3)
    return k, sma(k, 3)


def rsi_mfi_band(bars: Bars) -> FloatArray:
    """SMA60 of (C−O)/(H−L)·150 minus 2.5: positive is buying pressure."""
    rng = bars.high - bars.low
    with np.errstate(invalid="ignore", divide="ignore"):
        body = np.where(rng > 0, (bars.close - bars.open) / np.where(rng > 0, rng, 1.0) * 150.0, 0.0)
    return sma(body, 60) - 2.5


def _warmup(p: Params, interval: str) -> int:
    """The max over its parts: WaveTrend, RSI 14, Stoch RSI (RSI, 14-bar range, two SMA 3), the SMA60 band."""
    stoch = wu.rma(14) + wu.window(14) + 2 * wu.window(3)
    return max(wavetrend_warmup(p["wt_channel_length"], p["wt_average_length"]), wu.rma(14), stoch, wu.window(60))


def _dot(i: int, y: float, color: str, label: str, size: float = 5.0, confirmed_at: int | None = None) -> Dot:
    return Dot(i, y, color, size=size, label=label, confirmed_at=confirmed_at)


def _cross_signals(wt1: FloatArray, wt2: FloatArray, r: FloatArray, k: FloatArray, p: Params) -> list[Dot]:
    strict = p["dot_mode"] == "strict"
    os_, ob = p["wt_oversold"], p["wt_overbought"]
    dots: list[Dot] = []
    for i in np.flatnonzero(crossover(wt1, wt2)).tolist():
        zone = wt2[i] <= os_
        if zone and (not strict or (r[i] < 30 and k[i] < 20)):
            dots.append(_dot(i, float(wt2[i]), colors.UP, "buy", 7.0))
        elif not strict or r[i] < 40:
            dots.append(_dot(i, float(wt2[i]), colors.LIME, "buy_small", 4.0))
    for i in np.flatnonzero(crossunder(wt1, wt2)).tolist():
        zone = wt2[i] >= ob
        if zone and (not strict or (r[i] > 70 and k[i] > 80)):
            dots.append(_dot(i, float(wt2[i]), colors.DOWN, "sell", 7.0))
        elif not strict or r[i] > 60:
            dots.append(_dot(i, float(wt2[i]), colors.PINK, "sell_small", 4.0))
    return dots


def _rsi_zone_signals(r: FloatArray) -> list[Dot]:
    n = len(r)
    if n < 2:
        return []
    with np.errstate(invalid="ignore"):
        enter_os = np.flatnonzero((r[1:] <= RSI_OS) & (r[:-1] > RSI_OS)) + 1
        enter_ob = np.flatnonzero((r[1:] >= RSI_OB) & (r[:-1] < RSI_OB)) + 1
    dots = [_dot(i, float(r[i]), colors.UP, "rsi_oversold", 3.0) for i in enter_os.tolist()]
    dots += [_dot(i, float(r[i]), colors.DOWN, "rsi_overbought", 3.0) for i in enter_ob.tolist()]
    return dots


def _divergence_signals(
    wt2: FloatArray, bars: Bars, r: FloatArray, show_lines: bool
) -> tuple[list[Dot], list[DivLine]]:
    dots: list[Dot] = []
    lines: list[DivLine] = []
    for d in divergences(wt2, bars.high, bars.low, bear_min=BEAR_DIV_MIN, bull_max=BULL_DIV_MAX):
        c, confirm = d.centre, d.centre + 2
        y = float(wt2[c])
        if d.bullish:
            dots.append(_dot(c, y, colors.UP, "wt_bull_div", 5.0, confirm))
            dots.append(_dot(c, -95.0, colors.UP, "any_bull_div", 4.0, confirm))
            prev = float(wt2[d.previous])
            if prev <= GOLD_LEVEL and y > GOLD_LEVEL and prev - y <= -5.0 and r[c] < RSI_OS:
                dots.append(_dot(c, y, colors.GOLD, "gold_buy", 9.0, confirm))
            if show_lines and y <= BULL_LINE_MAX:
                lines.append(DivLine(d.previous, prev, c, y, colors.UP))
        else:
            dots.append(_dot(c, y, colors.DOWN, "wt_bear_div", 5.0, confirm))
            dots.append(_dot(c, 95.0, colors.DOWN, "any_bear_div", 4.0, confirm))
            if show_lines and y >= BEAR_LINE_MIN:
                lines.append(DivLine(d.previous, float(wt2[d.previous]), c, y, colors.DOWN))
    return dots, lines


def _compute(bars: Bars, p: Params, ctx: ComputeContext) -> PanelResult:
    if len(bars) < 5:
        return PanelResult(label="Cipher B", is_overlay=False, y_range=Y_RANGE)
    wt1, wt2 = wavetrend_core(bars, p["wt_channel_length"], p["wt_average_length"])
    r = rsi(bars.close, 14)
    k, d = stoch_rsi(bars.close, 14)
    band = rsi_mfi_band(bars)
    with np.errstate(invalid="ignore"):
        band_colors = np.where(band > 0, colors.UP, colors.DOWN).tolist()
    bar_y = np.where(np.isfinite(band), 6.0, np.nan)
    dots = _cross_signals(wt1, wt2, r, k, p) + _rsi_zone_signals(r)
    div_dots, div_lines = _divergence_signals(wt2, bars, r, p["show_divergences"])
    dots += div_dots
    dots.sort(key=lambda dot: dot.confirmed_index)
    return PanelResult(
        label="Cipher B",
        is_overlay=False,
        lines=[
            Line(wt1, colors.LIGHT_BLUE, label="WT1"),
            Line(wt2, colors.BLUE, label="WT2"),
            Line(r, colors.PURPLE, width=1.0, label="RSI"),
            Line(k, colors.CYAN, width=1.0, label="Stoch K"),
            Line(d, colors.ORANGE, width=1.0, label="Stoch D"),
        ],
        fills=[
            Fill(wt1, wt2, colors.BLUE, alpha=0.25),
            Fill(wt1 - wt2, np.zeros(len(bars)), colors.PURPLE, alpha=0.3),
            Fill(k, d, colors.CYAN, alpha=0.1),
        ],
        histograms=[Histogram(bar_y, band_colors, bottom=-3.0)],
        dots=dots,
        hlines=[HLine(60.0, colors.DOWN), HLine(100.0, colors.RED), HLine(-60.0, colors.UP), HLine(0.0, colors.GREY)],
        divlines=div_lines,
        y_range=Y_RANGE,
    )


LINE_LABELS = ("WT1", "WT2", "RSI", "Stoch K", "Stoch D")


def _newest_divergence(wt2: FloatArray, bars: Bars, r: FloatArray, c: int) -> list[tuple[str, float]]:
    """The divergence signals confirmed two bars after fractal centre ``c`` (as _divergence_signals)."""
    kind = fractal_at(wt2, c)
    if kind == 0:
        return []
    prev = previous_fractal(wt2, c, kind)
    if prev is None:
        return []
    y, before = float(wt2[c]), float(wt2[prev])
    if kind > 0:
        if y >= BEAR_DIV_MIN and bars.high[c] > bars.high[prev] and y < before:
            return [("wt_bear_div", y), ("any_bear_div", 95.0)]
        return []
    if not (y <= BULL_DIV_MAX and bars.low[c] < bars.low[prev] and y > before):
        return []
    out = [("wt_bull_div", y), ("any_bull_div", -95.0)]
    if before <= GOLD_LEVEL and y > GOLD_LEVEL and before - y <= -5.0 and r[c] < RSI_OS:
        out.append(("gold_buy", y))
    return out


def _newest(bars: Bars, p: Params) -> Newest:
    """The newest bar: the same arrays as _compute, the signal rules at the last index only."""
    n = len(bars)
    if n < 5:
        return EMPTY
    wt1, wt2 = wavetrend_core(bars, p["wt_channel_length"], p["wt_average_length"])
    r = rsi(bars.close, 14)
    k, d = stoch_rsi(bars.close, 14)
    i = n - 1
    strict = p["dot_mode"] == "strict"
    signals: list[tuple[str, float]] = []
    if crossed_over(wt1, wt2, i):
        if wt2[i] <= p["wt_oversold"] and (not strict or (r[i] < 30 and k[i] < 20)):
            signals.append(("buy", float(wt2[i])))
        elif not strict or r[i] < 40:
            signals.append(("buy_small", float(wt2[i])))
    elif crossed_under(wt1, wt2, i):
        if wt2[i] >= p["wt_overbought"] and (not strict or (r[i] > 70 and k[i] > 80)):
            signals.append(("sell", float(wt2[i])))
        elif not strict or r[i] > 60:
            signals.append(("sell_small", float(wt2[i])))
    if r[i] <= RSI_OS and r[i - 1] > RSI_OS:
        signals.append(("rsi_oversold", float(r[i])))
    if r[i] >= RSI_OB and r[i - 1] < RSI_OB:
        signals.append(("rsi_overbought", float(r[i])))
    signals += _newest_divergence(wt2, bars, r, i - 2)
    signals = [(label, v) for label, v in signals if np.isfinite(v)]
    return Newest(values_of(LINE_LABELS, (wt1, wt2, r, k, d)), tuple(signals))


CIPHER_B = IndicatorDef(
    name="cipher_b",
    kind="panel",
    description=(
        "Market Cipher B — composite of WaveTrend, divergences, RSI, Stoch RSI and an RSI+MFI band. "
        "Formula: WT1/WT2 as wavetrend (channel wt_channel_length, average wt_average_length); RSI(14) "
        "Wilder; Stoch RSI = stochastic(14) of RSI(14) of ln(close), K = SMA 3, D = SMA(K, 3); band = "
        "SMA60((C−O)/(H−L)·150) − 2.5 (colour of the bars at the bottom). Signals: buy/sell on WT crosses in "
        "the oversold/overbought zone (strict mode also needs RSI < 30 and Stoch K < 20, or RSI > 70 and "
        "K > 80), buy_small/sell_small on other crosses (strict: RSI < 40 / > 60); rsi_oversold / "
        "rsi_overbought when RSI enters ≤ 30 / ≥ 70 (not on every bar in the zone); wt_bull_div / "
        "wt_bear_div (+ any_bull_div / any_bear_div) at 5-bar WT2 fractals where price and WT2 diverge "
        "(WT2 ≤ −40 / ≥ 15), confirmed two bars after the fractal; gold_buy: a bullish divergence from a "
        "previous WT2 low ≤ −75 to a higher low above −75 with RSI < 30."
    ),
    compute=_compute,
    warmup=_warmup,
    newest=_newest,
    params=(
        Param(
            "dot_mode",
            "string",
            "strict",
            "strict (RSI and Stoch RSI filters) or classic",
            choices=("strict", "classic"),
        ),
        period("wt_channel_length", 9, "WaveTrend channel EMA length"),
        period("wt_average_length", 12, "WaveTrend average EMA length"),
        Param("wt_oversold", "number", -53.0, "WT2 level of the oversold zone", minimum=-200, maximum=0),
        Param("wt_overbought", "number", 53.0, "WT2 level of the overbought zone", minimum=0, maximum=200),
        Param("show_divergences", "boolean", True, "draw divergence lines"),
    ),
    aliases=("cipher", "cb"),
    signals=SIGNALS,
)
