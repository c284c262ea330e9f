"""Building and running the live market engine from the settings (``--trade``).

Settings read here that :mod:`config.settings` may not define yet are taken with their
defaults (``getattr``), so the engine runs before every field exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from config import Settings
from engine.feed.binance_streams import StreamSettings
from engine.indicators.registry import parse_requests
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate


def _opt(settings: Settings, name: str, default: Any) -> Any:
    value = getattr(settings, name, None)
    return default if value is None else value


def engine_config(settings: Settings) -> EngineConfig:
    """The engine's tuning from the settings (defaults where a field is absent)."""
    return EngineConfig(
        window_bars=int(_opt(settings, "engine_window_bars", 1000)),
        backfill_concurrency=int(_opt(settings, "engine_backfill_concurrency", 8)),
        summary_signals=int(_opt(settings, "summary_signals", 20)),
        streams=StreamSettings(
            max_streams_per_connection=int(_opt(settings, "engine_streams_per_connection", 1024)),
            stall_timeout_s=float(_opt(settings, "engine_stall_timeout_s", 9.0)),
            rotate_after_s=float(_opt(settings, "engine_rotate_after_s", 23.5 * 3600)),
            backoff_initial_s=float(_opt(settings, "engine_reconnect_initial_s", 1.0)),
            backoff_max_s=float(_opt(settings, "engine_reconnect_max_s", 60.0)),
        ),
    )


@contextlib.asynccontextmanager
async def running_engine(
    settings: Settings, *, external_sources: Any = None, session: aiohttp.ClientSession | None = None
) -> AsyncIterator[LiveEngine]:
    """A running LiveEngine following every configured symbol × interval; stopped on exit."""
    requests = parse_requests(list(settings.indicators))
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp.ClientSession())
        gate = RateGate(weight_limit=int(_opt(settings, "binance_weight_limit", 6000)))
        rest = BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s, gate=gate)
        engine = LiveEngine(
            session=session,
            rest=rest,
            stream_url=settings.binance_stream_url,
            indicators=requests,
            config=engine_config(settings),
            external_sources=external_sources,
        )
        for symbol in settings.symbols:
            for interval in settings.intervals:
                engine.follow(symbol, interval)
        async with engine.running():
            yield engine
