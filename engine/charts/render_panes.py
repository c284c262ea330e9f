"""Drawing one indicator result (PanelResult) onto a matplotlib Axes, with collections.

Used for overlays on the price pane and for each panel pane.  Every per-bar series is
drawn against bar positions 0..n−1; NaN values leave gaps.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.lines import Line2D

from engine.charts.theme import MUTED, TEXT, Scale
from engine.indicators.model import PanelResult

MAX_LABELLED_SIGNALS = 15


def bar_rects(x: np.ndarray, bottom: np.ndarray, top: np.ndarray, half_width: float) -> np.ndarray:
    """Rectangle vertices (n, 4, 2) from bottom to top centred on x."""
    left, right = x - half_width, x + half_width
    return np.stack(
        [
            np.stack([left, bottom], 1),
            np.stack([left, top], 1),
            np.stack([right, top], 1),
            np.stack([right, bottom], 1),
        ],
        axis=1,
    )


def finite_extent(result: PanelResult) -> tuple[float, float] | None:
    """Min and max over the lines, histograms and fills of a result (None when nothing is finite)."""
    arrays = [ln.y for ln in result.lines] + [h.y for h in result.histograms]
    arrays += [f.y1 for f in result.fills] + [f.y2 for f in result.fills]
    arrays += [np.array([d.y for d in result.dots])] if result.dots else []
    vals = [a[np.isfinite(a)] for a in arrays if len(a)]
    vals = [v for v in vals if len(v)]
    if not vals:
        return None
    allv = np.concatenate(vals)
    return float(allv.min()), float(allv.max())


def draw_result(ax: Axes, result: PanelResult, x: np.ndarray, scale: Scale) -> list[Line2D]:
    """Draw every channel of ``result``; returns legend handles for its labelled lines."""
    handles: list[Line2D] = []
    for fill in result.fills:
        ok = np.isfinite(fill.y1) & np.isfinite(fill.y2)
        if ok.any():
            ax.fill_between(x, fill.y1, fill.y2, where=ok, color=fill.color, alpha=fill.alpha, linewidth=0, zorder=1)
    for hist in result.histograms:
        ok = np.isfinite(hist.y)
        if ok.any():
            verts = bar_rects(x[ok], np.full(ok.sum(), hist.bottom), hist.y[ok], 0.35)
            per_bar = len(hist.colors) == len(x)
            cols = np.asarray(hist.colors, dtype=object)[ok].tolist() if per_bar else (hist.colors[:1] or [MUTED])
            ax.add_collection(PolyCollection(verts, facecolors=cols, edgecolors="none", alpha=0.8, zorder=2))  # type: ignore[arg-type]  # matplotlib's stubs want a Sequence; it takes the (N, k, 2) array as is
    for h in result.hlines:
        if np.isfinite(h.y):
            ax.axhline(
                h.y, color=h.color, linewidth=0.7 * scale.line, linestyle="--" if h.dashed else "-", alpha=0.6, zorder=1
            )
    for ln in result.lines:
        if np.isfinite(ln.y).any():
            (handle,) = ax.plot(
                x,
                ln.y,
                color=ln.color,
                linewidth=ln.width * scale.line * 0.8,
                linestyle="--" if ln.dashed else "-",
                zorder=3,
                label=ln.label or "",
            )
            if ln.label:
                handles.append(handle)
    for dashed in (True, False):
        divs = [d for d in result.divlines if d.dashed is dashed and np.isfinite(d.y1) and np.isfinite(d.y2)]
        if divs:
            ax.add_collection(
                LineCollection(
                    [[(d.x1, d.y1), (d.x2, d.y2)] for d in divs],
                    colors=[d.color for d in divs],
                    linewidths=1.2 * scale.line,
                    linestyles="--" if dashed else "-",
                    zorder=4,
                )
            )
    _draw_dots(ax, result, scale)
    return handles


def _draw_dots(ax: Axes, result: PanelResult, scale: Scale) -> None:
    plain = [d for d in result.dots if d.label is None and np.isfinite(d.y)]
    if plain:
        ax.scatter(
            [d.x for d in plain],
            [d.y for d in plain],
            s=[(d.size * scale.marker) ** 2 for d in plain],
            c=[d.color for d in plain],
            linewidths=0,
            zorder=4,
        )
    signals = result.signals()
    if not signals:
        return
    ax.scatter(
        [d.x for d in signals],
        [d.y for d in signals],
        s=[(d.size * scale.marker * 1.2) ** 2 for d in signals],
        c=[d.color for d in signals],
        edgecolors=TEXT,
        linewidths=0.4 * scale.marker,
        zorder=5,
    )
    fontsize = scale.small * 0.85
    lo, hi = ax.get_xlim()
    fig = ax.get_figure(root=True)
    width_px = ax.get_position().width * fig.get_figwidth() * fig.dpi if fig is not None else 1000.0
    bars_per_px = (hi - lo) / max(width_px, 1.0)
    char_bars = fontsize * (100 / 72) * 0.6 * bars_per_px  # one character's width, in bars
    placed: list[tuple[float, float]] = []  # (centre, half width) of labels drawn, in bars
    for d in reversed(signals):  # newest first; a label that would overlap a newer one is skipped
        if len(placed) >= MAX_LABELLED_SIGNALS:
            break
        half = len(d.label or "") * char_bars / 2 + char_bars
        if any(abs(d.x - c) < half + h for c, h in placed):
            continue
        placed.append((float(d.x), half))
        ax.annotate(
            d.label or "",  # what matplotlib makes of None
            (d.x, d.y),
            xytext=(0, 5 * scale.marker),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=fontsize,
            color=d.color,
            zorder=6,
            annotation_clip=True,
        )


def draw_hbars(ax: Axes, result: PanelResult) -> None:
    """Profile bars anchored to the left or right edge of the pane (x in axes fraction, y in price)."""
    if not result.hbars:
        return
    verts = []
    cols = []
    for b in result.hbars:
        if not (np.isfinite(b.y) and np.isfinite(b.height) and np.isfinite(b.width)):
            continue
        x0 = b.offset if b.left else 1.0 - b.offset - b.width
        y0, y1 = b.y - b.height / 2, b.y + b.height / 2
        verts.append([(x0, y0), (x0, y1), (x0 + b.width, y1), (x0 + b.width, y0)])
        cols.append(b.color)
    if verts:
        alpha = result.hbars[0].alpha
        ax.add_collection(
            PolyCollection(
                verts, facecolors=cols, edgecolors="none", alpha=alpha, transform=ax.get_yaxis_transform(), zorder=1
            )
        )


def legend(ax: Axes, title: str, handles: list[Line2D], scale: Scale) -> None:
    """Pane title and its line labels in the top-left corner."""
    ax.text(
        0.005,
        0.98,
        title,
        transform=ax.transAxes,
        ha="left",
        va="top",
        fontsize=scale.font,
        color=TEXT,
        fontweight="bold",
        zorder=7,
    )
    if handles:
        leg = ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(0.0, 0.92),
            ncol=min(len(handles), 8),
            fontsize=scale.small * 0.95,
            frameon=False,
            handlelength=1.2,
            columnspacing=1.0,
            labelcolor=MUTED,
        )
        leg.set_zorder(7)
