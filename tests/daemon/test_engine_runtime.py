"""running_engine builds a live engine from the settings and follows every symbol × interval."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer

from config import load_settings
from daemon.parts.engine import engine_config, running_engine
from tests.engine.fake_binance import FakeBinance


@pytest.fixture
async def fake() -> AsyncIterator[FakeBinance]:
    fb = FakeBinance()
    server = TestServer(fb.app(), host="127.0.0.1")
    await server.start_server()
    fb.url = str(server.make_url("")).rstrip("/")
    try:
        yield fb
    finally:
        await server.close()


async def test_engine_follows_configured_markets_and_becomes_ready(fake: FakeBinance) -> None:
    """Every configured symbol × interval is warmed up to the configured window length."""
    settings = load_settings(
        {
            "binance_rest_url": fake.url,
            "binance_stream_url": fake.url.replace("http", "ws", 1),
            "symbols": ["BTCUSDT", "ETHUSDT"],
            "intervals": ["1m", "1h"],
            "indicators": [],
        }
    )
    async with running_engine(settings) as engine:
        async with asyncio.timeout(10):
            await engine.wait_ready()
        assert sorted(engine.markets) == [("BTCUSDT", "1h"), ("BTCUSDT", "1m"), ("ETHUSDT", "1h"), ("ETHUSDT", "1m")]
        assert all(m["bars"] == 1000 for m in engine.status()["markets"])


def test_engine_tuning_defaults_when_settings_lack_the_fields() -> None:
    """Absent engine settings fall back to the documented defaults."""
    cfg = engine_config(load_settings({}))
    assert cfg.window_bars == 1000
    assert cfg.streams.max_streams_per_connection == 1024
    assert cfg.streams.stall_timeout_s == 9.0
