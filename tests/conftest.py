"""Shared fixtures: a clean environment, the exchange simulator and the chart service."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """No CHARTGEN_* or Binance variables leak into a test; HOME points at a temp dir."""
    for key in list(os.environ):
        if key.startswith(("CHARTGEN_", "BINANCE_")) or key == "STATE_DIRECTORY":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    """The Binance-compatible exchange simulator on a free loopback port."""
    from brokers.simulator.app import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def charts(sim: Any) -> AsyncIterator[Any]:
    """A ChartService reading market data from the simulator, rendering inline."""
    import aiohttp

    from engine.charts.pool import InlineRenderer
    from engine.charts.service import ChartService
    from engine.indicators.external.sources import ExternalSources
    from engine.market_data.source import MarketData

    async with aiohttp.ClientSession() as session:
        market = MarketData(
            session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9", timeout_s=5, cache_ttl_s=0
        )
        yield ChartService(market, InlineRenderer(), external_sources=ExternalSources(session=None))
