"""HTTP tool-call benchmarks: ``get_indicators`` from the engine cache with 32 concurrent clients, and
the cost of the bearer check.

    python -m bench.http_tools

The daemon runs as its own process (``--serve --trade --sim``); the clients are raw JSON-RPC
POSTs with a bearer token over keep-alive connections from this process (as chartgen's
clients call).  Targets: ≥ 1,000 calls/s, p99 ≤ 20 ms; auth check ≤ 0.2 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from config.database import Database
from daemon.database import ALL_MIGRATIONS
from daemon.modes import token_authenticator
from mcp_bridge.tokens import TokenStore

CLIENTS = 32
CALLS_PER_CLIENT = 150


async def bench_get_indicators(clients: int = CLIENTS, per_client: int = CALLS_PER_CLIENT) -> dict[str, float]:
    from tests.support.daemon_proc import start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1h"],
            data_dir=Path(tmp),
            env={"CHARTGEN_LOG_LEVEL": "warning"},
        )
        try:
            connector = aiohttp.TCPConnector(limit=clients)
            async with aiohttp.ClientSession(connector=connector) as http:
                await daemon.wait_ready()
                headers = {"Authorization": f"Bearer {daemon.token}"}
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "get_indicators",
                        "arguments": {"symbol": "BTCUSDT", "interval": "1h", "indicators": ["rsi", "macd"]},
                    },
                }
                latencies: list[float] = []

                async def client(n: int) -> None:
                    for _ in range(n):
                        t0 = time.perf_counter()
                        async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
                            payload: Any = await r.json()
                        latencies.append((time.perf_counter() - t0) * 1000)
                        assert r.status == 200 and "engine_cache" in payload["result"]["content"][0]["text"]

                await client(50)  # warm the connections and caches
                latencies.clear()
                t0 = time.perf_counter()
                async with asyncio.TaskGroup() as tg:
                    for _ in range(clients):
                        tg.create_task(client(per_client))
                elapsed = time.perf_counter() - t0
        finally:
            await daemon.stop()
    latencies.sort()
    return {
        "calls_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
    }


async def bench_auth_check(n: int = 5000) -> float:
    """Median time of one bearer check (token hash + primary-key probe through aiosqlite), in ms."""
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate(ALL_MIGRATIONS)
        tokens = TokenStore(db)
        for i in range(100):
            await tokens.create(f"t{i}")
        token, _ = await tokens.create("bench")
        authenticate = token_authenticator(tokens)
        assert authenticate is not None
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            assert await authenticate(token) is not None
            samples.append((time.perf_counter() - t0) * 1000)
        await db.close()
    return statistics.median(samples)


def run() -> dict[str, Any]:
    return {
        "get_indicators_http": asyncio.run(bench_get_indicators()),
        "auth_check_ms": asyncio.run(bench_auth_check()),
    }


def print_table(r: dict[str, Any]) -> None:
    g = r["get_indicators_http"]
    rate_ok = "yes" if g["calls_per_s"] >= 1000 else "NO"
    p99_ok = "yes" if g["p99_ms"] <= 20 else "NO"
    print(f"{'get_indicators over HTTP, 32 clients':<45} {g['calls_per_s']:>8.0f}/s  target ≥1000/s  {rate_ok}")
    print(f"{'  latency p50 / p99':<45} {g['p50_ms']:>5.1f} / {g['p99_ms']:.1f} ms  target p99 ≤20 ms  {p99_ok}")
    a = r["auth_check_ms"]
    print(f"{'bearer check (median)':<45} {a:>8.3f} ms  target ≤0.2 ms  {'yes' if a <= 0.2 else 'NO'}")


if __name__ == "__main__":
    print_table(run())
