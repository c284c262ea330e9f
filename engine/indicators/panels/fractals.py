"""Five-bar fractals and regular divergences between price and an oscillator.

A top fractal at centre ``c`` has an oscillator value above its two neighbours on each side;
it is known at bar ``c + 2``.  A bearish divergence: at a top fractal the price makes a
higher high than at the previous top fractal while the oscillator makes a lower high
(bullish: bottom fractals, lower low in price, higher low in the oscillator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.bars import FloatArray


def fractal_centres(x: FloatArray) -> tuple[np.ndarray, np.ndarray]:
    """(tops, bottoms): centre indices of 5-bar fractals of ``x`` (finite windows only)."""
    n = len(x)
    if n < 5:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    c = x[2:-2]
    with np.errstate(invalid="ignore"):
        tops = (c > x[1:-3]) & (c > x[:-4]) & (c >= x[3:-1]) & (c >= x[4:])
        bottoms = (c < x[1:-3]) & (c < x[:-4]) & (c <= x[3:-1]) & (c <= x[4:])
    ok = np.isfinite(c)
    return np.flatnonzero(tops & ok) + 2, np.flatnonzero(bottoms & ok) + 2


@dataclass(frozen=True, slots=True)
class Divergence:
    """A divergence found at fractal ``centre`` against the previous fractal ``previous``."""

    previous: int
    centre: int
    bullish: bool


def divergences(
    osc: FloatArray,
    high: FloatArray,
    low: FloatArray,
    *,
    bear_min: float,
    bull_max: float,
) -> list[Divergence]:
    """Regular divergences whose fractal value is ≥ ``bear_min`` (tops) or ≤ ``bull_max`` (bottoms)."""
    tops, bottoms = fractal_centres(osc)
    found: list[Divergence] = []
    for prev, cur in zip(tops[:-1].tolist(), tops[1:].tolist(), strict=True):
        if osc[cur] >= bear_min and high[cur] > high[prev] and osc[cur] < osc[prev]:
            found.append(Divergence(prev, cur, bullish=False))
    for prev, cur in zip(bottoms[:-1].tolist(), bottoms[1:].tolist(), strict=True):
        if osc[cur] <= bull_max and low[cur] < low[prev] and osc[cur] > osc[prev]:
            found.append(Divergence(prev, cur, bullish=True))
    found.sort(key=lambda d: d.centre)
    return found
