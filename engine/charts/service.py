"""ChartService: one request from bars to summary, series and PNG, computing everything once.

The MCP tools and the one-shot CLI are thin adapters over this service.  Market data
comes from a :class:`BarsSource` (Binance/Yahoo behind a cache), rendering from a
:class:`ChartRenderer` (a process pool in the daemon), so neither blocks the event loop.
No ticker means chartgen's seeded sample data; a failed fetch is an error, never sample
data under a real ticker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from engine.bars import Bars
from engine.charts.series import series_payload
from engine.charts.summary import indicator_summary, summary_payload
from engine.indicators.model import PanelResult
from engine.indicators.registry import IndicatorRequest
from engine.indicators.runner import compute_requests
from engine.sample_data import sample_bars

ChartFormat = Literal["png", "summary", "both", "series"]


class BarsSource(Protocol):
    """Where real market data comes from."""

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        """The newest ``bars`` bars of ``symbol`` at ``interval``; raises MarketDataError."""
        ...


class ChartRenderer(Protocol):
    """Turns bars and indicator results into PNG bytes (off the event loop)."""

    async def render(
        self,
        bars: Bars,
        panels: list[tuple[str, PanelResult]],
        *,
        symbol: str | None,
        interval: str,
        width: int,
        height: int,
    ) -> bytes: ...


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
    """What a chart request produced: PNG bytes and/or a JSON payload."""

    png: bytes | None = None
    payload: dict[str, Any] | None = None


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
            return sample_bars(bars)
        if self._market is None:
            raise RuntimeError("no market data source is configured")
        return await self._market.fetch(symbol, interval, bars, source)

    async def compute(
        self, bars: Bars, requests: Sequence[IndicatorRequest], *, symbol: str | None, interval: str
    ) -> list[tuple[str, PanelResult]]:
        """Every requested indicator, keyed by the name it was requested with."""
        pairs = await compute_requests(requests, bars, symbol=symbol, interval=interval, sources=self._external)
        return [(req.key, result) for req, result in pairs]

    async def chart(self, req: ChartRequest) -> ChartOutput:
        """Serve one generate_chart request."""
        bars = await self.load_bars(req.symbol, req.interval, req.bars, req.source)
        results = await self.compute(bars, req.indicators, symbol=req.symbol, interval=req.interval)
        png = None
        payload = None
        if req.format in ("png", "both"):
            png = await self._renderer.render(
                bars, results, symbol=req.symbol, interval=req.interval, width=req.width, height=req.height
            )
        if req.format in ("summary", "both"):
            payload = summary_payload(
                bars,
                results,
                symbol=req.symbol,
                interval=req.interval,
                max_signals=self._summary_signals,
                all_signals=req.all_signals,
            )
        elif req.format == "series":
            payload = series_payload(bars, results, symbol=req.symbol, interval=req.interval)
        return ChartOutput(png=png, payload=payload)

    async def indicator_values(
        self,
        symbol: str,
        interval: str,
        requests: Sequence[IndicatorRequest],
        *,
        bars: int = 200,
        source: str = "auto",
        all_signals: bool = False,
    ) -> dict[str, Any]:
        """The get_indicators payload computed from freshly fetched bars."""
        data = await self.load_bars(symbol, interval, bars, source)
        results = await self.compute(data, requests, symbol=symbol, interval=interval)
        return {
            "symbol": symbol,
            "interval": interval,
            "bars": len(data),
            "source": "fetched",
            "indicators": {
                key: indicator_summary(r, data, max_signals=self._summary_signals, all_signals=all_signals)
                for key, r in results
            },
        }
