"""OPEN_INTEREST: Binance futures open interest (notional value) per bar."""

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
from engine.indicators.model import Fill, Line, PanelResult
from engine.market_data.intervals import interval_seconds

LABEL = "OI"


async def _fetch(sources: ExternalSources, bars: Bars, params: Params, ctx: ComputeContext) -> Any:
    blocked = unavailable_before_fetch(bars, ctx, needs_crypto=True)
    if blocked is not None:
        return blocked
    assert ctx.symbol is not None
    return await sources.open_interest(ctx.symbol.upper(), futures_period(ctx.interval))


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    data = fetched_series(bars, ctx, needs_crypto=True)
    if isinstance(data, ExternalUnavailable):
        return no_data(LABEL, data.reason)
    assert bars.times is not None
    bar_len = bar_seconds(bars, ctx.interval)
    max_age = 2 * max(bar_len, interval_seconds(futures_period(ctx.interval)))
    oi, _ = align_asof(bars.times, bar_len, data.times, data.columns["value"], max_age)
    if not np.isfinite(oi).any():
        return no_data(LABEL, NO_OVERLAP)
    result = PanelResult(label=LABEL, is_overlay=False)
    result.lines.append(Line(oi, colors.BLUE, label="OI"))
    result.fills.append(Fill(oi, np.zeros(len(oi)), colors.BLUE, alpha=0.1))
    return result


OPEN_INTEREST = IndicatorDef(
    name="oi",
    kind="external",
    description=(
        "Open Interest — total outstanding futures contracts' value from Binance USD-M "
        "(GET /futures/data/openInterestHist, sumOpenInterestValue). Formula: each bar shows the latest "
        "sample up to the bar's end, null when that sample is older than 2 × max(bar, sample period). "
        "Binance keeps about 30 days of history; non-crypto symbols have no data."
    ),
    compute=_compute,
    aliases=("open_interest",),
    fetch=_fetch,
)
