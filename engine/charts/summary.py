"""The compact summary payload (contract §4.1): price block and per-indicator digests.

A summary is what an AI client reads instead of a picture: last values of every line and
histogram, levels, ranges and the signals.  Unlike chartgen, signals are limited to the
most recent ones by default (``max_signals``); ``all_signals=True`` restores the full list.
The bars given are the shown ones; ``warmup_bars`` reports how much history before them the
indicators were computed over (engine.indicators.warmup) — real market data only: sample
data has no history, and its summary keeps chartgen's exact shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.bars import Bars
from engine.charts.jsonout import finite_or_none
from engine.indicators.model import PanelResult
from engine.indicators.primitives import last_finite


def _sequential_sum(xs: list[float]) -> float:
    total = 0.0
    for x in xs:
        total += x
    return total


def price_block(bars: Bars) -> dict[str, Any]:
    """The ``price`` object: first/last bar, range, total volume and change."""
    n = len(bars)
    if n == 0:
        return {"bars": 0}
    first_close = float(bars.close[0])
    last_close = float(bars.close[-1])
    change = None if first_close == 0 else (last_close - first_close) / first_close * 100.0
    return {
        "bars": n,
        "first": {"date": bars.date(0), "open": float(bars.open[0]), "close": first_close},
        "last": {
            "date": bars.date(n - 1),
            "open": float(bars.open[-1]),
            "high": float(bars.high[-1]),
            "low": float(bars.low[-1]),
            "close": last_close,
            "volume": float(bars.volume[-1]),
        },
        "range": {"high": float(np.nanmax(bars.high)), "low": float(np.nanmin(bars.low))},
        # sequential left-to-right sum, as chartgen's iterator sum (numpy's pairwise sum differs in the last ulp)
        "total_volume": _sequential_sum(bars.volume.tolist()),
        "change_pct": change,
    }


def indicator_summary(
    result: PanelResult, bars: Bars, *, max_signals: int | None = 20, all_signals: bool = False
) -> dict[str, Any]:
    """One indicator's digest; keys appear only for non-empty channels (contract §4.1)."""
    out: dict[str, Any] = {"label": result.label, "is_overlay": result.is_overlay}
    if result.y_range is not None:
        out["y_range"] = [finite_or_none(result.y_range[0]), finite_or_none(result.y_range[1])]
    if result.lines:
        out["lines"] = [
            {"index": i, "label": line.label, "last_value": last_finite(line.y)} for i, line in enumerate(result.lines)
        ]
    signals = result.signals()
    if signals:
        shown = signals if all_signals or max_signals is None else signals[-max_signals:]
        out["signals"] = [
            {
                "x": d.x,
                "y": float(d.y),
                "label": d.label,
                "t": bars.time_of(d.x) if 0 <= d.x < len(bars) else None,
            }
            for d in shown
        ]
        if len(shown) < len(signals):
            out["signals_total"] = len(signals)
    decorative = sum(1 for d in result.dots if d.label is None and np.isfinite(d.y))
    if decorative:
        out["decorative_dots"] = decorative
    if result.hlines:
        out["hlines"] = [{"y": finite_or_none(h.y)} for h in result.hlines]
    if result.histograms:
        out["histogram"] = [{"index": i, "last_value": last_finite(h.y)} for i, h in enumerate(result.histograms)]
    if result.fills:
        out["fills_count"] = len(result.fills)
    if result.hbars:
        top = sorted(result.hbars, key=lambda b: b.width, reverse=True)[:5]
        out["hbars_top"] = [{"y": finite_or_none(b.y), "weight": finite_or_none(b.width)} for b in top]
        out["hbars_count"] = len(result.hbars)
    if result.divlines:
        out["divergences"] = [
            {"x1": d.x1, "y1": finite_or_none(d.y1), "x2": d.x2, "y2": finite_or_none(d.y2), "dashed": d.dashed}
            for d in result.divlines
        ]
    return out


def _summaries(
    bars: Bars, results: list[tuple[str, PanelResult]], max_signals: int | None, all_signals: bool
) -> dict[str, Any]:
    """Each indicator's summary, keyed by the name as requested."""
    return {key: indicator_summary(r, bars, max_signals=max_signals, all_signals=all_signals) for key, r in results}


def summary_payload(
    bars: Bars,
    results: list[tuple[str, PanelResult]],
    *,
    symbol: str | None,
    interval: str,
    max_signals: int | None = 20,
    all_signals: bool = False,
    warmup_bars: int | None = None,
) -> dict[str, Any]:
    """The generate_chart summary: symbol, interval, price block, warm-up used (if given) and indicators."""
    out: dict[str, Any] = {"symbol": symbol, "interval": interval, "price": price_block(bars)}
    if warmup_bars is not None:
        out["warmup_bars"] = warmup_bars
    out["indicators"] = _summaries(bars, results, max_signals, all_signals)
    return out


def indicators_payload(
    bars: Bars,
    results: list[tuple[str, PanelResult]],
    *,
    symbol: str | None,
    interval: str,
    source: str = "fetched",
    max_signals: int | None = 20,
    all_signals: bool = False,
    warmup_bars: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The get_indicators payload — the one builder, for fetched bars (``source="fetched"``) and
    for the live engine's window (``"engine_cache"``, with ``last_bar_time`` and ``stale`` in ``extra``)."""
    out: dict[str, Any] = {"symbol": symbol, "interval": interval, "bars": len(bars)}
    if warmup_bars is not None:
        out["warmup_bars"] = warmup_bars
    out["source"] = source
    out.update(extra or {})
    out["indicators"] = _summaries(bars, results, max_signals, all_signals)
    return out


def fetched_indicators_payload(
    bars: Bars,
    results: list[tuple[str, PanelResult]],
    *,
    symbol: str | None,
    interval: str,
    max_signals: int | None = 20,
    all_signals: bool = False,
    warmup_bars: int | None = None,
) -> dict[str, Any]:
    """The get_indicators payload computed from fetched bars (not the engine's window)."""
    return indicators_payload(
        bars,
        results,
        symbol=symbol,
        interval=interval,
        max_signals=max_signals,
        all_signals=all_signals,
        warmup_bars=warmup_bars,
    )
