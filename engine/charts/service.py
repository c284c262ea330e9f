"""ChartService: one request from bars to summary, series and PNG, computing everything once.

The MCP tools and the one-shot CLI are thin adapters over this service.  Market data
comes from a :class:`BarsSource` (Binance/Yahoo behind a cache), rendering from a
:class:`ChartRenderer` (a process pool in the daemon), so neither blocks the event loop.
No ticker means chartgen's seeded sample data; a failed fetch is an error, never sample
data under a real ticker.

``bars`` is what is shown.  For a real ticker the service also fetches the warm-up history
its indicators need before the first shown bar (engine.indicators.warmup: the largest
warm-up among the requested indicators, at most ``MAX_WARMUP_BARS``), computes each
indicator over its own warm-up plus the shown bars and shows and lists only the shown bars,
so lines are defined from the left edge.  A source with less history gives what it has (lines
then start where they become defined).  Sample data has no history before its first bar.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from engine.bars import Bars
from engine.charts.jobs import ChartJob, ChartJobOutput, JobFormat
from engine.charts.jsonout import pretty
from engine.charts.summary import fetched_indicators_payload, summary_payload
from engine.indicators.model import PanelResult
from engine.indicators.registry import IndicatorRequest
from engine.indicators.runner import compute_shown, fetch_external_each, warm_inputs
from engine.indicators.warmup import needed_warmup
from engine.sample_data import sample_bars

ChartFormat = Literal["png", "summary", "both", "series"]


@functools.lru_cache(maxsize=8)
def _sample_bars(n: int) -> Bars:
    """chartgen's seeded sample data (deterministic, and 25 ms for 5000 bars: made once per size)."""
    return sample_bars(n)


class BarsSource(Protocol):
    """Where real market data comes from."""

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        """The newest ``bars`` bars of ``symbol`` at ``interval``; raises MarketDataError."""
        ...


@runtime_checkable
class HistorySource(Protocol):
    """A BarsSource that can settle for less warm-up history than asked (engine.engine_bars)."""

    async def fetch_history(self, symbol: str, interval: str, bars: int, warmup: int, source: str = "auto") -> Bars:
        """The newest ``bars + warmup`` bars, or as many as can be had when that is at least ``bars``."""
        ...


class ChartRenderer(Protocol):
    """Runs chart jobs (indicators, PNG, payload JSON) off the event loop, each client in turn."""

    async def run(self, job: ChartJob) -> ChartJobOutput:
        """The job's output; raises :class:`~engine.charts.gate.RenderBusy` when the caller's queue is full."""
        ...


@dataclass(frozen=True, slots=True)
class ChartRequest:
    """A validated generate_chart request."""

    symbol: str | None
    interval: str
    indicators: Sequence[IndicatorRequest]
    bars: int = 200
    width: int = 1920
    height: int = 1080
    format: ChartFormat = "png"
    source: str = "auto"
    all_signals: bool = False


@dataclass(frozen=True, slots=True)
class ChartOutput:
    """What a chart request produced: PNG bytes and/or the JSON payload's text."""

    png: bytes | None = None
    text: str | None = None


class ChartService:
    """Fetch (or synthesise) bars, compute indicators once, then build payloads and PNG."""

    def __init__(
        self,
        market: BarsSource | None,
        renderer: ChartRenderer,
        *,
        external_sources: Any = None,
        summary_signals: int = 20,
    ) -> None:
        self._market = market
        self._renderer = renderer
        self._external = external_sources
        self._summary_signals = summary_signals

    async def load_bars(self, symbol: str | None, interval: str, bars: int, source: str = "auto") -> Bars:
        """Sample data without a symbol, otherwise real data (errors propagate)."""
        if symbol is None:
            return _sample_bars(bars)
        if self._market is None:
            raise RuntimeError("no market data source is configured")
        return await self._market.fetch(symbol, interval, bars, source)

    @staticmethod
    def warmup_for(symbol: str | None, interval: str, requests: Sequence[IndicatorRequest]) -> int:
        """Bars of history to fetch before the first shown bar (none for sample data)."""
        return 0 if symbol is None else needed_warmup(requests, interval)

    async def load_history(
        self, symbol: str | None, interval: str, bars: int, requests: Sequence[IndicatorRequest], source: str = "auto"
    ) -> tuple[Bars, int]:
        """(bars, shown): the shown bars preceded by what exists of the indicators' warm-up history."""
        warmup = self.warmup_for(symbol, interval, requests)
        if symbol is not None and warmup and isinstance(self._market, HistorySource):
            data = await self._market.fetch_history(symbol, interval, bars, warmup, source)
        else:
            data = await self.load_bars(symbol, interval, bars + warmup, source)
        return data, min(bars, len(data))

    async def compute(
        self,
        bars: Bars,
        requests: Sequence[IndicatorRequest],
        *,
        symbol: str | None,
        interval: str,
        shown: int | None = None,
    ) -> list[tuple[str, PanelResult]]:
        """Every requested indicator on the newest ``shown`` bars (all when None), keyed by its requested name."""
        n = len(bars) if shown is None else min(shown, len(bars))
        inputs = warm_inputs(requests, bars, n, interval)
        fetched = await fetch_external_each(requests, inputs, symbol=symbol, interval=interval, sources=self._external)
        results = compute_shown(requests, inputs, n, symbol=symbol, interval=interval, fetched=fetched)
        return [(req.key, result) for req, result in zip(requests, results, strict=True)]

    async def chart(self, req: ChartRequest) -> ChartOutput:
        """Serve one generate_chart request.

        Only the I/O (bars, external data) and a small summary happen here.  A PNG, a series
        payload (up to 5000 bars of every channel: megabytes of JSON) and a large summary are
        built by the renderer, indicators included, off the event loop and in the caller's turn.
        """
        bars, shown = await self.load_history(req.symbol, req.interval, req.bars, req.indicators, req.source)
        if req.format == "summary" and _light(bars, req.indicators):
            results = await self.compute(bars, req.indicators, symbol=req.symbol, interval=req.interval, shown=shown)
            payload = summary_payload(
                bars.tail(shown),
                results,
                symbol=req.symbol,
                interval=req.interval,
                max_signals=self._summary_signals,
                all_signals=req.all_signals,
                warmup_bars=None if req.symbol is None else len(bars) - shown,
            )
            return ChartOutput(text=pretty(payload))
        job = await self._job(
            bars,
            shown,
            req.indicators,
            symbol=req.symbol,
            interval=req.interval,
            format=req.format,
            all_signals=req.all_signals,
            width=req.width,
            height=req.height,
        )
        out = await self._renderer.run(job)
        return ChartOutput(png=out.png, text=out.text)

    async def indicators_text(
        self,
        symbol: str,
        interval: str,
        requests: Sequence[IndicatorRequest],
        *,
        bars: int = 200,
        source: str = "auto",
        all_signals: bool = False,
    ) -> str:
        """The get_indicators payload (JSON text) computed from freshly fetched bars (a large one by the renderer)."""
        data, shown = await self.load_history(symbol, interval, bars, requests, source)
        if _light(data, requests):
            results = await self.compute(data, requests, symbol=symbol, interval=interval, shown=shown)
            payload = fetched_indicators_payload(
                data.tail(shown),
                results,
                symbol=symbol,
                interval=interval,
                max_signals=self._summary_signals,
                all_signals=all_signals,
                warmup_bars=len(data) - shown,
            )
            return pretty(payload)
        job = await self._job(
            data, shown, requests, symbol=symbol, interval=interval, format="indicators", all_signals=all_signals
        )
        out = await self._renderer.run(job)
        assert out.text is not None
        return out.text

    async def _job(
        self,
        bars: Bars,
        shown: int,
        requests: Sequence[IndicatorRequest],
        *,
        symbol: str | None,
        interval: str,
        format: JobFormat,
        all_signals: bool,
        width: int = 1920,
        height: int = 1080,
    ) -> ChartJob:
        """A job for the renderer, with the external data fetched (all its I/O done)."""
        inputs = warm_inputs(requests, bars, shown, interval)
        fetched = await fetch_external_each(requests, inputs, symbol=symbol, interval=interval, sources=self._external)
        return ChartJob(
            bars=bars,
            requests=tuple(requests),
            fetched=tuple(fetched),
            symbol=symbol,
            interval=interval,
            format=format,
            width=width,
            height=height,
            max_signals=self._summary_signals,
            all_signals=all_signals,
            shown=shown,
        )


INLINE_WORK = 10_000
"""Bars × indicators up to which a summary is computed on the event loop (a few ms at most:
5000 bars of the default three take 3 ms); beyond, it is a job (24 heavy indicators on 5000
bars took 257 ms of the loop)."""


def _light(bars: Bars, requests: Sequence[IndicatorRequest]) -> bool:
    return len(bars) * len(requests) <= INLINE_WORK
