"""Classic pivot points from the previous bar: pivot, two resistances and two supports."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Line, PanelResult
from engine.indicators.warmup import Rule


def _shift(x: np.ndarray) -> np.ndarray:
    out = np.full(len(x), np.nan)
    out[1:] = x[:-1]
    return out


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    h, l, c = _shift(bars.high), _shift(bars.low), _shift(bars.close)
    p = (h + l + c) / 3.0
    rng = h - l
    return PanelResult(
        label="Pivot",
        is_overlay=True,
        lines=[
            Line(p, colors.WHITE, width=1.0, label="Pivot", dashed=True),
            Line(2 * p - l, colors.DOWN, width=1.0, label="R1", dashed=True),
            Line(2 * p - h, colors.UP, width=1.0, label="S1", dashed=True),
            Line(p + rng, colors.RED, width=1.0, label="R2", dashed=True),
            Line(p - rng, colors.GREEN, width=1.0, label="S2", dashed=True),
        ],
    )


PIVOT = IndicatorDef(
    name="pivot",
    kind="overlay",
    description=(
        "Pivot Points — support/resistance from the previous bar. Formula: P = (H+L+C)/3 of the previous "
        "bar; R1 = 2P − L; S1 = 2P − H; R2 = P + (H − L); S2 = P − (H − L)."
    ),
    compute=_compute,
    warmup=Rule("bars", extra=1),  # the previous bar
    aliases=("pivot_points",),
)
