"""The PNG renderer: exact image sizes, degenerate inputs, every indicator drawable."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from engine.bars import Bars
from engine.charts.render import render_png
from engine.indicators.model import Dot, HBar, Histogram, HLine, Line, PanelResult
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
