"""HTTP tool-call benchmarks: ``get_indicators`` from the engine cache with 32 concurrent clients, and
the cost of the bearer check (a verified token is served from memory; see
mcp_bridge/token_cache.py).

    python -m bench.http_tools

The daemon runs as its own process (``--serve --trade --sim``); the clients are raw JSON-RPC
POSTs with a bearer token over keep-alive connections from this process (as chartgen's
clients call).  The HTTP edge is as behind the nginx of docs/operations.md: ``trusted_proxies =
["127.0.0.1"]`` and every request carries ``X-Forwarded-For`` (uvicorn's proxy-header handling,
the Host/Origin check, the per-address bearer limiter and the scope check all run).
Targets: ≥ 2,000 calls/s (issue 12), p99 ≤ 20 ms; auth check ≤ 0.2 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from daemon import ALL_MIGRATIONS, token_authenticator
from mcp_bridge import TokenStore
from storage import Database

CLIENTS = 32
CALLS_PER_CLIENT = 150


async def bench_get_indicators(
    clients: int = CLIENTS, per_client: int = CALLS_PER_CLIENT, *, proxied: bool = True
) -> dict[str, float]:
    """``proxied``: as behind the documented nginx (trusted proxy, ``X-Forwarded-For``); else direct clients."""
    from testkit.daemon_proc import PRODUCTION_RENDER, start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1h"],
            data_dir=Path(tmp),
            # as in production: one audit line per tool call; behind a trusted proxy on loopback
            env={
                "CHARTGEN_LOG_LEVEL": "info",
                **PRODUCTION_RENDER,
                **({"CHARTGEN_TRUSTED_PROXIES": "127.0.0.1"} if proxied else {}),
            },
        )
        try:
            connector = aiohttp.TCPConnector(limit=clients)
            async with aiohttp.ClientSession(connector=connector) as http:
                await daemon.wait_ready()
                headers = {"Authorization": f"Bearer {daemon.token}"}
                if proxied:
                    headers["X-Forwarded-For"] = "203.0.113.7"
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


async def bench_auth_check(n: int = 5000) -> dict[str, float]:
    """Median time of one bearer check, in ms: a token already verified (SHA-256, the cache and
    its revocation-marker stat) and a first sight (plus the primary-key probe through aiosqlite)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate(ALL_MIGRATIONS)
        tokens = TokenStore(db)
        for i in range(100):
            await tokens.create(f"t{i}")
        token, _ = await tokens.create("bench")
        authenticate = token_authenticator(tokens)
        assert authenticate is not None
        hits, misses = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            assert await authenticate(token) is not None
            hits.append((time.perf_counter() - t0) * 1000)
        for _ in range(n // 5):
            tokens.cache.clear()
            t0 = time.perf_counter()
            assert await authenticate(token) is not None
            misses.append((time.perf_counter() - t0) * 1000)
        await db.close()
    return {"cached_ms": statistics.median(hits), "first_ms": statistics.median(misses)}


def run() -> dict[str, Any]:
    return {
        "get_indicators_http": asyncio.run(bench_get_indicators()),
        "get_indicators_http_direct": asyncio.run(bench_get_indicators(proxied=False)),
        "auth_check_ms": asyncio.run(bench_auth_check()),
    }


def print_table(r: dict[str, Any]) -> None:
    g = r["get_indicators_http"]
    rate_ok = "yes" if g["calls_per_s"] >= 2000 else "NO"
    p99_ok = "yes" if g["p99_ms"] <= 20 else "NO"
    print(f"{'get_indicators over HTTP, 32 clients':<45} {g['calls_per_s']:>8.0f}/s  target ≥2000/s  {rate_ok}")
    print(f"{'  latency p50 / p99':<45} {g['p50_ms']:>5.1f} / {g['p99_ms']:.1f} ms  target p99 ≤20 ms  {p99_ok}")
    d = r.get("get_indicators_http_direct")
    if d is not None:
        label = "  the same, direct clients (no proxy headers)"
        print(f"{label:<45} {d['calls_per_s']:>8.0f}/s  p99 {d['p99_ms']:.1f} ms")
    a = r["auth_check_ms"]
    ok = "yes" if a["cached_ms"] <= 0.2 else "NO"
    print(f"{'bearer check, verified token (median)':<45} {a['cached_ms']:>8.3f} ms  target ≤0.2 ms  {ok}")
    print(f"{'bearer check, first sight (median)':<45} {a['first_ms']:>8.3f} ms")


if __name__ == "__main__":
    print_table(run())
