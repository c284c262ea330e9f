"""Wiring for the charting stack: HTTP session, market data, external sources, render pool.

Only ``daemon`` builds concrete objects (design.md §1); everything else receives them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from config import Settings
from engine.charts.pool import InlineRenderer, ProcessPoolRenderer
from engine.charts.service import ChartRenderer, ChartService
from engine.indicators.external.sources import ExternalSources
from engine.market_data.source import MarketData


@contextlib.asynccontextmanager
async def chart_service(settings: Settings, *, render_in_pool: bool = True) -> AsyncIterator[ChartService]:
    """A ready ChartService; closes the HTTP session and the render pool on exit."""
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        market = MarketData(
            session,
            binance_rest_url=settings.binance_rest_url,
            yahoo_url=settings.yahoo_url,
            timeout_s=settings.http_timeout_s,
            cache_ttl_s=settings.market_cache_ttl_s,
        )
        external = ExternalSources(
            session=session,
            futures_url=settings.futures_url,
            fear_greed_url=settings.fear_greed_url,
            timeout_s=settings.http_timeout_s,
        )
        renderer: ChartRenderer
        if render_in_pool:
            renderer = await stack.enter_async_context(ProcessPoolRenderer(settings.render_workers))
        else:
            renderer = InlineRenderer()
        yield ChartService(market, renderer, external_sources=external, summary_signals=settings.summary_signals)


def describe_endpoints(settings: Settings) -> dict[str, Any]:
    """Non-secret settings worth logging at start-up."""
    return {
        "binance_rest_url": settings.binance_rest_url,
        "yahoo_url": settings.yahoo_url,
        "data_dir": str(settings.resolved_data_dir()),
    }
