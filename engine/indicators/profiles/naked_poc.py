"""NAKED_POC: points of control of past sessions that price has not traded back through.

A past session's POC is *naked* while no later bar's ``[low, high]`` contains it.  Each
naked POC is a line ``nPOC`` drawn from the last bar of its session to the newest bar; the
current session's developing POC is the line ``dPOC``, finite inside that session.
"""

from __future__ import annotations

import numpy as np

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import Line, PanelResult
from engine.indicators.params import Param
from engine.indicators.primitives import nans
from engine.indicators.profiles.binning import Profiles, ValueArea, build_profiles, session_starts, value_area
from engine.indicators.profiles.sessions import BARS_PER_SESSION_PARAM, SESSION_PARAM, bins_param, session_ids

LABEL = "nPOC"


def naked_sessions(low: FloatArray, high: FloatArray, profiles: Profiles, area: ValueArea, limit: int) -> list[int]:
    """The newest ``limit`` past sessions (all but the last) whose POC no later bar touched, oldest first."""
    n = len(low)
    # suffix extremes let most sessions be decided without scanning their later bars
    suffix_low = np.append(np.minimum.accumulate(low[::-1])[::-1], np.inf)
    suffix_high = np.append(np.maximum.accumulate(high[::-1])[::-1], -np.inf)
    found: list[int] = []
    for s in range(len(profiles) - 2, -1, -1):
        if len(found) >= limit:
            break
        if not area.ok[s]:
            continue
        poc = area.poc[s]
        end = int(profiles.ends[s])
        if end >= n:
            continue
        if poc < suffix_low[end] or poc > suffix_high[end]:
            found.append(s)
            continue
        if not np.any((low[end:] <= poc) & (high[end:] >= poc)):
            found.append(s)
    return found[::-1]


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    result = PanelResult(label=LABEL, is_overlay=True)
    n = len(bars)
    if n == 0:
        return result
    low = np.minimum(bars.low, bars.high)
    high = np.maximum(bars.low, bars.high)
    starts = session_starts(session_ids(bars, params))
    profiles = build_profiles(low, high, bars.volume, starts, params["bins"], price=bars.close)
    area = value_area(profiles)
    for s in naked_sessions(low, high, profiles, area, params["max_sessions"]):
        y = nans(n)
        y[int(profiles.ends[s]) - 1 :] = area.poc[s]
        result.lines.append(Line(y, colors.ORANGE, width=1.0, label="nPOC", dashed=True))
    last = len(profiles) - 1
    if params["include_current"] and area.ok[last]:
        y = nans(n)
        y[int(profiles.starts[last]) :] = area.poc[last]
        result.lines.append(Line(y, colors.GOLD, width=1.5, label="dPOC"))
    return result


NAKED_POC = IndicatorDef(
    name="naked_poc",
    kind="overlay",
    description=(
        "Naked POCs — unfilled point-of-control levels from previous sessions (UTC hour/day/week). "
        "Formula: each session's POC = centre of the fullest bin of its volume profile (volume spread over "
        "price bins by range overlap); a past POC is naked while no later bar has low ≤ POC ≤ high. "
        "Lines nPOC (the newest max_sessions naked POCs, from their session's last bar on) and dPOC "
        "(the current session's POC)."
    ),
    compute=_compute,
    params=(
        bins_param(24),
        SESSION_PARAM,
        BARS_PER_SESSION_PARAM,
        Param("max_sessions", "integer", 20, "Most naked POCs to draw (newest first)", minimum=1, maximum=1000),
        Param("include_current", "boolean", True, "Also draw the current session's developing POC (dPOC)"),
    ),
    aliases=("npoc",),
)
