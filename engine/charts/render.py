"""The PNG chart renderer: candles, volume, overlays and one pane per panel indicator.

matplotlib's object API on the Agg canvas (never pyplot), collections for candles and
volume, a dark theme, fonts scaled to the image, real dates on the x axis.  The PNG is
exactly ``width × height`` pixels.  Runs in a worker process (engine.charts.pool).
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, MaxNLocator

from engine.bars import Bars
from engine.charts.render_panes import bar_rects, draw_hbars, draw_result, finite_extent, legend
from engine.charts.theme import (
    BACKGROUND,
    CANDLE_DOWN,
    CANDLE_UP,
    GRID,
    MUTED,
    PANE,
    TEXT,
    VOLUME_ALPHA,
    Scale,
)
from engine.indicators.model import PanelResult

PRICE_SHARE = 0.55


def _style(ax: Axes, scale: Scale) -> None:
    ax.set_facecolor(PANE)
    ax.grid(True, color=GRID, linewidth=0.6, alpha=0.8)
    ax.tick_params(colors=MUTED, labelsize=scale.small, length=0, pad=2)
    ax.yaxis.tick_right()
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6 if ax.get_position().height > 0.3 else 4))


def _date_labels(bars: Bars, ticks: np.ndarray) -> list[str]:
    if bars.times is None:
        return [str(int(t)) for t in ticks]
    times = bars.times
    span = int(times[-1] - times[0]) if len(times) > 1 else 0
    step = int(np.median(np.diff(times))) if len(times) > 1 else 86_400
    fmt = "%Y-%m-%d" if step >= 86_400 else ("%m-%d %H:%M" if span > 86_400 else "%H:%M")
    return [datetime.fromtimestamp(int(times[int(t)]), tz=UTC).strftime(fmt) for t in ticks]


def _candles(ax: Axes, bars: Bars, x: np.ndarray, scale: Scale) -> None:
    up = bars.close >= bars.open
    colors = np.where(up, CANDLE_UP, CANDLE_DOWN).tolist()
    wicks = np.stack([np.stack([x, bars.low], 1), np.stack([x, bars.high], 1)], axis=1)
    ax.add_collection(LineCollection(wicks, colors=colors, linewidths=max(0.6, 0.9 * scale.line), zorder=2))  # type: ignore[arg-type]  # matplotlib's stubs want a Sequence; it takes the (N, k, 2) array as is
    lo = np.minimum(bars.open, bars.close)
    hi = np.maximum(bars.open, bars.close)
    ok = np.isfinite(bars.high) & np.isfinite(bars.low)
    pad = (float(bars.high[ok].max()) - float(bars.low[ok].min())) * 0.0015 if ok.any() else 0.0
    hi = np.where(hi - lo < pad, lo + pad, hi)  # doji stay visible
    rects = bar_rects(x, lo, hi, 0.36)
    ax.add_collection(PolyCollection(rects, facecolors=colors, edgecolors="none", zorder=2))  # type: ignore[arg-type]  # matplotlib's stubs want a Sequence; it takes the (N, k, 2) array as is


def _volume(ax: Axes, bars: Bars, x: np.ndarray) -> None:
    vol = np.nan_to_num(bars.volume, nan=0.0, posinf=0.0, neginf=0.0)
    if not len(vol) or vol.max() <= 0:
        return
    twin = ax.twinx()
    twin.set_ylim(0, vol.max() * 4.0)
    twin.axis("off")
    colors = np.where(bars.close >= bars.open, CANDLE_UP, CANDLE_DOWN).tolist()
    twin.add_collection(
        PolyCollection(
            bar_rects(x, np.zeros(len(vol)), vol, 0.36),  # type: ignore[arg-type]  # matplotlib's stubs want a Sequence; it takes the (N, k, 2) array as is
            facecolors=colors,
            edgecolors="none",
            alpha=VOLUME_ALPHA,
            zorder=1,
        )
    )
    twin.set_xlim(ax.get_xlim())
    ax.yaxis.tick_right()  # twinx() moved the price labels to the left


def _price_limits(bars: Bars, overlays: list[PanelResult]) -> tuple[float, float]:
    ok = np.isfinite(bars.high) & np.isfinite(bars.low)
    if not ok.any():  # no finite candle: fit the overlays, or a unit range
        extents = [e for e in (finite_extent(r) for r in overlays) if e is not None]
        if not extents:
            return 0.0, 1.0
        lo, hi = min(e[0] for e in extents), max(e[1] for e in extents)
        pad = (hi - lo) * 0.04 or 1.0
        return lo - pad, hi + pad
    lo, hi = float(bars.low[ok].min()), float(bars.high[ok].max())
    rng = max(hi - lo, abs(hi) * 1e-4, 1e-9)
    for result in overlays:
        ext = finite_extent(result)
        if ext is not None:  # follow overlays, but never zoom out more than half a range each way
            lo, hi = min(lo, max(ext[0], lo - rng * 0.5)), max(hi, min(ext[1], hi + rng * 0.5))
    pad = (hi - lo) * 0.04 or 1.0
    return lo - pad, hi + pad


def _title(fig: Figure, bars: Bars, symbol: str | None, interval: str, scale: Scale, top: float) -> None:
    name = symbol or "Sample data"
    text = f"{name}  ·  {interval}"
    if len(bars):
        last, first = float(bars.close[-1]), float(bars.close[0])
        change = (last - first) / first * 100 if first else 0.0
        text += f"  ·  {last:,.6g}  ({change:+.2f}% over {len(bars)} bars)"
    fig.text(0.01, 1 - top / 2, text, ha="left", va="center", fontsize=scale.title, color=TEXT, fontweight="bold")


def render_png(
    bars: Bars,
    panels: list[tuple[str, PanelResult]],
    *,
    symbol: str | None,
    interval: str,
    width: int,
    height: int,
) -> bytes:
    """A PNG of exactly ``width`` × ``height`` pixels."""
    scale = Scale.for_size(width, height)
    fig = Figure(figsize=(width / 100, height / 100), dpi=100, facecolor=BACKGROUND)
    FigureCanvasAgg(fig)
    overlays = [r for _, r in panels if r.is_overlay]
    panes = [(key, r) for key, r in panels if not r.is_overlay]
    top = min(0.12, (scale.title * 2.4) / height * 100 / 100 * 1.0 + 0.02)
    bottom = min(0.12, scale.small * 2.6 / height + 0.01)
    left, right = 0.01, 1 - min(0.12, scale.small * 7.5 / width + 0.01)
    avail = 1 - top - bottom
    price_h = avail * (PRICE_SHARE if panes else 1.0)
    pane_h = (avail - price_h) / len(panes) if panes else 0.0
    n = len(bars)
    x = np.arange(n, dtype=np.float64)
    xlim = (-1.0, n + max(1.0, n * 0.02)) if n else (0.0, 1.0)

    price_ax = fig.add_axes((left, 1 - top - price_h, right - left, price_h))
    axes = [price_ax]
    for i in range(len(panes)):
        axes.append(fig.add_axes((left, 1 - top - price_h - (i + 1) * pane_h, right - left, pane_h), sharex=price_ax))
    for ax in axes:
        _style(ax, scale)
    price_ax.set_xlim(*xlim)
    _title(fig, bars, symbol, interval, scale, top)

    if n == 0:
        price_ax.text(
            0.5,
            0.5,
            "no data",
            transform=price_ax.transAxes,
            ha="center",
            va="center",
            color=MUTED,
            fontsize=scale.title,
        )
    else:
        _candles(price_ax, bars, x, scale)
        price_ax.set_ylim(*_price_limits(bars, overlays))
        handles = []
        for result in overlays:
            draw_hbars(price_ax, result)
            handles += draw_result(price_ax, result, x, scale)
        _volume(price_ax, bars, x)
        legend(price_ax, " · ".join(r.label for r in overlays) or "Price", handles, scale)
    for ax, (key, result) in zip(axes[1:], panes, strict=True):
        handles = draw_result(ax, result, x, scale) if n else []
        if result.y_range is not None and all(np.isfinite(result.y_range)):
            ax.set_ylim(*result.y_range)
        else:
            ext = finite_extent(result)
            if ext is not None:
                pad = (ext[1] - ext[0]) * 0.08 or abs(ext[0]) * 0.1 or 1.0
                ax.set_ylim(ext[0] - pad, ext[1] + pad)
        legend(ax, result.label if key == result.label else f"{result.label}", handles, scale)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    if n:
        count = max(2, min(10, int(width / (scale.small * 11))))
        ticks = np.unique(np.linspace(n * 0.05, (n - 1) * 0.97, count).round().astype(int))
        axes[-1].xaxis.set_major_locator(FixedLocator(ticks.tolist()))
        axes[-1].set_xticklabels(_date_labels(bars, ticks))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, facecolor=BACKGROUND, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def warm_up() -> None:
    """Import and render once, so the first real chart does not pay for fonts and caches."""
    from engine.sample_data import sample_bars

    render_png(sample_bars(20), [], symbol=None, interval="4h", width=400, height=300)
