"""Shared output of the dot-only trend overlays (supertrend, SAR, Heikin-Ashi).

One decorative dot per bar coloured by trend, plus a labelled ``flip_up`` / ``flip_down``
dot on each bar where the trend reverses — the signals alerts match on.
"""

from __future__ import annotations

import numpy as np

from engine.bars import FloatArray
from engine.indicators import colors
from engine.indicators.model import Dot, PanelResult
from engine.indicators.newest import Newest

FLIP_SIGNALS = ("flip_up", "flip_down")


def trend_dots(label: str, values: FloatArray, up: np.ndarray, size: float = 3.0) -> PanelResult:
    """Dots at ``values`` (NaN skipped) with flips where ``up`` changes between two finite bars."""
    finite = np.isfinite(values)
    idx = np.flatnonzero(finite)
    dots = [Dot(int(i), float(values[i]), colors.UP if up[i] else colors.DOWN, size=size) for i in idx.tolist()]
    if len(idx) > 1:
        prev, cur = idx[:-1], idx[1:]
        changed = cur[up[cur] != up[prev]]
        for i in changed.tolist():
            rising = bool(up[i])
            dots.append(
                Dot(
                    int(i),
                    float(values[i]),
                    colors.UP if rising else colors.DOWN,
                    size=size * 2.5,
                    label="flip_up" if rising else "flip_down",
                )
            )
    return PanelResult(label=label, is_overlay=True, dots=dots)


def trend_newest(values: FloatArray, up: np.ndarray) -> Newest:
    """The newest bar of :func:`trend_dots`: a flip when ``up`` differs from the previous finite bar's."""
    n = len(values)
    if n < 2 or not np.isfinite(values[n - 1]):
        return Newest((), ())
    j = n - 2
    while j >= 0 and not np.isfinite(values[j]):
        j -= 1
    if j < 0 or bool(up[n - 1]) == bool(up[j]):
        return Newest((), ())
    return Newest((), (("flip_up" if up[n - 1] else "flip_down", float(values[n - 1])),))
