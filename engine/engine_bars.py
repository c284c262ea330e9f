"""Chart data from the live engine first: a BarsSource that only falls back to REST when it must.

``generate_chart`` for a market the engine follows reads the engine's window (closed bars
plus the forming kline, as a REST fetch would return them) and makes no request.  When
the market is not followed, the source is not Binance, the window is still empty, or
more bars are asked for than the window holds, the wrapped source is used.
"""

from __future__ import annotations

from typing import Protocol

from engine.bars import Bars
from engine.live import LiveEngine


class _Fetch(Protocol):
    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars: ...


class EngineFirstBars:
    """Implements engine.charts.service.BarsSource over a LiveEngine and a fallback source."""

    def __init__(self, engine: LiveEngine, fallback: _Fetch) -> None:
        self._engine = engine
        self._fallback = fallback

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        if source in ("auto", "binance") and self._engine.follows(symbol, interval):
            window = self._engine.window_bars(symbol, interval, bars, include_open=True)
            if window is not None and len(window) >= bars:
                return window
        return await self._fallback.fetch(symbol, interval, bars, source)
