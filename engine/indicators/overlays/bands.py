"""Channel overlays: Bollinger Bands, Keltner Channels and Donchian Channels."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.incremental import BollingerState
from engine.indicators.model import Fill, Line, PanelResult
from engine.indicators.newest import Newest, last, window_sigma
from engine.indicators.params import Param, period
from engine.indicators.primitives import atr, ema, highest, lowest, sma, stdev


def _channel(label: str, prefix: str, upper: np.ndarray, mid: np.ndarray, lower: np.ndarray, color: str) -> PanelResult:
    return PanelResult(
        label=label,
        is_overlay=True,
        lines=[
            Line(upper, color, label=f"{prefix} Upper"),
            Line(mid, colors.GREY, label=f"{prefix} Mid", dashed=True),
            Line(lower, color, label=f"{prefix} Lower"),
        ],
        fills=[Fill(upper, lower, color, alpha=0.08)],
    )


def _bbands(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n, k = params["period"], params["std_dev"]
    mid = sma(bars.close, n)
    dev = stdev(bars.close, n, ddof=0)
    return _channel("BB", "BB", mid + k * dev, mid, mid - k * dev, colors.BLUE)


def _bbands_newest(bars: Bars, params: Params) -> Newest:
    """The newest bands: the SMA over the window (TA-Lib's running sum), σ over the last ``period`` closes."""
    n, k = params["period"], params["std_dev"]
    mid = last(sma(bars.close, n))
    dev = window_sigma(bars.close, n)
    return Newest((("BB Upper", mid + k * dev), ("BB Mid", mid), ("BB Lower", mid - k * dev)), ())


def _keltner(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n, m = params["period"], params["multiplier"]
    mid = ema(bars.close, n)
    band = atr(bars.high, bars.low, bars.close, n)
    return _channel("KC", "KC", mid + m * band, mid, mid - m * band, colors.TEAL)


def _donchian(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    n = params["period"]
    upper = highest(bars.high, n)
    lower = lowest(bars.low, n)
    return _channel("DC", "DC", upper, (upper + lower) / 2.0, lower, colors.CYAN)


BBANDS = IndicatorDef(
    name="bbands",
    kind="overlay",
    description=(
        "Bollinger Bands — volatility bands around a simple moving average. Formula: Mid = SMA(close, "
        "period); Upper/Lower = Mid ± std_dev · σ, σ the population standard deviation of the last "
        "`period` closes (as TradingView and TA-Lib)."
    ),
    compute=_bbands,
    newest=_bbands_newest,
    incremental=BollingerState,
    warmup=wu.Rule("window", ("period",)),
    params=(
        period("period", 20, "moving-average length in bars"),
        Param(
            "std_dev",
            "number",
            2.0,
            "band width in standard deviations",
            minimum=0,
            exclusive_minimum=True,
            maximum=100,
        ),
    ),
    aliases=("bollinger", "bb"),
)

KELTNER = IndicatorDef(
    name="keltner",
    kind="overlay",
    description=(
        "Keltner Channels — ATR-based volatility bands. Formula: Mid = EMA(close, period); "
        "Upper/Lower = Mid ± multiplier · ATR(period), ATR with Wilder smoothing."
    ),
    compute=_keltner,
    warmup=wu.Rule("rma", ("period",)),  # ATR (Wilder) outlasts the EMA
    params=(
        period("period", 20, "EMA and ATR length in bars"),
        Param("multiplier", "number", 1.5, "band width in ATRs", minimum=0, exclusive_minimum=True, maximum=100),
    ),
    aliases=("kc",),
)

DONCHIAN = IndicatorDef(
    name="donchian",
    kind="overlay",
    description=(
        "Donchian Channels — breakout bands. Formula: Upper = highest high of the last `period` bars; "
        "Lower = lowest low; Mid = (Upper + Lower)/2 (null for the first period−1 bars)."
    ),
    compute=_donchian,
    warmup=wu.Rule("window", ("period",)),
    params=(period("period", 20, "look-back in bars"),),
    aliases=("dc",),
)
