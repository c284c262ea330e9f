"""Ichimoku Cloud overlay: conversion and base lines and the two cloud spans (undisplaced)."""

from __future__ import annotations

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Fill, Line, PanelResult
from engine.indicators.params import period
from engine.indicators.primitives import highest, lowest


def _mid(bars: Bars, n: int):
    return (highest(bars.high, n) + lowest(bars.low, n)) / 2.0


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    tenkan = _mid(bars, params["tenkan"])
    kijun = _mid(bars, params["kijun"])
    span_a = (tenkan + kijun) / 2.0
    span_b = _mid(bars, params["senkou_b"])
    return PanelResult(
        label="Ichimoku",
        is_overlay=True,
        lines=[
            Line(tenkan, colors.BLUE, label="Tenkan"),
            Line(kijun, colors.RED, label="Kijun"),
            Line(span_a, colors.GREEN, width=1.0, label="Senkou A"),
            Line(span_b, colors.DOWN, width=1.0, label="Senkou B"),
        ],
        fills=[Fill(span_a, span_b, colors.TEAL, alpha=0.1)],
    )


ICHIMOKU = IndicatorDef(
    name="ichimoku",
    kind="overlay",
    description=(
        "Ichimoku Cloud — trend, support/resistance and momentum. Formula: Tenkan = (HH+LL)/2 over "
        "`tenkan` bars; Kijun = (HH+LL)/2 over `kijun`; Senkou A = (Tenkan+Kijun)/2; Senkou B = (HH+LL)/2 "
        "over `senkou_b`. Values are aligned to the bar they are computed on (no forward displacement, "
        "no Chikou), so every array stays one value per bar."
    ),
    compute=_compute,
    warmup=wu.Rule("window", ("tenkan", "kijun", "senkou_b"), combine="max"),
    params=(
        period("tenkan", 9, "conversion-line length"),
        period("kijun", 26, "base-line length"),
        period("senkou_b", 52, "leading span B length"),
    ),
    aliases=("ichi",),
)
