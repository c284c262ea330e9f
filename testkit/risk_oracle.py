"""An independent percentile for the risk-metric tests: a sorted list and linear interpolation
between closest ranks (numpy's default method, written without numpy)."""

from __future__ import annotations

import math


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``xs``."""
    s = sorted(xs)
    rank = q / 100 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)
