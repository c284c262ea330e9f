"""The PNG renderer: exact image sizes, degenerate inputs, every indicator drawable."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from engine.bars import Bars
from engine.charts.render import render_png
from engine.indicators.model import DivLine, Dot, Fill, HBar, Histogram, HLine, Line, PanelResult
from engine.indicators.registry import all_indicators, parse_requests
from engine.indicators.runner import compute_sync
from engine.sample_data import sample_bars


def size_of(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as img:
        assert img.format == "PNG"
        return img.size


def timed(bars: Bars) -> Bars:
    return Bars(
        bars.open,
        bars.high,
        bars.low,
        bars.close,
        bars.volume,
        np.arange(len(bars), dtype=np.int64) * 3600 + 1_767_225_600,
    )


@pytest.mark.parametrize(("width", "height"), [(1920, 1080), (800, 450), (200, 150), (1234, 777)])
def test_png_has_exactly_the_requested_size(width: int, height: int) -> None:
    """Width and height are exact, with and without panels."""
    bars = sample_bars(120)
    panels = [(r.key, compute_sync(r, bars)) for r in parse_requests(["ema_stack", "rsi", "macd"])]
    assert size_of(render_png(bars, panels, symbol="BTCUSDT", interval="4h", width=width, height=height)) == (
        width,
        height,
    )
    assert size_of(render_png(bars, [], symbol=None, interval="4h", width=width, height=height)) == (width, height)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_tiny_and_empty_series_render(n: int) -> None:
    """0, 1 and 5 bars render with indicators that have nothing to show yet."""
    bars = timed(sample_bars(n)) if n else Bars.empty()
    panels = [(r.key, compute_sync(r, bars)) for r in parse_requests(["bbands", "cipher_b", "rsi", "volume_profile"])]
    assert size_of(render_png(bars, panels, symbol="ETHUSDT", interval="1h", width=640, height=360)) == (640, 360)


def test_all_nan_and_hand_built_channels_render() -> None:
    """Every channel type, including all-NaN lines, profile bars and labelled dots, draws without error."""
    bars = sample_bars(60)
    nan = np.full(60, np.nan)
    panel = PanelResult(
        label="Custom",
        is_overlay=False,
        lines=[Line(nan, "#ffffff", label="empty"), Line(np.linspace(0, 1, 60), "#ff0000", label="ramp")],
        histograms=[Histogram(np.sin(np.arange(60.0)), ["#00ff00"] * 60)],
        dots=[Dot(10, 0.5, "#ffff00", label="buy"), Dot(20, 0.2, "#ffff00")],
        hlines=[HLine(0.5, "#888888")],
    )
    overlay = PanelResult(
        label="Profile",
        is_overlay=True,
        hbars=[HBar(y=float(bars.close[5]), height=0.5, width=0.2, offset=0.0, color="#3366ff", left=False)],
    )
    png = render_png(timed(bars), [("c", panel), ("p", overlay)], symbol="AAPL", interval="1d", width=900, height=500)
    assert size_of(png) == (900, 500)


def test_every_indicator_renders_on_sample_data() -> None:
    """All non-network indicators together on one big chart."""
    bars = timed(sample_bars(200))
    names = [d.name for d in all_indicators() if d.fetch is None]
    panels = [(r.key, compute_sync(r, bars)) for r in parse_requests(names)]
    assert size_of(render_png(bars, panels, symbol=None, interval="1h", width=3840, height=2160)) == (3840, 2160)


def test_all_nan_bars_and_all_nan_panels_render_at_the_smallest_size() -> None:
    """Bars with no finite price and six all-NaN panes still give a 200x150 PNG."""
    nan = np.full(5, np.nan)
    bars = Bars(nan, nan, nan, nan, nan)
    blank = PanelResult(label="Blank", is_overlay=False, lines=[Line(nan, "#ffffff", label="nan")])
    overlay = PanelResult(label="Over", is_overlay=True, lines=[Line(nan, "#ffffff", label="nan")])
    panels = [("o", overlay)] + [(f"b{i}", blank) for i in range(6)]
    assert size_of(render_png(bars, panels, symbol=None, interval="1h", width=200, height=150)) == (200, 150)


def test_divlines_fills_and_largest_size_render_with_and_without_times() -> None:
    """Dashed and solid divergence segments and NaN-gapped fills draw on sample and timed bars at 4096x4096."""
    bars = sample_bars(80)
    y = np.where(np.arange(80) % 10 < 3, np.nan, np.cos(np.arange(80.0)))
    panel = PanelResult(
        label="Div",
        is_overlay=False,
        lines=[Line(y, "#ff00ff", label="cos")],
        fills=[Fill(y, y * 0.5, "#00ffff", alpha=0.2)],
        divlines=[DivLine(5, 0.1, 40, 0.9, "#ff0000"), DivLine(50, 0.5, 70, float("nan"), "#00ff00", dashed=False)],
        y_range=(-1.5, 1.5),
    )
    for b in (bars, timed(bars)):
        assert size_of(render_png(b, [("d", panel)], symbol="X", interval="15m", width=4096, height=4096)) == (
            4096,
            4096,
        )
