"""Chart benchmarks: PNG and summary latency, and event-loop responsiveness while rendering."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp

from daemon import serving
from engine import ChartService, ProcessPoolRenderer
from mcp_bridge import Services, build_http_app, build_server

CHART_ARGS = {"bars": 200, "width": 1920, "height": 1080, "indicators": ["ema_stack", "bbands", "rsi", "macd"]}


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


async def bench_tool_latency(runs: int = 15) -> dict[str, Any]:
    """Median/p95 of generate_chart png and summary through the tool router (sample data, no network)."""
    async with ProcessPoolRenderer(1) as renderer:
        _, router = build_server(Services(charts=ChartService(None, renderer)))
        out: dict[str, Any] = {}
        for fmt in ("png", "summary"):
            times = []
            for i in range(runs + 2):
                t0 = time.perf_counter()
                r = await router.call("generate_chart", {**CHART_ARGS, "format": fmt})
                dt = (time.perf_counter() - t0) * 1000
                assert not r.is_error, r.content[0].text
                if i >= 2:  # first calls warm caches
                    times.append(dt)
            out[f"generate_chart_{fmt}_ms"] = {"median": statistics.median(times), "p95": _pct(times, 95)}
        return out


async def bench_ping_while_rendering(charts: int = 10, ping_interval_s: float = 0.01) -> dict[str, Any]:
    """p99 latency of MCP ping over HTTP while ``charts`` PNG renders are in flight."""
    async with ProcessPoolRenderer(1) as renderer:
        server, _ = build_server(Services(charts=ChartService(None, renderer)))
        async with serving(build_http_app(server)) as url, aiohttp.ClientSession() as session:
            endpoint = f"{url}/mcp"

            async def rpc(body: dict[str, Any]) -> dict[str, Any]:
                async with session.post(
                    endpoint, data=json.dumps(body), headers={"Content-Type": "application/json"}
                ) as r:
                    return await r.json()

            await rpc({"jsonrpc": "2.0", "id": 0, "method": "ping"})
            done = asyncio.Event()

            async def chart(i: int) -> None:
                call = {"name": "generate_chart", "arguments": {**CHART_ARGS, "format": "png"}}
                res = await rpc({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call", "params": call})
                assert not res["result"].get("isError"), res

            latencies: list[float] = []

            async def pinger() -> None:
                n = 0
                while not done.is_set() and n < 5000:
                    t0 = time.perf_counter()
                    await rpc({"jsonrpc": "2.0", "id": 10_000 + n, "method": "ping"})
                    latencies.append((time.perf_counter() - t0) * 1000)
                    n += 1
                    try:
                        await asyncio.wait_for(done.wait(), ping_interval_s)
                    except TimeoutError:
                        pass

            t0 = time.perf_counter()
            ping_task = asyncio.create_task(pinger())
            await asyncio.gather(*(chart(i) for i in range(charts)))
            total = time.perf_counter() - t0
            done.set()
            await ping_task
    return {
        "ping_while_rendering_ms": {
            "p50": _pct(latencies, 50),
            "p99": _pct(latencies, 99),
            "max": max(latencies),
            "pings": len(latencies),
        },
        "ten_charts_wall_s": total,
    }


def main() -> None:
    """`python -m bench.charts`: the chart rows of docs/benchmarks.md."""
    latency = asyncio.run(bench_tool_latency())
    ping = asyncio.run(bench_ping_while_rendering())
    for fmt in ("png", "summary"):
        row = latency[f"generate_chart_{fmt}_ms"]
        print(f"generate_chart {fmt}: median {row['median']:.1f} ms, p95 {row['p95']:.1f} ms")
    print(f"ping while 10 charts render: p99 {ping['ping_while_rendering_ms']['p99']:.1f} ms")


if __name__ == "__main__":
    main()
