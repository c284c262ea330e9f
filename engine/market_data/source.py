"""The market-data facade: choose Binance or Yahoo for a ticker, fetch, and cache briefly.

Source choice follows chartgen (contract §5.1): a ticker ending in a crypto quote asset
(USDT, BUSD, BTC, ETH, BNB, USDC, FDUSD) and longer than it goes to Binance, anything else
to Yahoo; ``source`` overrides.  A failed fetch raises MarketDataError — the caller shows it;
nothing here ever substitutes sample data for a real ticker.
"""

from __future__ import annotations

import aiohttp

from engine.bars import Bars
from engine.market_data.binance_rest import BinanceRest, rows_to_bars
from engine.market_data.errors import MarketDataError
from engine.market_data.intervals import to_binance
from engine.market_data.ttl_cache import TtlCache
from engine.market_data.yahoo import YahooChart

CRYPTO_QUOTES = ("USDT", "BUSD", "BTC", "ETH", "BNB", "USDC", "FDUSD")


def is_crypto(symbol: str) -> bool:
    """chartgen's crypto rule: ends with a quote asset and is longer than it."""
    s = symbol.upper()
    return any(s.endswith(q) and len(s) > len(q) for q in CRYPTO_QUOTES)


def detect_source(symbol: str) -> str:
    """``binance`` for crypto pairs, ``yahoo`` for everything else."""
    return "binance" if is_crypto(symbol) else "yahoo"


class MarketData:
    """Fetches bars for charts and indicator tools."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        binance_rest_url: str,
        yahoo_url: str,
        timeout_s: float = 10.0,
        cache_ttl_s: float = 15.0,
        binance: BinanceRest | None = None,
    ) -> None:
        self.binance = binance or BinanceRest(session, binance_rest_url, timeout_s=timeout_s)
        self.yahoo = YahooChart(session, yahoo_url, timeout_s=timeout_s)
        self._cache: TtlCache[Bars] = TtlCache(cache_ttl_s)

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        """The newest ``bars`` bars of ``symbol``; raises MarketDataError naming the cause."""
        chosen = detect_source(symbol) if source == "auto" else source
        if chosen not in ("binance", "yahoo"):
            raise MarketDataError(f"unknown source {source!r}; use auto, binance or yahoo")
        key = (chosen, symbol.upper() if chosen == "binance" else symbol, interval, bars)
        return await self._cache.get_or_fetch(key, lambda: self._fetch(chosen, symbol, interval, bars))

    async def _fetch(self, source: str, symbol: str, interval: str, bars: int) -> Bars:
        if source == "binance":
            rows = await self.binance.latest_klines(symbol.upper(), to_binance(interval), bars)
            if not rows:
                raise MarketDataError(f"Binance returned zero bars for {symbol.upper()} {interval}")
            return rows_to_bars(rows)
        return await self.yahoo.fetch(symbol, interval, bars)
