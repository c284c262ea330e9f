"""chartgen's seeded synthetic OHLCV generator, reproduced exactly (contract §8.3).

Used when a chart is requested without a ticker.  The sequence must match chartgen's bit
for bit: the golden summary file's ``price`` block depends on it.
"""

from __future__ import annotations

import math

from engine.bars import Bars

_MASK64 = (1 << 64) - 1
_MUL = 6364136223846793005
_INC = 1442695040888963407


class _Lcg:
    """64-bit linear congruential generator with chartgen's constants and seed."""

    __slots__ = ("state",)

    def __init__(self, seed: int = 42) -> None:
        self.state = seed

    def uniform(self) -> float:
        self.state = (self.state * _MUL + _INC) & _MASK64
        return (self.state >> 33) / 4294967295.0

    def normal(self, mean: float, std: float) -> float:
        u1 = max(self.uniform(), 1e-10)
        u2 = self.uniform()
        return mean + std * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def sample_bars(n: int) -> Bars:
    """``n`` bars of chartgen's deterministic random walk (price starts at 30.0)."""
    rng = _Lcg(42)
    price = 30.0
    rows: list[tuple[float, float, float, float, float]] = []
    for _ in range(max(n, 0)):
        o = price + rng.normal(0.0, 0.5)
        c = o + rng.normal(-0.1, 1.0)
        h = max(o, c) + abs(rng.normal(0.0, 0.5))
        lo = min(o, c) - abs(rng.normal(0.0, 0.5))
        v = math.exp(rng.normal(10.0, 0.8))
        rows.append((o, h, lo, c, v))
        price = c
    return Bars.from_rows(rows, None)
