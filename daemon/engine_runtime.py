"""Building and running the live market engine from the settings (``--trade``).

Only the daemon builds the engine (design.md §1); the engine itself never reads settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from config import Settings
from daemon.scheduler import DaemonScheduler
from engine.feed.backfill import KlineRest
from engine.feed.ccxt_feed import CcxtKlineRest, CcxtMarkets, CcxtStreamFeed, build_pro_exchange
from engine.feed.health import DEFAULT_REFUSED_BACKOFF_S
from engine.feed.protocol import MarketFeed, StreamSink
from engine.feed.stream_settings import StreamSettings
from engine.indicators.registry import parse_requests
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate


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


@contextlib.asynccontextmanager
async def running_engine(
    settings: Settings, *, external_sources: Any = None, session: aiohttp.ClientSession | None = None
) -> AsyncIterator[LiveEngine]:
    """A running LiveEngine following every configured symbol × interval; stopped on exit."""
    requests = parse_requests(list(settings.indicators))
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp.ClientSession())
        config = engine_config(settings)
        rest: KlineRest
        feed: Callable[[StreamSink], MarketFeed] | None = None
        markets: CcxtMarkets | None = None
        if settings.exchange == "binance":
            gate = RateGate(weight_limit=settings.binance_weight_limit)
            rest = BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s, gate=gate)
        else:
            exchange = ccxt_exchange(settings)
            markets = CcxtMarkets(exchange)
            rest = CcxtKlineRest(exchange, markets, timeout_s=settings.http_timeout_s)

            def feed(sink: StreamSink) -> MarketFeed:
                return CcxtStreamFeed(exchange, markets, sink, config.streams)

        engine = LiveEngine(
            session=session,
            rest=rest,
            stream_url=settings.binance_stream_url,
            indicators=requests,
            config=config,
            external_sources=external_sources,
            feed=feed,
            catalogue=markets,
        )
        for symbol in settings.symbols:
            for interval in settings.intervals:
                engine.follow(symbol, interval)
        async with engine.running():
            yield engine
