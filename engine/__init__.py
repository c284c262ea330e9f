"""Market data and analytics: bars, windows, feeds, indicators, signals and charts.

The engine knows nothing of alerts, brokers or MCP (design.md §1); it publishes events and
answers queries that those packages consume.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.bars import Bars, FloatArray, IntArray
    from engine.charts.chart_docs import ChartSurface, documentation
    from engine.charts.config_assets import UnknownAsset
    from engine.charts.config_builder import build
    from engine.charts.config_time import YAHOO_INTERVALS
    from engine.charts.config_vocabulary import INDICATOR_PHRASES
    from engine.charts.gate import RenderBusy, RenderGate
    from engine.charts.jobs import ChartJob, ChartJobOutput, run_chart_job
    from engine.charts.jsonout import pretty
    from engine.charts.pool import InlineRenderer, ProcessPoolRenderer
    from engine.charts.series import series_payload
    from engine.charts.service import BarsSource, ChartFormat, ChartRenderer, ChartRequest, ChartService
    from engine.engine_bars import EngineFirstBars
    from engine.events import BarClosed, EventBus, IndicatorsUpdated, Lagged, SubscriptionClosed, Tick
    from engine.feed.backfill import KlineRest
    from engine.feed.ccxt_feed import CcxtKlineRest, CcxtMarkets, CcxtStreamFeed, build_pro_exchange
    from engine.feed.health import DEFAULT_REFUSED_BACKOFF_S, REFUSED_HINT
    from engine.feed.protocol import MarketFeed, StreamSink, SymbolCatalogue
    from engine.feed.stream_manager import StreamManager
    from engine.feed.stream_settings import StreamSettings
    from engine.feed.sync import WindowSync
    from engine.indicator_state import IndicatorEngine, RequestId, request_id
    from engine.indicators.base import ComputeContext, IndicatorRequest
    from engine.indicators.external.sources import ExternalSources
    from engine.indicators.model import Dot, PanelResult
    from engine.indicators.newest import from_result
    from engine.indicators.params import IndicatorError
    from engine.indicators.registry import all_indicators, emitters, list_indicators_payload, lookup, parse_requests
    from engine.indicators.runner import compute_sync
    from engine.live import EngineConfig, LiveEngine
    from engine.market_data.binance_rest import BinanceRest, rows_to_bars
    from engine.market_data.errors import MarketDataError, RateLimited
    from engine.market_data.history import MAX_ROWS, HistoryArgumentError, HistorySource, period_start
    from engine.market_data.intervals import interval_seconds, to_binance
    from engine.market_data.quotes import QuoteSource, iso_utc
    from engine.market_data.rate_gate import RateGate
    from engine.market_data.source import MarketData, detect_source, is_crypto
    from engine.market_data.symbol_directory import SymbolDirectory
    from engine.market_data.symbol_search import SymbolSearch, matches
    from engine.market_data.trade_history import (
        MAX_SPAN_MS,
        BinanceTradeHistory,
        CcxtTradeHistory,
        TradeHistory,
        TradePrint,
    )
    from engine.sample_data import sample_bars
    from engine.signals import SIGNAL_LABELS, on_newest_bar
    from engine.windows import RollingWindow

_HOMES = {
    "BarClosed": "engine.events",
    "Bars": "engine.bars",
    "BarsSource": "engine.charts.service",
    "BinanceRest": "engine.market_data.binance_rest",
    "BinanceTradeHistory": "engine.market_data.trade_history",
    "CcxtKlineRest": "engine.feed.ccxt_feed",
    "CcxtMarkets": "engine.feed.ccxt_feed",
    "CcxtStreamFeed": "engine.feed.ccxt_feed",
    "CcxtTradeHistory": "engine.market_data.trade_history",
    "ChartFormat": "engine.charts.service",
    "ChartJob": "engine.charts.jobs",
    "ChartJobOutput": "engine.charts.jobs",
    "ChartRenderer": "engine.charts.service",
    "ChartRequest": "engine.charts.service",
    "ChartService": "engine.charts.service",
    "ChartSurface": "engine.charts.chart_docs",
    "ComputeContext": "engine.indicators.base",
    "DEFAULT_REFUSED_BACKOFF_S": "engine.feed.health",
    "Dot": "engine.indicators.model",
    "EngineConfig": "engine.live",
    "EngineFirstBars": "engine.engine_bars",
    "EventBus": "engine.events",
    "ExternalSources": "engine.indicators.external.sources",
    "FloatArray": "engine.bars",
    "HistoryArgumentError": "engine.market_data.history",
    "HistorySource": "engine.market_data.history",
    "INDICATOR_PHRASES": "engine.charts.config_vocabulary",
    "IndicatorEngine": "engine.indicator_state",
    "IndicatorError": "engine.indicators.params",
    "IndicatorRequest": "engine.indicators.base",
    "IndicatorsUpdated": "engine.events",
    "InlineRenderer": "engine.charts.pool",
    "IntArray": "engine.bars",
    "KlineRest": "engine.feed.backfill",
    "Lagged": "engine.events",
    "LiveEngine": "engine.live",
    "MAX_ROWS": "engine.market_data.history",
    "MAX_SPAN_MS": "engine.market_data.trade_history",
    "MarketData": "engine.market_data.source",
    "MarketDataError": "engine.market_data.errors",
    "MarketFeed": "engine.feed.protocol",
    "PanelResult": "engine.indicators.model",
    "ProcessPoolRenderer": "engine.charts.pool",
    "QuoteSource": "engine.market_data.quotes",
    "REFUSED_HINT": "engine.feed.health",
    "RateGate": "engine.market_data.rate_gate",
    "RateLimited": "engine.market_data.errors",
    "RenderBusy": "engine.charts.gate",
    "RenderGate": "engine.charts.gate",
    "RequestId": "engine.indicator_state",
    "RollingWindow": "engine.windows",
    "SIGNAL_LABELS": "engine.signals",
    "StreamManager": "engine.feed.stream_manager",
    "StreamSettings": "engine.feed.stream_settings",
    "StreamSink": "engine.feed.protocol",
    "SubscriptionClosed": "engine.events",
    "SymbolCatalogue": "engine.feed.protocol",
    "SymbolDirectory": "engine.market_data.symbol_directory",
    "SymbolSearch": "engine.market_data.symbol_search",
    "Tick": "engine.events",
    "TradeHistory": "engine.market_data.trade_history",
    "TradePrint": "engine.market_data.trade_history",
    "UnknownAsset": "engine.charts.config_assets",
    "WindowSync": "engine.feed.sync",
    "YAHOO_INTERVALS": "engine.charts.config_time",
    "all_indicators": "engine.indicators.registry",
    "build": "engine.charts.config_builder",
    "build_pro_exchange": "engine.feed.ccxt_feed",
    "compute_sync": "engine.indicators.runner",
    "detect_source": "engine.market_data.source",
    "documentation": "engine.charts.chart_docs",
    "emitters": "engine.indicators.registry",
    "from_result": "engine.indicators.newest",
    "interval_seconds": "engine.market_data.intervals",
    "is_crypto": "engine.market_data.source",
    "iso_utc": "engine.market_data.quotes",
    "list_indicators_payload": "engine.indicators.registry",
    "lookup": "engine.indicators.registry",
    "matches": "engine.market_data.symbol_search",
    "on_newest_bar": "engine.signals",
    "parse_requests": "engine.indicators.registry",
    "period_start": "engine.market_data.history",
    "pretty": "engine.charts.jsonout",
    "request_id": "engine.indicator_state",
    "rows_to_bars": "engine.market_data.binance_rest",
    "run_chart_job": "engine.charts.jobs",
    "sample_bars": "engine.sample_data",
    "series_payload": "engine.charts.series",
    "to_binance": "engine.market_data.intervals",
}
"""Where each public name lives, imported on first use (PEP 562) so that importing the package stays
cheap and its modules free of circles through it; a name whose home is itself a module is that module."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    home, _, attr = home.partition(":")  # "module:attr": the name the module gives it, when two would clash
    module = importlib.import_module(home)
    value = module if home.endswith(f".{name}") and not hasattr(module, name) else getattr(module, attr or name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_REFUSED_BACKOFF_S",
    "INDICATOR_PHRASES",
    "MAX_ROWS",
    "MAX_SPAN_MS",
    "REFUSED_HINT",
    "SIGNAL_LABELS",
    "YAHOO_INTERVALS",
    "BarClosed",
    "Bars",
    "BarsSource",
    "BinanceRest",
    "BinanceTradeHistory",
    "CcxtKlineRest",
    "CcxtMarkets",
    "CcxtStreamFeed",
    "CcxtTradeHistory",
    "ChartFormat",
    "ChartJob",
    "ChartJobOutput",
    "ChartRenderer",
    "ChartRequest",
    "ChartService",
    "ChartSurface",
    "ComputeContext",
    "Dot",
    "EngineConfig",
    "EngineFirstBars",
    "EventBus",
    "ExternalSources",
    "FloatArray",
    "HistoryArgumentError",
    "HistorySource",
    "IndicatorEngine",
    "IndicatorError",
    "IndicatorRequest",
    "IndicatorsUpdated",
    "InlineRenderer",
    "IntArray",
    "KlineRest",
    "Lagged",
    "LiveEngine",
    "MarketData",
    "MarketDataError",
    "MarketFeed",
    "PanelResult",
    "ProcessPoolRenderer",
    "QuoteSource",
    "RateGate",
    "RateLimited",
    "RenderBusy",
    "RenderGate",
    "RequestId",
    "RollingWindow",
    "StreamManager",
    "StreamSettings",
    "StreamSink",
    "SubscriptionClosed",
    "SymbolCatalogue",
    "SymbolDirectory",
    "SymbolSearch",
    "Tick",
    "TradeHistory",
    "TradePrint",
    "UnknownAsset",
    "WindowSync",
    "all_indicators",
    "build",
    "build_pro_exchange",
    "compute_sync",
    "detect_source",
    "documentation",
    "emitters",
    "from_result",
    "interval_seconds",
    "is_crypto",
    "iso_utc",
    "list_indicators_payload",
    "lookup",
    "matches",
    "on_newest_bar",
    "parse_requests",
    "period_start",
    "pretty",
    "request_id",
    "rows_to_bars",
    "run_chart_job",
    "sample_bars",
    "series_payload",
    "to_binance",
]
