"""Over stdio (`chartgen --mcp --trade`) a fired alert arrives as an MCP notification on the session."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from simulator import start_simulator
from testkit.daemon_proc import clean_env
from testkit.secret_scan import daemon_log_file

pytestmark = pytest.mark.process


async def test_stdio_session_receives_alert_triggered_notifications(tmp_path: Path) -> None:
    """subscribe + set_alert over stdio, a trade crosses the level → notifications/alert_triggered on stdout."""
    sim = await start_simulator(clock="manual", symbols=["BTCUSDT"])
    ws = sim.url.replace("http://", "ws://")
    env = clean_env(
        {
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_BINANCE_STREAM_URL": ws,
            "CHARTGEN_SYMBOLS": "BTCUSDT",
            "CHARTGEN_INTERVALS": "1m",
            "CHARTGEN_ENGINE_WINDOW_BARS": "100",
        }
    )
    with daemon_log_file("stdio") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemon", "--mcp", "--trade", "--data-dir", str(tmp_path),
            env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def send(message: dict[str, Any]) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()

    async def receive(match: Any) -> dict[str, Any]:
        while True:
            line = await stdout.readline()
            assert line, "daemon closed stdout"
            message = json.loads(line)
            if match(message):
                return message

    async def call(req_id: int, tool: str, args: dict[str, Any]) -> Any:
        await send(
            {"jsonrpc": "2.0", "id": req_id, "method": "tools/call", "params": {"name": tool, "arguments": args}}
        )
        reply = await receive(lambda m: m.get("id") == req_id)
        assert not reply["result"].get("isError"), reply
        return json.loads(reply["result"]["content"][0]["text"])

    try:
        async with asyncio.timeout(60), aiohttp.ClientSession() as http:
            init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            await receive(lambda m: m.get("id") == 1)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert (await call(2, "subscribe_notifications", {}))["status"] == "subscribed"
            made = await call(3, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_below": 1000}})

            async def trade_until_fired() -> None:
                while True:  # the engine connects to the stream in the background; keep trading until it hears one
                    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "900"}) as r:
                        assert r.status == 200
                    await asyncio.sleep(0.1)

            trader = asyncio.create_task(trade_until_fired())
            try:
                note = await receive(lambda m: m.get("method") == "notifications/alert_triggered")
            finally:
                trader.cancel()
            params = note["params"]
            assert params["alert_id"] == made["alert_id"] and params["interval"] == "1m"
            assert params["condition"] == {"type": "price_below", "threshold": 1000.0}
            assert [n["alert_id"] for n in await call(4, "get_notifications", {})] == [made["alert_id"]]
    finally:
        stdin.close()
        async with asyncio.timeout(30):
            await proc.wait()
        await sim.close()
