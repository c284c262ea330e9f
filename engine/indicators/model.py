"""The output model every indicator returns (chartgen's PanelResult, contract §3.2).

All per-bar arrays are 1:1 with the input bars; NaN marks "no value" (warm-up, gaps).
A *labelled* dot is a signal: its label is the alert-matchable string of
``engine.signals.SIGNAL_LABELS``.  Unlabelled dots are decorative.  Colours only matter to
the renderer and never reach the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.bars import FloatArray


@dataclass(slots=True)
class Line:
    """A per-bar line series."""

    y: FloatArray
    color: str
    width: float = 1.5
    label: str | None = None
    dashed: bool = False


@dataclass(slots=True)
class Fill:
    """A shaded area between two per-bar series (``alpha`` applies to ``color``)."""

    y1: FloatArray
    y2: FloatArray
    color: str
    alpha: float = 0.15


@dataclass(slots=True)
class Histogram:
    """Per-bar vertical bars from ``bottom`` to ``y``; ``colors`` is one colour per bar."""

    y: FloatArray
    colors: list[str]
    bottom: float = 0.0


@dataclass(slots=True)
class Dot:
    """A marker at bar index ``x``; a non-None ``label`` makes it a signal.

    ``confirmed_at`` is the bar on which the signal became known when that is later than
    ``x`` (a fractal-based divergence is drawn at the fractal centre but only confirmed two
    bars later); ``None`` means ``x``.  Alerts use the confirmation bar, charts use ``x``.
    """

    x: int
    y: float
    color: str
    size: float = 4.0
    label: str | None = None
    confirmed_at: int | None = None

    @property
    def confirmed_index(self) -> int:
        return self.x if self.confirmed_at is None else self.confirmed_at


@dataclass(slots=True)
class HLine:
    """A horizontal reference level."""

    y: float
    color: str
    dashed: bool = True


@dataclass(slots=True)
class HBar:
    """A horizontal bar of a price profile.

    ``y`` is the price centre and ``height`` the price span; ``width`` and ``offset`` are
    fractions (0-1) of the chart width, measured from the left edge when ``left`` is true,
    otherwise from the right edge.
    """

    y: float
    height: float
    width: float
    offset: float
    color: str
    left: bool = True
    alpha: float = 0.35


@dataclass(slots=True)
class DivLine:
    """A straight segment between two bars (divergences)."""

    x1: int
    y1: float
    x2: int
    y2: float
    color: str
    dashed: bool = True


@dataclass(slots=True)
class PanelResult:
    """Everything one indicator produced for one bar series."""

    label: str
    is_overlay: bool
    lines: list[Line] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    histograms: list[Histogram] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    hlines: list[HLine] = field(default_factory=list)
    hbars: list[HBar] = field(default_factory=list)
    divlines: list[DivLine] = field(default_factory=list)
    y_range: tuple[float, float] | None = None

    def signals(self) -> list[Dot]:
        """Labelled dots with a finite value, in emission order."""
        return [d for d in self.dots if d.label is not None and np.isfinite(d.y)]
