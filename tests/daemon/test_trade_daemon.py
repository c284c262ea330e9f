"""`chartgen --serve --trade --sim --clock manual` end to end: engine cache over MCP matches a fresh computation."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from mcp import Client

from engine.indicators.registry import parse_requests
from engine.indicators.runner import compute_sync
from engine.market_data.binance_rest import rows_to_bars


@pytest.fixture
async def daemon() -> AsyncIterator[dict[str, str]]:
    """The daemon as a subprocess; yields its MCP URL and its simulator's URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "--serve",
        "--trade",
        "--sim",
        "--clock",
        "manual",
        "--port",
        "0",
        "-s",
        "BTCUSDT,ETHUSDT",
        "-i",
        "1h",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    urls: dict[str, str] = {}
    try:
        async with asyncio.timeout(60):
            while len(urls) < 2:
                line = (await proc.stdout.readline()).decode()
                assert line, "daemon exited before printing its URLs"
                if m := re.match(r"MCP server listening on (\S+)", line):
                    urls["mcp"] = m.group(1)
                if m := re.match(r"Exchange simulator at (\S+)", line):
                    urls["sim"] = m.group(1)
        yield urls
    finally:
        proc.terminate()
        async with asyncio.timeout(30):
            await proc.wait()


async def _ready(base: str, http: aiohttp.ClientSession) -> None:
    async with asyncio.timeout(60):
        while True:
            async with http.get(f"{base}/readyz") as r:
                if r.status == 200:
                    return
            await asyncio.sleep(0.1)  # polling a readiness endpoint, bounded by the timeout


async def _engine_payload(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("get_indicators", args)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def test_get_indicators_answers_from_the_engine_and_tracks_closed_bars(daemon: dict[str, str]) -> None:
    """After a trade and a close, engine_cache values equal a fresh computation on the simulator's bars."""
    base = daemon["mcp"].removesuffix("/mcp")
    async with aiohttp.ClientSession() as http:
        await _ready(base, http)
        async with Client(daemon["mcp"], read_timeout_seconds=60) as client:
            first = await _engine_payload(client, {"symbol": "BTCUSDT", "interval": "1h", "indicators": ["rsi"]})
            assert first["source"] == "engine_cache" and first["bars"] == 1000 and first["stale"] is False

            async with http.post(f"{daemon['sim']}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "71000"}) as r:
                assert r.status == 200
            async with http.post(f"{daemon['sim']}/sim/v1/advance", json={"seconds": 3600}) as r:
                assert r.status == 200
            args = {"symbol": "BTCUSDT", "interval": "1h", "indicators": ["rsi", {"name": "macd", "fast": 8}]}
            async with asyncio.timeout(30):
                while True:
                    payload = await _engine_payload(client, args)
                    if payload["last_bar_time"] > first["last_bar_time"]:
                        break
                    await asyncio.sleep(0.05)  # the close travels sim → stream → engine; bounded above

            params = {
                "symbol": "BTCUSDT",
                "interval": "1h",
                "limit": "1000",
                "endTime": str(payload["last_bar_time"] * 1000),
            }
            async with http.get(f"{daemon['sim']}/api/v3/klines", params=params) as r:
                bars = rows_to_bars(await r.json())
            assert int(bars.times[-1]) == payload["last_bar_time"] and len(bars) == payload["bars"]
            assert float(bars.open[-1]) == 71000.0
            for req in parse_requests(["rsi", {"name": "macd", "fast": 8}]):
                fresh = compute_sync(req, bars)
                for line, got in zip(fresh.lines, payload["indicators"][req.key]["lines"], strict=True):
                    assert got["last_value"] == pytest.approx(float(line.y[-1]), rel=1e-12)

            other = await _engine_payload(client, {"symbol": "SOLUSDT", "interval": "1h", "indicators": ["rsi"]})
            assert other["source"] == "fetched"
