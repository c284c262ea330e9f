"""LONG_SHORT: Binance's global long/short account ratio as long and short fractions."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.bars import Bars
from engine.indicators import colors
from engine.indicators.base import ComputeContext, ExternalUnavailable, IndicatorDef, Params
from engine.indicators.external.series import (
    NO_OVERLAP,
    align_asof,
    bar_seconds,
    fetched_series,
    futures_period,
    no_data,
    unavailable_before_fetch,
)
from engine.indicators.external.sources import ExternalSources
from engine.indicators.model import Fill, HLine, Line, PanelResult
from engine.market_data.intervals import interval_seconds

LABEL = "L/S"


async def _fetch(sources: ExternalSources, bars: Bars, params: Params, ctx: ComputeContext) -> Any:
    blocked = unavailable_before_fetch(bars, ctx, needs_crypto=True)
    if blocked is not None:
        return blocked
    assert ctx.symbol is not None
    return await sources.long_short_ratio(ctx.symbol.upper(), futures_period(ctx.interval))


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    data = fetched_series(bars, ctx, needs_crypto=True)
    if isinstance(data, ExternalUnavailable):
        return no_data(LABEL, data.reason)
    assert bars.times is not None
    bar_len = bar_seconds(bars, ctx.interval)
    max_age = 2 * max(bar_len, interval_seconds(futures_period(ctx.interval)))
    long, _ = align_asof(bars.times, bar_len, data.times, data.columns["long"], max_age)
    short, _ = align_asof(bars.times, bar_len, data.times, data.columns["short"], max_age)
    if not np.isfinite(long).any():
        return no_data(LABEL, NO_OVERLAP)
    result = PanelResult(label=LABEL, is_overlay=False, y_range=(0.0, 1.0))
    result.lines.append(Line(long, colors.UP, label="Long"))
    result.lines.append(Line(short, colors.DOWN, label="Short"))
    result.fills.append(Fill(long, short, colors.GREY, alpha=0.12))
    result.hlines.append(HLine(0.5, colors.GREY))
    return result


LONG_SHORT = IndicatorDef(
    name="long_short",
    kind="external",
    description=(
        "Long/Short Ratio — account positioning on Binance USD-M (GET /futures/data/globalLongShortAccountRatio). "
        "Formula: lines Long = longAccount and Short = shortAccount (fractions of accounts, Long + Short = 1); "
        "each bar shows the latest sample up to its end, null when older than 2 × max(bar, sample period). "
        "Non-crypto symbols have no data."
    ),
    compute=_compute,
    aliases=("ls_ratio",),
    fetch=_fetch,
)
