"""Building and running the live market engine from the settings (``--trade``).

Only the daemon builds the engine (design.md §1); the engine itself never reads settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from config import Settings
from daemon.scheduler import DaemonScheduler
from engine import (
    DEFAULT_REFUSED_BACKOFF_S,
    BinanceRest,
    BinanceTradeHistory,
    CcxtKlineRest,
    CcxtMarkets,
    CcxtStreamFeed,
    CcxtTradeHistory,
    EngineConfig,
    KlineRest,
    LiveEngine,
    MarketFeed,
    RateGate,
    StreamSettings,
    StreamSink,
    TradeHistory,
    build_pro_exchange,
    parse_requests,
)


def engine_config(settings: Settings) -> EngineConfig:
    """The engine's tuning from the settings (defaults where a field is absent).

    After the exchange refuses this location or IP (HTTP 451/403) streams and warm-ups wait
    minutes: 5, or ``engine_reconnect_max_s`` if that is longer.
    """
    return EngineConfig(
        window_bars=settings.engine_window_bars,
        backfill_concurrency=settings.engine_backfill_concurrency,
        summary_signals=settings.summary_signals,
        streams=StreamSettings(
            max_streams_per_connection=settings.engine_streams_per_connection,
            stall_timeout_s=settings.engine_stall_timeout_s,
            rotate_after_s=settings.engine_rotate_after_s,
            backoff_initial_s=settings.engine_reconnect_initial_s,
            backoff_max_s=settings.engine_reconnect_max_s,
            refused_backoff_s=max(DEFAULT_REFUSED_BACKOFF_S, settings.engine_reconnect_max_s),
        ),
    )


def ccxt_exchange(settings: Settings) -> Any:
    """The ccxt.pro exchange of ``--exchange``, with the URL overrides of the settings."""
    urls: dict[str, Any] = {}
    if settings.exchange_rest_url:
        urls["public"] = settings.exchange_rest_url
    if settings.exchange_ws_url:
        urls["ws"] = {"spot": settings.exchange_ws_url}
    return build_pro_exchange(settings.exchange, urls=urls or None)


def schedule_stream_rotation(engine: LiveEngine, scheduler: DaemonScheduler, settings: Settings) -> None:
    """ccxt streams are rotated by a periodic job on the daemon's scheduler (every
    ``engine_rotate_after_s``).  Binance streams rotate inside their own connection loop, each
    connection at its own age (engine/feed/binance_streams.py), so they need no job."""
    feed = engine.streams
    if not isinstance(feed, CcxtStreamFeed):
        return

    async def rotate() -> None:
        feed.restart_all("rotate")

    scheduler.every("ccxt-stream-rotation", settings.engine_rotate_after_s, rotate)


@dataclass(frozen=True, slots=True)
class EngineSources:
    """Where the engine's data comes from: REST for warm-up and backfill, the stream feed (None:
    Binance's own streams), the ccxt symbol catalogue, and the trade history a cluster worker's
    hand-over reads (daemon/worker/handover.py)."""

    rest: KlineRest
    feed: Callable[[StreamSink], MarketFeed] | None
    markets: CcxtMarkets | None
    trades: TradeHistory


def engine_sources(settings: Settings, session: aiohttp.ClientSession, config: EngineConfig) -> EngineSources:
    if settings.exchange == "binance":
        gate = RateGate(weight_limit=settings.binance_weight_limit)
        rest = BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s, gate=gate)
        return EngineSources(rest, None, None, BinanceTradeHistory(rest))
    exchange = ccxt_exchange(settings)
    markets = CcxtMarkets(exchange)

    def feed(sink: StreamSink) -> MarketFeed:
        return CcxtStreamFeed(exchange, markets, sink, config.streams)

    return EngineSources(
        CcxtKlineRest(exchange, markets, timeout_s=settings.http_timeout_s),
        feed,
        markets,
        CcxtTradeHistory(exchange, markets.unified, timeout_s=settings.http_timeout_s),
    )


@contextlib.asynccontextmanager
async def running_engine(
    settings: Settings,
    *,
    external_sources: Any = None,
    session: aiohttp.ClientSession | None = None,
    follow_configured: bool = True,
    sources_out: list[EngineSources] | None = None,
) -> AsyncIterator[LiveEngine]:
    """A running LiveEngine following every configured symbol × interval (unless
    ``follow_configured`` is False: a cluster worker follows its share); stopped on exit.
    ``sources_out`` receives the engine's :class:`EngineSources`."""
    requests = parse_requests(list(settings.indicators))
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp.ClientSession())
        config = engine_config(settings)
        sources = engine_sources(settings, session, config)
        if sources_out is not None:
            sources_out.append(sources)
        engine = LiveEngine(
            session=session,
            rest=sources.rest,
            stream_url=settings.binance_stream_url,
            indicators=requests,
            config=config,
            external_sources=external_sources,
            feed=sources.feed,
            catalogue=sources.markets,
        )
        if follow_configured:
            for symbol in settings.symbols:
                for interval in settings.intervals:
                    engine.follow(symbol, interval)
        async with engine.running():
            yield engine
