"""Live-engine benchmarks (issue 3): ingest rate, closed-bar storm, memory, warm-up time.

The simulator and the blasting websocket server run in child processes, so the engine's
figures are its own (one core for the engine, the other for the exchange).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from engine.events import IndicatorsUpdated
from engine.feed.stream_manager import StreamManager
from engine.feed.stream_settings import StreamSettings
from engine.feed.sync import WindowSync
from engine.indicators.registry import parse_requests
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate

INGEST_MESSAGES = 200_000
INGEST_SYMBOLS = 1000


# --- a websocket server that blasts kline frames (child process) ---------------------------
def _blast_server(port_queue: Any, n: int) -> None:
    from aiohttp import web

    syms = [f"S{i}USDT" for i in range(INGEST_SYMBOLS)]
    frames = []
    for i in range(n):
        s = syms[i % INGEST_SYMBOLS]
        k = {
            "t": 60_000,
            "T": 119_999,
            "s": s,
            "i": "1m",
            "o": "1.0",
            "c": f"1.{i % 97}",
            "h": "1.9",
            "l": "0.9",
            "v": "10",
            "n": 5,
            "x": False,
            "q": "10",
            "V": "5",
            "Q": "5",
            "B": "0",
        }
        frames.append(orjson.dumps({"stream": f"{s.lower()}@kline_1m", "data": {"e": "kline", "E": i, "s": s, "k": k}}))

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        for f in frames:
            await ws.send_str(f.decode())
        await asyncio.sleep(60)
        return ws

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/stream", handler)
        app.router.add_get("/stream/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_queue.put(runner.addresses[0][1])
        await asyncio.sleep(3600)

    asyncio.run(main())


@asynccontextmanager
async def _blaster(n: int) -> AsyncIterator[int]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_blast_server, args=(q, n), daemon=True)
    proc.start()
    try:
        yield await asyncio.to_thread(q.get, True, 60)
    finally:
        proc.terminate()
        proc.join(5)


async def bench_ingest_ours(n: int = INGEST_MESSAGES) -> float:
    """Kline messages per second parsed and applied to windows by our stream manager."""
    async with _blaster(n) as port, aiohttp.ClientSession() as session:
        sync = WindowSync(BinanceRest(session, "http://127.0.0.1:9"), _NullBus())
        for i in range(INGEST_SYMBOLS):
            sync.add(f"S{i}USDT", "1m")
        count = 0
        done = asyncio.Event()
        apply = sync.on_kline

        def counting(update: Any) -> None:
            nonlocal count
            apply(update)
            count += 1
            if count == n:
                done.set()

        sync.on_kline = counting  # type: ignore[method-assign]
        sync.on_streams_live = lambda streams: None  # type: ignore[method-assign]
        manager = StreamManager(session, f"ws://127.0.0.1:{port}", sync, StreamSettings(stall_timeout_s=None))
        manager.add(["s0usdt@kline_1m"])
        async with manager.running():
            t0 = time.perf_counter()
            async with asyncio.timeout(120):
                await done.wait()
            return n / (time.perf_counter() - t0)


async def bench_ingest_python_binance(n: int = INGEST_MESSAGES) -> float:
    """The same stream consumed by python-binance's socket manager (receive + JSON only)."""
    from binance import AsyncClient, BinanceSocketManager

    async with _blaster(n) as port:
        client = AsyncClient()
        try:
            bm = BinanceSocketManager(client, max_queue_size=n + 10)
            bm.STREAM_URL = f"ws://127.0.0.1:{port}/"
            received = 0
            async with bm.multiplex_socket(["s0usdt@kline_1m"]) as sock:
                t0 = time.perf_counter()
                async with asyncio.timeout(120):
                    while received < n:
                        msg = await sock.recv()
                        if isinstance(msg, dict) and msg.get("data"):
                            received += 1
                return received / (time.perf_counter() - t0)
        finally:
            await client.close_connection()


class _NullBus:
    def publish(self, event: Any) -> None:
        pass


# --- engine against the simulator (simulator in a child process) --------------------------
@asynccontextmanager
async def simulator_process(symbols: list[str]) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "sim-exchange",
        "--port",
        "0",
        "--clock",
        "manual",
        "--symbols",
        ",".join(symbols),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            url = (await proc.stdout.readline()).decode().strip()
        yield url
    finally:
        proc.terminate()
        await proc.wait()


@asynccontextmanager
async def engine_on(url: str, markets: list[tuple[str, str]], window: int) -> AsyncIterator[LiveEngine]:
    async with aiohttp.ClientSession() as session:
        engine = LiveEngine(
            session=session,
            rest=BinanceRest(session, url, gate=RateGate(6000)),
            stream_url=url.replace("http", "ws", 1),
            indicators=parse_requests(["cipher_b", "macd", "rsi"]),
            config=EngineConfig(window_bars=window, streams=StreamSettings(stall_timeout_s=None)),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


async def bench_warm_up(symbols: int = 100, window: int = 1000) -> float:
    """Seconds from start until 100 symbols × 1000 bars are warm."""
    names = [f"W{i:03d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url:
        t0 = time.perf_counter()
        async with engine_on(url, [(s, "1m") for s in names], window) as engine:
            async with asyncio.timeout(300):
                await engine.wait_ready()
            return time.perf_counter() - t0


async def bench_closed_bar_storm(symbols: int = 1000, window: int = 1000) -> dict[str, float]:
    """1,000 symbols close on the same minute: latency of each indicator update after the close."""
    names = [f"C{i:04d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url, aiohttp.ClientSession() as ctl:
        async with engine_on(url, [(s, "1m") for s in names], window) as engine:
            async with asyncio.timeout(600):
                await engine.wait_ready()
            sub = engine.subscribe([IndicatorsUpdated], maxsize=symbols * 4)
            await asyncio.sleep(3)  # let warm-up recomputation settle before measuring
            while sub.qsize():
                sub.get_nowait()
            async with ctl.post(f"{url}/sim/v1/advance", json={"seconds": 60}) as resp:
                await resp.read()
            t0 = time.perf_counter()
            seen: dict[str, float] = {}
            async with asyncio.timeout(120):
                while len(seen) < symbols:
                    ev = await sub.get()
                    if isinstance(ev, IndicatorsUpdated) and ev.symbol not in seen:
                        seen[ev.symbol] = time.perf_counter() - t0
            lat = sorted(seen.values())
            return {"p50_s": lat[len(lat) // 2], "p99_s": lat[int(len(lat) * 0.99) - 1], "max_s": lat[-1]}


def _rss_mb() -> float:
    text = open(f"/proc/{os.getpid()}/status").read()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]


async def _memory_run(symbols: int, window: int) -> float:
    names = [f"M{i:04d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url:
        async with engine_on(url, [(s, i) for s in names for i in ("1m", "5m")], window) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            await asyncio.sleep(5)  # indicator results for every window
            return _rss_mb()


def bench_memory(symbols: int = 1000, window: int = 1000) -> float:
    """RSS (MB) of a fresh process holding 1000 symbols × 2 intervals × 1000 bars with indicators."""
    code = f"import asyncio; from bench.engine import _memory_run; print(asyncio.run(_memory_run({symbols}, {window})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200, check=True)
    return float(out.stdout.strip().splitlines()[-1])


async def run_all() -> dict[str, Any]:
    ours = await bench_ingest_ours()
    theirs = await bench_ingest_python_binance()
    return {
        "ingest_msgs_per_s": ours,
        "ingest_python_binance_msgs_per_s": theirs,
        "warm_up_100x1000_s": await bench_warm_up(),
        "closed_bar_storm": await bench_closed_bar_storm(),
    }


def main() -> None:
    """`python -m bench.engine`: ingest, warm-up, closed-bar storm and engine RSS rows."""
    r = asyncio.run(run_all())
    print(f"ingest: {r['ingest_msgs_per_s']:,.0f} msgs/s (python-binance {r['ingest_python_binance_msgs_per_s']:,.0f})")
    print(f"warm-up 100 symbols x 1000 bars: {r['warm_up_100x1000_s']:.2f} s")
    storm = r["closed_bar_storm"]
    print(f"closed-bar storm, 1000 symbols: p50 {storm['p50_s']:.3f} s, p99 {storm['p99_s']:.3f} s")
    print(f"RSS 1000 symbols x 2 intervals x 1000 bars: {bench_memory():.0f} MB")


if __name__ == "__main__":
    main()
