"""SESSION_VP: a volume profile per session (hour, day or week) with its POC/VAH/VAL.

Every session's levels are computed from that session's bars only.  They are returned as
three step lines (``POC``, ``VAH``, ``VAL``) whose value inside each session is that
session's level, so the output stays three series however many sessions the chart spans
(chartgen emitted three separate lines per session, which grows without bound).
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Line, PanelResult
from engine.indicators.params import Param
from engine.indicators.profiles.binning import build_profiles, session_starts, value_area
from engine.indicators.profiles.sessions import BARS_PER_SESSION_PARAM, SESSION_PARAM, bins_param, session_ids

LABEL = "SVP"


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    result = PanelResult(label=LABEL, is_overlay=True)
    n = len(bars)
    if n == 0:
        return result
    starts = session_starts(session_ids(bars, params))
    profiles = build_profiles(bars.low, bars.high, bars.volume, starts, params["bins"], price=bars.close)
    area = value_area(profiles)
    per_bar = np.repeat(np.arange(len(starts)), profiles.ends - profiles.starts)
    result.lines.append(Line(area.poc[per_bar], colors.GOLD, width=1.5, label="POC"))
    if params["show_value_area"]:
        result.lines.append(Line(area.vah[per_bar], colors.LIGHT_BLUE, width=1.0, label="VAH", dashed=True))
        result.lines.append(Line(area.val[per_bar], colors.LIGHT_BLUE, width=1.0, label="VAL", dashed=True))
    return result


SESSION_VP = IndicatorDef(
    name="session_vp",
    kind="overlay",
    description=(
        "Session Volume Profile — per-session POC/VAH/VAL that reset each hour/day/week (UTC). "
        "Formula: for each session, volume is spread over equal price bins by the overlap of each bar's "
        "[low, high] with the bin; POC = centre of the fullest bin; value area = 70 % of the session's volume "
        "grown from the POC toward the larger neighbour. Lines POC/VAH/VAL step to the new session's level at "
        "each session start (weeks start Monday; sample data without times is one session)."
    ),
    compute=_compute,
    params=(
        bins_param(24),
        SESSION_PARAM,
        BARS_PER_SESSION_PARAM,
        Param("show_value_area", "boolean", True, "Also draw VAH and VAL"),
    ),
    aliases=("svp", "session_volume_profile"),
)
