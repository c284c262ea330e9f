"""The dark chart theme (TradingView-like) and size-dependent font scaling."""

from __future__ import annotations

from dataclasses import dataclass

BACKGROUND = "#131722"
PANE = "#131722"
GRID = "#2a2e39"
TEXT = "#d1d4dc"
MUTED = "#787b86"
CANDLE_UP = "#26a69a"
CANDLE_DOWN = "#ef5350"
VOLUME_ALPHA = 0.28


@dataclass(frozen=True, slots=True)
class Scale:
    """Sizes for one image: fonts and line widths grow with the image."""

    font: float
    small: float
    title: float
    line: float
    marker: float

    @classmethod
    def for_size(cls, width: int, height: int) -> Scale:
        k = max(0.72, min(width / 1920, height / 1080) ** 0.7)
        return cls(font=11 * k, small=9 * k, title=14 * k, line=1.3 * k, marker=k)
