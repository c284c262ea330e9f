"""`chartgen --serve --trade --sim --clock manual` end to end: engine cache over MCP matches a fresh computation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from engine import compute_sync, parse_requests, rows_to_bars
from testkit.daemon_proc import mcp_client, start_daemon

pytestmark = pytest.mark.process


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """The daemon as a subprocess; yields its MCP URL, its simulator's URL and the demo token."""
    proc = await start_daemon(
        ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT,ETHUSDT", "-i", "1h"], data_dir=tmp_path
    )
    try:
        assert proc.sim_url is not None and proc.token is not None
        await proc.wait_ready()
        yield {"mcp": proc.mcp_url, "sim": proc.sim_url, "token": proc.token}
    finally:
        await proc.stop()


async def _engine_payload(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("get_indicators", args)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def test_get_indicators_answers_from_the_engine_and_tracks_closed_bars(daemon: dict[str, str]) -> None:
    """After a trade and a close, engine_cache values equal a fresh computation on the simulator's bars."""
    async with aiohttp.ClientSession() as http:
        async with mcp_client(daemon["mcp"], daemon["token"]) as client:
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
