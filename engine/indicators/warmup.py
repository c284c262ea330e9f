"""Warm-up history: how many bars before the first shown bar each indicator needs, and the cut.

A chart of ``bars`` bars is computed over ``bars + warm-up`` bars and then cut back to the
``bars`` shown (TradingView's behaviour: every line is defined from the left edge where the
history exists).  Each indicator declares its warm-up (``IndicatorDef.warmup``) with the
rules below, chosen so that a value on the first shown bar is both *defined* and *settled*
— the seed's remaining weight is at most e⁻⁶ ≈ 0.25 %:

- windowed (SMA, rolling σ, highest/lowest, rolling sums): ``n − 1`` bars, exact after that;
- EMA (α = 2/(n+1), SMA-seeded): ``4n`` — the n-bar seed plus 3n bars of decay;
- Wilder RMA (α = 1/n: RSI, ATR, ±DI, ADX): ``7n`` — the seed plus 6n bars of decay;
- chained steps add up (an EMA of an EMA needs both), composites take the max over parts;
- path-dependent trailing states (SAR, supertrend) add :data:`STATE_SETTLE` bars;
- indicators that describe the shown bars themselves (profiles, cumulative volume lines,
  external data) need none.

Every indicator is computed over its *own* warm-up (the newest ``bars + its warm-up`` bars),
so its values do not depend on which other indicators were requested or on how much more
history the source happened to return.  The warm-up fetched for a request is the largest
among its indicators, never more than :data:`MAX_WARMUP_BARS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.indicators.base import IndicatorRequest
from engine.indicators.model import DivLine, Dot, Fill, Histogram, Line, PanelResult

MAX_WARMUP_BARS = 2000
"""The most history fetched before the first shown bar: at most two more Binance klines pages
(1000 rows each) per chart; an indicator needing more is as settled as 2000 bars make it."""

EMA_DECAY = 3
"""Bars of decay after an EMA's seed, in lengths: ((n−1)/(n+1))^(3n) ≈ e⁻⁶."""

RMA_DECAY = 6
"""Bars of decay after a Wilder (α = 1/n) seed, in lengths: (1 − 1/n)^(6n) ≈ e⁻⁶."""

STATE_SETTLE = 100
"""Bars a path-dependent trailing state (SAR, supertrend) is given to forget its start."""


def window(n: int) -> int:
    """A rolling window of ``n`` bars: exact from its ``n``-th bar."""
    return max(0, int(n) - 1)


def ema(n: int) -> int:
    """An SMA-seeded EMA of length ``n``: the seed plus 3n bars of decay."""
    return (1 + EMA_DECAY) * max(1, int(n))


def rma(n: int) -> int:
    """A Wilder average of length ``n`` (RSI, ATR, DI): the seed plus 6n bars of decay."""
    return (1 + RMA_DECAY) * max(1, int(n))


def smoothing(gain: float) -> int:
    """A constant-gain filter x̂ += gain·(x − x̂): bars until the start's weight is below e⁻⁶."""
    return math.ceil(-(RMA_DECAY) / math.log1p(-gain)) if 0 < gain < 1 else 0


_KINDS: dict[str, Callable[[int], int]] = {"window": window, "ema": ema, "rma": rma, "bars": int}


@dataclass(frozen=True, slots=True)
class Rule:
    """A picklable ``IndicatorDef.warmup`` (chart jobs pickle indicator definitions): ``kind`` applied
    to each length parameter named in ``params`` and each fixed length in ``lengths``, summed
    (chained steps) or the largest (parallel lines), plus ``extra`` bars."""

    kind: Literal["window", "ema", "rma", "bars"]
    params: tuple[str, ...] = ()
    lengths: tuple[int, ...] = ()
    combine: Literal["sum", "max"] = "sum"
    extra: int = 0

    def __call__(self, p: Mapping[str, Any], interval: str) -> int:
        f = _KINDS[self.kind]
        parts = [f(int(p[name])) for name in self.params] + [f(n) for n in self.lengths]
        if not parts:
            return self.extra
        return (sum(parts) if self.combine == "sum" else max(parts)) + self.extra


def warmup_of(request: IndicatorRequest, interval: str) -> int:
    """The warm-up one requested indicator needs, capped at :data:`MAX_WARMUP_BARS`."""
    return min(MAX_WARMUP_BARS, request.definition.warmup_bars(request.params, interval))


def needed_warmup(requests: Iterable[IndicatorRequest], interval: str) -> int:
    """The history to fetch before the first shown bar: the largest warm-up among ``requests``."""
    return max((warmup_of(r, interval) for r in requests), default=0)


def _last(a: np.ndarray, m: int) -> np.ndarray:
    return a[len(a) - m :] if len(a) > m else a


def shown_part(result: PanelResult, total: int, shown: int) -> PanelResult:
    """``result`` (computed over ``total`` bars) cut to its newest ``shown`` bars, re-indexed from 0.

    Per-bar arrays keep their last ``shown`` values (an engine summary view, whose arrays are
    tails aligned to the newest bar, is cut the same way); dots and divergence lines on
    warm-up bars are dropped and the others shifted.  Profile bars, levels and the y range
    are kept.  A new result is returned; ``result`` (possibly cached and shared) is not changed.
    """
    start = total - shown
    if start <= 0:
        return result
    m = max(0, shown)

    def cut(y: np.ndarray) -> np.ndarray:
        return y[:0] if m == 0 else _last(y, m)

    def hist(h: Histogram) -> Histogram:
        per_bar = len(h.colors) == len(h.y) and len(h.y) > m
        colors = h.colors[len(h.colors) - m :] if per_bar else h.colors
        return Histogram(cut(h.y), colors, h.bottom)

    dots = [
        Dot(
            d.x - start,
            d.y,
            d.color,
            d.size,
            d.label,
            None if d.confirmed_at is None else d.confirmed_at - start,
        )
        for d in result.dots
        if d.x >= start
    ]
    divlines = [
        DivLine(d.x1 - start, d.y1, d.x2 - start, d.y2, d.color, d.dashed) for d in result.divlines if d.x1 >= start
    ]
    return PanelResult(
        label=result.label,
        is_overlay=result.is_overlay,
        lines=[Line(cut(ln.y), ln.color, ln.width, ln.label, ln.dashed) for ln in result.lines],
        fills=[Fill(cut(f.y1), cut(f.y2), f.color, f.alpha) for f in result.fills],
        histograms=[hist(h) for h in result.histograms],
        dots=dots,
        hlines=list(result.hlines),
        hbars=list(result.hbars),
        divlines=divlines,
        y_range=result.y_range,
    )
