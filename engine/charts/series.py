"""The full-data series payload (contract §4.2): every bar and every per-bar value.

All value arrays have exactly one entry per bar (null where not finite).  Beyond chartgen,
decorative dots are kept (``dots``: supertrend, SAR, Heikin-Ashi and KVF carry their main
series there) instead of being dropped.  Only the shown bars are listed; ``warmup_bars`` (real
market data only) says how much history before them the indicators were computed over.
"""

from __future__ import annotations

from typing import Any

from engine.bars import Bars
from engine.charts.jsonout import finite_or_none, values
from engine.indicators.model import PanelResult


def bars_block(bars: Bars) -> list[dict[str, Any]]:
    """``[{t,o,h,l,c,v}]`` with t the open time in unix seconds (null for sample data)."""
    times = [None] * len(bars) if bars.times is None else bars.times.tolist()
    o, h, l, c, v = (values(a) for a in (bars.open, bars.high, bars.low, bars.close, bars.volume))
    return [{"t": times[i], "o": o[i], "h": h[i], "l": l[i], "c": c[i], "v": v[i]} for i in range(len(bars))]


def indicator_series(result: PanelResult, bars: Bars) -> dict[str, Any]:
    """One indicator's full series; keys appear only for non-empty channels."""

    def t(i: int) -> int | None:
        return bars.time_of(i) if 0 <= i < len(bars) else None

    out: dict[str, Any] = {"label": result.label, "is_overlay": result.is_overlay}
    if result.y_range is not None:
        out["y_range"] = [finite_or_none(result.y_range[0]), finite_or_none(result.y_range[1])]
    if result.lines:
        out["lines"] = [{"index": i, "label": ln.label, "values": values(ln.y)} for i, ln in enumerate(result.lines)]
    if result.histograms:
        out["histogram"] = [{"index": i, "values": values(h.y)} for i, h in enumerate(result.histograms)]
    signals = result.signals()
    if signals:
        out["signals"] = [{"x": d.x, "t": t(d.x), "y": float(d.y), "label": d.label} for d in signals]
    dots = [d for d in result.dots if d.label is None and finite_or_none(d.y) is not None]
    if dots:
        out["dots"] = [{"x": d.x, "t": t(d.x), "y": float(d.y)} for d in dots]
    if result.hlines:
        out["hlines"] = [{"y": finite_or_none(h.y)} for h in result.hlines]
    if result.fills:
        out["fills"] = [{"y1": values(f.y1), "y2": values(f.y2)} for f in result.fills]
    if result.hbars:
        out["hbars"] = [
            {
                "y": finite_or_none(b.y),
                "height": finite_or_none(b.height),
                "width": finite_or_none(b.width),
                "offset": finite_or_none(b.offset),
                "left": b.left,
            }
            for b in result.hbars
        ]
    if result.divlines:
        out["divlines"] = [
            {
                "x1": d.x1,
                "t1": t(d.x1),
                "y1": finite_or_none(d.y1),
                "x2": d.x2,
                "t2": t(d.x2),
                "y2": finite_or_none(d.y2),
                "dashed": d.dashed,
            }
            for d in result.divlines
        ]
    return out


def series_payload(
    bars: Bars,
    results: list[tuple[str, PanelResult]],
    *,
    symbol: str | None,
    interval: str,
    warmup_bars: int | None = None,
) -> dict[str, Any]:
    """The generate_chart series payload (``warmup_bars`` only when given: real market data)."""
    out: dict[str, Any] = {"symbol": symbol, "interval": interval}
    if warmup_bars is not None:
        out["warmup_bars"] = warmup_bars
    out["bars"] = bars_block(bars)
    out["indicators"] = {key: indicator_series(r, bars) for key, r in results}
    return out
