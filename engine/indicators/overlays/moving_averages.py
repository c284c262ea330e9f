"""EMA stack overlay: the 8, 21, 50 and 200-bar exponential moving averages of the close."""

from __future__ import annotations

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators import warmup as wu
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Line, PanelResult
from engine.indicators.primitives import ema

_STACK = ((8, colors.YELLOW), (21, colors.ORANGE), (50, colors.BLUE), (200, colors.PURPLE))


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    lines = [Line(ema(bars.close, n), color, label=f"EMA {n}") for n, color in _STACK]
    return PanelResult(label="EMA", is_overlay=True, lines=lines)


EMA_STACK = IndicatorDef(
    name="ema_stack",
    kind="overlay",
    description=(
        "EMA Stack — four exponential moving averages (8/21/50/200) showing trend alignment. "
        "Formula: EMA_n = α·close + (1−α)·EMA_n[−1], α = 2/(n+1), seeded with the SMA of the first n "
        "closes (null before bar n−1)."
    ),
    compute=_compute,
    aliases=("ema",),
    warmup=wu.Rule("ema", lengths=tuple(n for n, _ in _STACK), combine="max"),
)
