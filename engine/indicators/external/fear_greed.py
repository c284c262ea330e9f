"""FEAR_GREED: alternative.me's daily Crypto Fear & Greed index, whatever the chart's symbol."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, ExternalUnavailable, IndicatorDef, Params
from engine.indicators.external.series import (
    NO_OVERLAP,
    align_asof,
    bar_seconds,
    fetched_series,
    no_data,
    unavailable_before_fetch,
)
from engine.indicators.external.sources import ExternalSources
from engine.indicators.model import Dot, HLine, Line, PanelResult

LABEL = "F&G"
DAY_S = 86_400


def zone_color(value: float) -> str:
    """Extreme fear red … extreme greed green."""
    if value < 25:
        return colors.RED
    if value < 45:
        return colors.ORANGE
    if value <= 55:
        return colors.YELLOW
    if value <= 75:
        return colors.LIME
    return colors.GREEN


async def _fetch(sources: ExternalSources, bars: Bars, params: Params, ctx: ComputeContext) -> Any:
    blocked = unavailable_before_fetch(bars, ctx, needs_crypto=False)
    if blocked is not None:
        return blocked
    return await sources.fear_greed()


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    data = fetched_series(bars, ctx, needs_crypto=False)
    if isinstance(data, ExternalUnavailable):
        return no_data(LABEL, data.reason)
    assert bars.times is not None
    bar_len = bar_seconds(bars, ctx.interval)
    value, sample = align_asof(bars.times, bar_len, data.times, data.columns["value"], 2 * max(bar_len, DAY_S))
    if not np.isfinite(value).any():
        return no_data(LABEL, NO_OVERLAP)
    result = PanelResult(label=LABEL, is_overlay=False, y_range=(0.0, 100.0))
    result.lines.append(Line(value, colors.GREY, width=1.0, label="F&G"))
    # one decorative dot where each new daily reading first applies
    new_reading = np.flatnonzero((sample >= 0) & (np.diff(sample, prepend=-1) != 0))
    result.dots.extend(Dot(int(i), float(value[i]), zone_color(float(value[i])), size=3.0) for i in new_reading)
    result.hlines.extend([HLine(25.0, colors.RED), HLine(50.0, colors.GREY), HLine(75.0, colors.GREEN)])
    return result


FEAR_GREED = IndicatorDef(
    name="fear_greed",
    kind="external",
    description=(
        "Fear & Greed Index — crypto market sentiment from alternative.me (GET /fng/), 0 = extreme fear, "
        "100 = extreme greed. Formula: each bar shows the latest daily reading published by the bar's end, "
        "null when older than 2 × max(bar, 1 day); ignores the chart's symbol."
    ),
    compute=_compute,
    aliases=("fng",),
    fetch=_fetch,
)
