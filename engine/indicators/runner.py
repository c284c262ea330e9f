"""Computing a set of requested indicators over one bar series.

External data is fetched first, concurrently and with a deadline, holding no lock; a
failed fetch becomes :class:`ExternalUnavailable` and the indicator degrades to a labelled
"(no data: reason)" result.  Then every indicator computes once; the same results feed the
summary, the series and the renderer, so nothing is computed (or fetched) twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import structlog

from engine.bars import Bars
from engine.indicators.base import ComputeContext, ExternalUnavailable
from engine.indicators.model import PanelResult
from engine.indicators.registry import IndicatorRequest

log = structlog.get_logger(__name__)


async def _fetch_one(req: IndicatorRequest, bars: Bars, ctx: ComputeContext, sources: Any) -> Any:
    assert req.definition.fetch is not None
    if sources is None:
        return ExternalUnavailable("external data disabled")
    try:
        return await req.definition.fetch(sources, bars, req.params, ctx)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - any fetch failure degrades to "no data"
        log.warning("external_fetch_failed", indicator=req.definition.name, error=str(exc))
        return ExternalUnavailable(str(exc) or type(exc).__name__)


async def compute_requests(
    requests: Sequence[IndicatorRequest],
    bars: Bars,
    *,
    symbol: str | None,
    interval: str,
    sources: Any = None,
) -> list[tuple[IndicatorRequest, PanelResult]]:
    """Compute every request (fetching external data first) and pair each with its result."""
    base = ComputeContext(symbol=symbol, interval=interval)
    externals = [r for r in requests if r.definition.fetch is not None]
    fetched: dict[int, Any] = {}
    if externals:
        results = await asyncio.gather(*(_fetch_one(r, bars, base, sources) for r in externals))
        fetched = {id(r): data for r, data in zip(externals, results, strict=True)}
    out: list[tuple[IndicatorRequest, PanelResult]] = []
    for r in requests:
        ctx = ComputeContext(symbol=symbol, interval=interval, external=fetched.get(id(r)))
        out.append((r, r.definition.compute(bars, r.params, ctx)))
    return out


def compute_sync(request: IndicatorRequest, bars: Bars, ctx: ComputeContext | None = None) -> PanelResult:
    """Compute one non-external indicator synchronously (tests, benchmarks, the engine)."""
    return request.definition.compute(bars, request.params, ctx or ComputeContext())
