"""Historical market data over REST: Binance klines and Yahoo Finance charts, cached briefly.

Public surface: :class:`MarketData` (the facade the chart tools and the engine use),
:class:`BinanceRest` (klines with weight tracking and Retry-After), :class:`MarketDataError`.
"""

from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError, RateLimited
from engine.market_data.source import MarketData, detect_source

__all__ = ["BinanceRest", "MarketData", "MarketDataError", "RateLimited", "detect_source"]
