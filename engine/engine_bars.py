"""Chart data from the live engine first: a BarsSource that only falls back to REST when it must.

``generate_chart`` for a market the engine follows reads the engine's window (closed bars
plus the forming kline, as a REST fetch would return them) and makes no request.  When
the market is not followed, the source is not Binance, the window is still empty, or
more bars are asked for than the window holds, the wrapped source is used.

Charts also ask for warm-up history before the shown bars (:meth:`EngineFirstBars.fetch_history`):
the window serves it when it holds shown + warm-up bars; otherwise REST is asked for all of
them, and if that fails while the window holds at least the shown bars, the window is used
with the warm-up it has (a degraded chart beats an error the window could have avoided).
"""

from __future__ import annotations

from typing import Protocol

import structlog

from engine.bars import Bars
from engine.live import LiveEngine
from engine.market_data.errors import MarketDataError

log = structlog.get_logger(__name__)


class _Fetch(Protocol):
    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars: ...


class EngineFirstBars:
    """Implements engine.charts.service.BarsSource (and HistorySource) over a LiveEngine and a fallback source."""

    def __init__(self, engine: LiveEngine, fallback: _Fetch) -> None:
        self._engine = engine
        self._fallback = fallback

    def _window(self, symbol: str, interval: str, bars: int, source: str) -> Bars | None:
        """The engine's newest ``bars`` bars (forming one included), or None when it does not follow them."""
        if source in ("auto", "binance") and self._engine.follows(symbol, interval):
            return self._engine.window_bars(symbol, interval, bars, include_open=True)
        return None

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        window = self._window(symbol, interval, bars, source)
        if window is not None and len(window) >= bars:
            return window
        return await self._fallback.fetch(symbol, interval, bars, source)

    async def fetch_history(self, symbol: str, interval: str, bars: int, warmup: int, source: str = "auto") -> Bars:
        """The newest ``bars + warmup`` bars: the window's, else REST's, else the window's ≥ ``bars``."""
        total = bars + warmup
        window = self._window(symbol, interval, total, source)
        if window is not None and len(window) >= total:
            return window
        try:
            return await self._fallback.fetch(symbol, interval, total, source)
        except MarketDataError as exc:
            if window is None or len(window) < bars:
                raise
            log.warning("chart_warmup_from_window", symbol=symbol, interval=interval, bars=len(window), error=str(exc))
            return window
