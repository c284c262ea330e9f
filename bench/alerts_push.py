"""Alert push benchmarks against a real daemon on loopback: tick → SSE frame latency, set_alert through the SDK.

Part of ``python -m bench.alerts`` (see that module for the whole list):
- Tick → SSE frame at 1,000 ticks/s on the engine bus: p50/p99 (≤ 2/10 ms).
- Simulator trade → SSE frame at 200/s (the whole path), and ``set_alert`` over MCP HTTP with
  the official SDK client (sequential; 8 clients).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from engine import Tick


async def bench_push_latency_and_set_alert(steps: int = 2000, rate: float = 1000.0) -> dict[str, Any]:
    """Against the real daemon (--sim, manual clock): tick → SSE frame latency, and set_alert calls/s."""
    from testkit.daemon_proc import PRODUCTION_RENDER, mcp_client, start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"],
            data_dir=Path(tmp),
            env={"CHARTGEN_ALERTS_MAX_PER_CLIENT": "1000000", "CHARTGEN_BROKER": "paper", **PRODUCTION_RENDER},
        )
        try:
            async with aiohttp.ClientSession() as http:
                await daemon.wait_ready()
                base = 70_000.0
                async with mcp_client(daemon.mcp_url, daemon.token) as client:
                    await client.call_tool("subscribe_notifications", {})
                    t0 = time.perf_counter()
                    for i in range(steps):
                        await client.call_tool(
                            "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": base + (i + 1) * 1.0}}
                        )
                    sequential = steps / (time.perf_counter() - t0)

                    async def burst(k: int) -> None:
                        async with mcp_client(daemon.mcp_url, daemon.token) as c:
                            for j in range(250):
                                await c.call_tool(
                                    "set_alert",
                                    {"symbol": "BTCUSDT", "condition": {"price_below": 1.0 + k + j * 0.001}},
                                )

                    t0 = time.perf_counter()
                    async with asyncio.TaskGroup() as tg:
                        for k in range(8):
                            tg.create_task(burst(k))
                    concurrent = 8 * 250 / (time.perf_counter() - t0)
                headers = {"Authorization": f"Bearer {daemon.token}"}
                sent: dict[float, float] = {}
                latencies: list[float] = []
                async with http.get(f"{daemon.base}/mcp", headers=headers) as resp:
                    await resp.content.readline()

                    async def reader() -> None:
                        while len(latencies) < steps:
                            line = (await resp.content.readline()).decode()
                            if line.startswith("data: "):
                                frame = json.loads(line[6:])
                                level = frame["params"]["condition"]["threshold"]
                                latencies.append((time.perf_counter() - sent[level]) * 1000)

                    task = asyncio.create_task(reader())
                    start = time.perf_counter()
                    for i in range(steps):
                        due = start + i / rate
                        delay = due - time.perf_counter()
                        if delay > 0:
                            await asyncio.sleep(delay)  # pacing the load at `rate` ticks per second
                        level = base + (i + 1) * 1.0
                        sent[level] = time.perf_counter()
                        async with http.post(
                            f"{daemon.sim_url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": f"{level + 0.5}"}
                        ) as r:
                            await r.read()
                    async with asyncio.timeout(60):
                        await task
        finally:
            await daemon.stop()
    latencies.sort()
    return {
        "sse_p50_ms": statistics.median(latencies),
        "sse_p99_ms": latencies[int(len(latencies) * 0.99) - 1],
        "set_alert_sequential_per_s": sequential,
        "set_alert_8_clients_per_s": concurrent,
    }


def _sse_reader_main(url: str, token: str, steps: int, ready: Any, out: Any) -> None:
    """Child process: read ``steps`` alert frames from ``url``; send back (threshold, arrival time) pairs."""

    async def read() -> list[tuple[float, float]]:
        got: list[tuple[float, float]] = []
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
                await resp.content.readline()
                ready.send(True)
                while len(got) < steps:
                    line = await resp.content.readline()
                    if line.startswith(b"data: "):
                        got.append((json.loads(line[6:])["params"]["condition"]["threshold"], time.perf_counter()))
        return got

    out.send(asyncio.run(read()))


async def _received(conn: Any, timeout_s: float) -> Any:
    """The next object on a multiprocessing pipe, waited for off the loop (TimeoutError if none comes)."""

    def wait() -> Any:
        if not conn.poll(timeout_s):
            raise TimeoutError(f"nothing from the SSE reader process within {timeout_s:g} s")
        return conn.recv()

    return await asyncio.to_thread(wait)


@asynccontextmanager
async def _sse_client(url: str, token: str, steps: int) -> AsyncIterator[Any]:
    """An SSE reader in a child process, connected before this yields; yields the pipe its results come on."""
    ctx = multiprocessing.get_context("spawn")
    ready_r, ready_w = ctx.Pipe(duplex=False)
    out_r, out_w = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_sse_reader_main, args=(url, token, steps, ready_w, out_w), daemon=True)
    proc.start()
    try:
        await _received(ready_r, 60)
        yield out_r
    finally:
        proc.terminate()
        proc.join(5)


async def bench_tick_to_sse(
    steps: int = 3000, rate: float = 1000.0, extra_settings: dict[str, Any] | None = None
) -> dict[str, float]:
    """Tick → SSE frame inside the daemon: engine Tick events published at ``rate``/s, each crossing one alert.

    The daemon's parts run as in production (engine bus, evaluator, SQLite firing, push hub,
    the HTTP app under uvicorn); the ticks are put on the engine's bus directly, so the
    simulator's own cost of producing a trade is not counted.  The SSE client reads in its
    own process, as a real client does (in the daemon's process its parsing competed with
    the daemon for the event loop and the GIL); both sides stamp with ``time.perf_counter``,
    the system-wide monotonic clock on Linux, so the latency spans process and socket.
    """
    from config import load_settings
    from daemon import daemon_services, serving, token_authenticator
    from mcp_bridge import build_http_app, build_server

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            {
                "data_dir": Path(tmp),
                "symbols": ["BTCUSDT"],
                "intervals": ["1m"],
                "sim_clock": "manual",
                "broker": "paper",
                "alerts_max_per_client": 1_000_000,
                "log_level": "warning",
            }
            | (extra_settings or {})
        )
        async with daemon_services(settings, sim=True, trade=True) as (_, services):
            assert services.alerts is not None and services.engine is not None and services.tokens is not None
            await asyncio.wait_for(services.engine.wait_ready(), 60)
            token, info = await services.tokens.create("bench")
            server, _ = build_server(services)
            app = build_http_app(
                server,
                authenticate=token_authenticator(services.tokens),
                push_hub=services.push,
                push_store=services.alerts.store,
            )
            base = 90_000.0
            await services.alerts.subscribe_to(info.principal, None, None)
            for i in range(steps):
                await services.alerts.set_alert(
                    info.principal, {"symbol": "BTCUSDT", "condition": {"price_above": base + i + 1}}
                )
            sent: dict[float, float] = {}
            async with serving(app) as url, _sse_client(f"{url}/mcp", token, steps) as arrivals:
                start = time.perf_counter()
                bus = services.engine.bus
                for i in range(steps):
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)  # pacing the load at `rate` ticks per second
                    level = base + i + 1
                    sent[level] = time.perf_counter()
                    bus.publish(Tick("BTCUSDT", "1m", level + 0.5, int(time.time() * 1000), 0))
                got = await _received(arrivals, 60)
            latencies = [(at - sent[level]) * 1000 for level, at in got]
    latencies.sort()
    return {
        "tick_to_sse_p50_ms": statistics.median(latencies),
        "tick_to_sse_p99_ms": latencies[int(len(latencies) * 0.99) - 1],
    }
