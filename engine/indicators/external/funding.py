"""FUNDING: the Binance perpetual funding rate, in percent, as a per-bar histogram."""

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
    no_data,
    unavailable_before_fetch,
)
from engine.indicators.external.sources import ExternalSources
from engine.indicators.model import Histogram, HLine, PanelResult

LABEL = "Funding"
FUNDING_PERIOD_S = 8 * 3600


async def _fetch(sources: ExternalSources, bars: Bars, params: Params, ctx: ComputeContext) -> Any:
    blocked = unavailable_before_fetch(bars, ctx, needs_crypto=True)
    if blocked is not None:
        return blocked
    assert ctx.symbol is not None
    return await sources.funding_rate(ctx.symbol.upper())


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    data = fetched_series(bars, ctx, needs_crypto=True)
    if isinstance(data, ExternalUnavailable):
        return no_data(LABEL, data.reason)
    assert bars.times is not None
    bar_len = bar_seconds(bars, ctx.interval)
    rate, _ = align_asof(bars.times, bar_len, data.times, data.columns["rate"], FUNDING_PERIOD_S)
    if not np.isfinite(rate).any():
        return no_data(LABEL, NO_OVERLAP)
    pct = rate * 100.0
    bar_colors = [colors.UP if v >= 0 else colors.DOWN if v < 0 else colors.GREY for v in pct.tolist()]
    result = PanelResult(label=LABEL, is_overlay=False)
    result.histograms.append(Histogram(pct, bar_colors, bottom=0.0))
    result.hlines.append(HLine(0.0, colors.GREY))
    return result


FUNDING = IndicatorDef(
    name="funding",
    kind="external",
    description=(
        "Funding Rate — crypto perpetual futures funding from Binance USD-M (GET /fapi/v1/fundingRate). "
        "Formula: histogram = rate × 100 (percent per funding period); each bar shows the latest settlement "
        "made by the bar's end and at most 8 h before its open, else null. Non-crypto symbols have no data."
    ),
    compute=_compute,
    aliases=("funding_rate",),
    fetch=_fetch,
)
