"""VOLUME_PROFILE: the visible-range volume profile (VPVR) with POC, VAH and VAL."""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import PanelResult
from engine.indicators.params import Param
from engine.indicators.profiles.binning import build_profiles, level_hlines, profile_hbars, value_area
from engine.indicators.profiles.sessions import RANGE_BARS_PARAM, bins_param, opacity_param, range_slice, side_param

LABEL = "VPVR"


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    result = PanelResult(label=LABEL, is_overlay=True)
    window = range_slice(bars, params["range_bars"])
    low, high = bars.low[window], bars.high[window]
    if len(low) == 0:
        return result
    starts = np.zeros(1, dtype=np.int64)
    up = bars.close[window] >= bars.open[window]
    profiles = build_profiles(low, high, bars.volume[window], starts, params["bins"], up=up, price=bars.close[window])
    area = value_area(profiles)
    if not area.ok[0]:
        return result
    split = (params["color_up"], params["color_down"]) if params["split_up_down"] else None
    result.hbars = profile_hbars(
        profiles,
        area,
        left=params["side"] == "left",
        alpha=params["opacity"],
        inside_color=colors.BLUE,
        outside_color=colors.GREY,
        split_colors=split,
    )
    result.hlines = level_hlines(area)
    return result


VOLUME_PROFILE = IndicatorDef(
    name="volume_profile",
    kind="overlay",
    description=(
        "Volume Profile Visible Range — horizontal volume histogram of the visible bars with POC/VAH/VAL. "
        "Formula: each bar's volume is spread over equal price bins (lowest low … highest high) in proportion "
        "to the overlap of its [low, high] range with each bin; POC = centre of the fullest bin; value area = "
        "70 % of the volume, grown from the POC one bin at a time toward the larger neighbour; "
        "VAH/VAL = its upper/lower edge."
    ),
    compute=_compute,
    params=(
        bins_param(24),
        side_param("left"),
        RANGE_BARS_PARAM,
        Param("split_up_down", "boolean", False, "Split each bin into up-bar and down-bar volume"),
        Param("color_up", "string", colors.UP, "Colour of up volume (split mode)"),
        Param("color_down", "string", colors.DOWN, "Colour of down volume (split mode)"),
        opacity_param(),
    ),
    aliases=("vp", "vpvr"),
)
