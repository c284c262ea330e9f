"""TPO: a time-based market profile (each bar counts once) with POC, VAH and VAL."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import PanelResult
from engine.indicators.profiles.binning import build_profiles, level_hlines, profile_hbars, value_area
from engine.indicators.profiles.sessions import RANGE_BARS_PARAM, bins_param, opacity_param, range_slice, side_param

LABEL = "TPO"


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    result = PanelResult(label=LABEL, is_overlay=True)
    window = range_slice(bars, params["range_bars"])
    low, high = bars.low[window], bars.high[window]
    if len(low) == 0:
        return result
    starts = np.zeros(1, dtype=np.int64)
    profiles = build_profiles(low, high, np.ones(len(low)), starts, params["bins"], price=bars.close[window])
    area = value_area(profiles)
    if not area.ok[0]:
        return result
    result.hbars = profile_hbars(
        profiles,
        area,
        left=params["side"] == "left",
        alpha=params["opacity"],
        inside_color=colors.PURPLE,
        outside_color=colors.GREY,
    )
    result.hlines = level_hlines(area)
    return result


TPO = IndicatorDef(
    name="tpo",
    kind="overlay",
    description=(
        "Time Price Opportunity — time-based market profile with POC/VAH/VAL. "
        "Formula: every bar has weight 1, spread over equal price bins in proportion to the overlap of its "
        "[low, high] range with each bin (time spent at each price); POC = fullest bin; value area = 70 % of "
        "the bars' time, grown from the POC toward the larger neighbour; VAH/VAL = its upper/lower edge."
    ),
    compute=_compute,
    params=(
        bins_param(32),
        side_param("right"),
        RANGE_BARS_PARAM,
        opacity_param(),
    ),
    aliases=("market_profile",),
)
