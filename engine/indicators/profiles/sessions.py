"""Session bucketing and the parameters shared by the profile indicators.

A session is a run of consecutive bars whose open times fall in the same UTC hour, day or
week (weeks start Monday 00:00 UTC, the ISO convention — chartgen's epoch-aligned weeks
started on Thursday), or a fixed number of bars when ``bars_per_session`` is given.  Bars
without times (the seeded sample data) form one session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.bars import Bars, IntArray
from engine.indicators.params import MAX_PERIOD, Param

_HOUR = 3600
_DAY = 86_400
_WEEK = 7 * _DAY
_MONDAY_SHIFT = 3 * _DAY  # 1970-01-01 was a Thursday; shift so buckets start on Monday
_SESSION_SECONDS = {"hourly": (_HOUR, 0), "daily": (_DAY, 0), "weekly": (_WEEK, _MONDAY_SHIFT)}

SESSION_PARAM = Param(
    "session",
    "string",
    "daily",
    "Session length: daily, weekly or hourly (UTC; weeks start Monday)",
    choices=("daily", "weekly", "hourly"),
    aliases=(
        ("day", "daily"),
        ("d", "daily"),
        ("1d", "daily"),
        ("week", "weekly"),
        ("w", "weekly"),
        ("1w", "weekly"),
        ("hour", "hourly"),
        ("h", "hourly"),
        ("1h", "hourly"),
    ),
)
BARS_PER_SESSION_PARAM = Param(
    "bars_per_session",
    "integer",
    None,
    "Fixed session length in bars (overrides session when set)",
    minimum=1,
    maximum=MAX_PERIOD,
    nullable=True,
)
RANGE_BARS_PARAM = Param(
    "range_bars",
    "integer",
    None,
    "Profile only the newest N bars (null = every bar of the chart)",
    minimum=1,
    maximum=MAX_PERIOD,
    nullable=True,
)


def side_param(default: str) -> Param:
    """Which chart edge the profile bars grow from."""
    return Param(
        "side", "string", default, "Chart edge the profile bars grow from: left or right", choices=("left", "right")
    )


def bins_param(default: int, minimum: int = 1) -> Param:
    """The number of price bins of a profile."""
    return Param("bins", "integer", default, "Number of price bins", minimum=minimum, maximum=1000)


def opacity_param() -> Param:
    return Param("opacity", "number", 0.35, "Profile bar opacity (0-1)", minimum=0.0, maximum=1.0)


def session_ids(bars: Bars, params: Mapping[str, Any]) -> IntArray:
    """Per-bar session number (non-decreasing for bars in time order)."""
    n = len(bars)
    per = params.get("bars_per_session")
    if per is not None:
        return np.arange(n, dtype=np.int64) // int(per)
    if bars.times is None:
        return np.zeros(n, dtype=np.int64)
    length, shift = _SESSION_SECONDS[params.get("session", "daily")]
    return (np.asarray(bars.times, dtype=np.int64) + shift) // length


def range_slice(bars: Bars, range_bars: int | None) -> slice:
    """The bars a visible-range profile covers: all, or the newest ``range_bars``."""
    n = len(bars)
    if range_bars is None or range_bars >= n:
        return slice(0, n)
    return slice(n - range_bars, n)
