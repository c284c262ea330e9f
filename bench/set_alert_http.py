"""``set_alert`` over HTTP as chartgen's clients call it: session-less JSON-RPC ``tools/call`` with a
bearer token, on 1 keep-alive connection (one call at a time) and on 8 (8 closed-loop clients).

    python -m bench.set_alert_http

The daemon runs as its own process (``chartgen --serve --trade --sim --clock manual``, paper
broker, log level info as in production: one audit line per tool call) with the demo token,
which has every scope.  Each call sets a new alert far above the price (none fires), so every
call is an insert into SQLite (one transaction, the owner's cap checked in it) and an index
update.  The clients share the machine with the daemon.  Target: ≥ 500 calls/s.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

TARGET_PER_S = 500


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


async def bench_set_alert(calls: int = 2000, warmup: int = 100) -> dict[str, dict[str, float]]:
    """Calls/s and latency p50/p99 (ms) of ``set_alert`` on 1 connection and on 8 connections."""
    from testkit.daemon_proc import start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"],
            data_dir=Path(tmp),
            env={
                "CHARTGEN_ALERTS_MAX_PER_CLIENT": "1000000",
                "CHARTGEN_BROKER": "paper",
                "CHARTGEN_LOG_LEVEL": "info",
            },
        )
        try:
            await daemon.wait_ready()
            assert daemon.token is not None
            headers = {"Authorization": f"Bearer {daemon.token}"}
            level = iter(range(10_000_000, 20_000_000))

            async def run(connections: int, per_connection: int) -> dict[str, float]:
                connector = aiohttp.TCPConnector(limit=connections)
                latencies: list[float] = []
                async with aiohttp.ClientSession(connector=connector) as http:

                    async def client(n: int, record: bool) -> None:
                        for _ in range(n):
                            body = {
                                "jsonrpc": "2.0",
                                "id": 1,
                                "method": "tools/call",
                                "params": {
                                    "name": "set_alert",
                                    "arguments": {"symbol": "BTCUSDT", "condition": {"price_above": next(level)}},
                                },
                            }
                            t0 = time.perf_counter()
                            async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
                                payload: Any = await r.json()
                            if record:
                                latencies.append((time.perf_counter() - t0) * 1000)
                            assert r.status == 200 and not payload["result"].get("isError"), payload

                    async with asyncio.TaskGroup() as tg:  # open the connections, warm the caches
                        for _ in range(connections):
                            tg.create_task(client(max(1, warmup // connections), False))
                    t0 = time.perf_counter()
                    async with asyncio.TaskGroup() as tg:
                        for _ in range(connections):
                            tg.create_task(client(per_connection, True))
                    elapsed = time.perf_counter() - t0
                latencies.sort()
                return {
                    "calls": float(len(latencies)),
                    "calls_per_s": len(latencies) / elapsed,
                    "p50_ms": statistics.median(latencies),
                    "p99_ms": _pct(latencies, 0.99),
                }

            one = await run(1, calls)
            eight = await run(8, calls // 8)
        finally:
            await daemon.stop()
    return {"set_alert_http_1_connection": one, "set_alert_http_8_connections": eight}


def run() -> dict[str, dict[str, float]]:
    return asyncio.run(bench_set_alert())


def print_table(r: dict[str, dict[str, float]]) -> None:
    labels = {"set_alert_http_1_connection": "1 connection", "set_alert_http_8_connections": "8 connections"}
    for key, label in labels.items():
        x = r[key]
        ok = "yes" if x["calls_per_s"] >= TARGET_PER_S else "NO"
        print(
            f"{'set_alert, session-less JSON-RPC over HTTP, ' + label:<55} {x['calls_per_s']:>7.0f}/s"
            f"  p50 {x['p50_ms']:.2f} / p99 {x['p99_ms']:.2f} ms  target ≥{TARGET_PER_S}/s  {ok}"
        )


if __name__ == "__main__":
    print_table(run())
