"""Computing a set of requested indicators over one bar series.

External data is fetched first, concurrently and with a deadline, holding no lock; a
failed fetch becomes :class:`ExternalUnavailable` and the indicator degrades to a labelled
"(no data: reason)" result.  Then every indicator computes once; the same results feed the
summary, the series and the renderer, so nothing is computed (or fetched) twice.

Charts compute each indicator over its own warm-up plus the shown bars and cut the result
to the shown bars (:func:`warm_inputs`, :func:`compute_shown`; rules in engine.indicators.warmup).
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
from engine.indicators.warmup import shown_part, warmup_of

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


async def fetch_external(
    requests: Sequence[IndicatorRequest],
    bars: Bars,
    *,
    symbol: str | None,
    interval: str,
    sources: Any = None,
) -> list[Any]:
    """The external data of each request, fetched concurrently (None for those that fetch nothing)."""
    return await fetch_external_each(
        requests, [bars] * len(requests), symbol=symbol, interval=interval, sources=sources
    )


async def fetch_external_each(
    requests: Sequence[IndicatorRequest],
    inputs: Sequence[Bars],
    *,
    symbol: str | None,
    interval: str,
    sources: Any = None,
) -> list[Any]:
    """:func:`fetch_external` with each request's own bars (``inputs[i]`` for ``requests[i]``)."""
    base = ComputeContext(symbol=symbol, interval=interval)
    externals = [i for i, r in enumerate(requests) if r.definition.fetch is not None]
    fetched: list[Any] = [None] * len(requests)
    if externals:
        results = await asyncio.gather(*(_fetch_one(requests[i], inputs[i], base, sources) for i in externals))
        for i, data in zip(externals, results, strict=True):
            fetched[i] = data
    return fetched


def warm_inputs(requests: Sequence[IndicatorRequest], bars: Bars, shown: int, interval: str) -> list[Bars]:
    """Each request's input: the newest ``shown`` bars plus as much of its own warm-up as ``bars`` holds."""
    return [bars.tail(shown + warmup_of(r, interval)) for r in requests]


def compute_shown(
    requests: Sequence[IndicatorRequest],
    inputs: Sequence[Bars],
    shown: int,
    *,
    symbol: str | None,
    interval: str,
    fetched: Sequence[Any],
) -> list[PanelResult]:
    """Compute every request over its input (:func:`warm_inputs`) and cut it to the newest ``shown`` bars."""
    out = []
    for r, data, ext in zip(requests, inputs, fetched, strict=True):
        result = r.definition.compute(data, r.params, ComputeContext(symbol=symbol, interval=interval, external=ext))
        out.append(shown_part(result, len(data), min(shown, len(data))))
    return out


def compute_fetched(
    requests: Sequence[IndicatorRequest], bars: Bars, *, symbol: str | None, interval: str, fetched: Sequence[Any]
) -> list[PanelResult]:
    """Compute every request with its pre-fetched data (synchronous: CPU only, no I/O; runs in render workers)."""
    return [
        r.definition.compute(bars, r.params, ComputeContext(symbol=symbol, interval=interval, external=data))
        for r, data in zip(requests, fetched, strict=True)
    ]


async def compute_requests(
    requests: Sequence[IndicatorRequest],
    bars: Bars,
    *,
    symbol: str | None,
    interval: str,
    sources: Any = None,
) -> list[tuple[IndicatorRequest, PanelResult]]:
    """Compute every request (fetching external data first) and pair each with its result."""
    fetched = await fetch_external(requests, bars, symbol=symbol, interval=interval, sources=sources)
    results = compute_fetched(requests, bars, symbol=symbol, interval=interval, fetched=fetched)
    return list(zip(requests, results, strict=True))


def compute_sync(request: IndicatorRequest, bars: Bars, ctx: ComputeContext | None = None) -> PanelResult:
    """Compute one non-external indicator synchronously (tests, benchmarks, the engine)."""
    return request.definition.compute(bars, request.params, ctx or ComputeContext())
