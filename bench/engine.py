"""Live-engine benchmarks (issue 3): closed-bar storm, memory, warm-up time.

The simulator runs in a child process, so the engine's figures are its own (one core for the
engine, the other for the exchange).  ``python -m bench.engine`` also prints the kline-ingest
figures, measured by :mod:`bench.ingest`.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from bench.ingest import bench_ingest_ceiling, bench_ingest_ours, bench_ingest_python_binance
from engine import (
    BarClosed,
    BinanceRest,
    EngineConfig,
    IndicatorsUpdated,
    LiveEngine,
    RateGate,
    StreamSettings,
    parse_requests,
)


# --- engine against the simulator (simulator in a child process) --------------------------
@asynccontextmanager
async def simulator_process(symbols: list[str], *, weight_limit: int = 6000) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "sim-exchange",
        "--port",
        "0",
        "--clock",
        "manual",
        "--weight-limit",
        str(weight_limit),
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
async def engine_on(
    url: str, markets: list[tuple[str, str]], window: int, *, weight_limit: int = 6000
) -> AsyncIterator[LiveEngine]:
    async with aiohttp.ClientSession() as session:
        engine = LiveEngine(
            session=session,
            rest=BinanceRest(session, url, gate=RateGate(weight_limit)),
            stream_url=url.replace("http", "ws", 1),
            indicators=parse_requests(["cipher_b", "macd", "rsi"]),
            config=EngineConfig(window_bars=window, streams=StreamSettings(stall_timeout_s=None)),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


async def bench_warm_up(symbols: int = 100, window: int = 1000) -> float:
    """Seconds from start until ``symbols`` × 1000 bars (1m) are warm."""
    return (await warm_up_run(symbols, window))["seconds"]


async def _rate_limited(ctl: aiohttp.ClientSession, url: str) -> int:
    async with ctl.get(f"{url}/sim/v1/state") as resp:
        state = await resp.json()
    return sum(n for k, n in state["requests"].items() if k.startswith("429 "))


async def warm_up_run(symbols: int, window: int = 1000) -> dict[str, Any]:
    """One warm-up against the simulator at Binance's REQUEST_WEIGHT 6000/min: seconds until every
    window is warm, 429 answers seen by the simulator (must be 0), and the floor the weight budget
    sets (klines weight 2 per market, 80 % of 6000 = 4,800 over any rolling minute: 5,000 markets
    are 10,000 weight, three budgets' worth, so the last third cannot start before 120 s)."""
    names = [f"W{i:04d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url, aiohttp.ClientSession() as ctl:
        t0 = time.perf_counter()
        async with engine_on(url, [(s, "1m") for s in names], window) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            seconds = time.perf_counter() - t0
        limited = await _rate_limited(ctl, url)
    # within any rolling minute at most `budget` weight goes out, so the k-th budget's worth
    # of requests cannot start before (k - 1) minutes have passed
    budget = RateGate(6000).budget
    floor = 60.0 * (math.ceil(2 * symbols / budget) - 1)
    return {"markets": symbols, "seconds": seconds, "rate_limited": limited, "budget_floor_s": floor}


def bench_warm_up_scaling(sizes: tuple[int, ...] = (1000, 2000, 5000)) -> list[dict[str, Any]]:
    """Warm-up of 1,000 / 2,000 / 5,000 markets × 1,000 bars, each in a fresh engine and simulator."""
    return [asyncio.run(warm_up_run(n)) for n in sizes]


async def bench_closed_bar_storm(
    symbols: int = 1000, window: int = 1000, intervals: tuple[str, ...] = ("1m",)
) -> dict[str, float]:
    """Every window closes a bar on the same advance: latency of each window's indicator update
    (default set) after the simulator pushed the closes.  The simulator's weight limit is raised for
    this bench only, so that warming 10,000 windows does not take minutes (warm-up is benched apart)."""
    names = [f"C{i:04d}USDT" for i in range(symbols)]
    markets = [(s, i) for s in names for i in intervals]
    limit = max(6000, 4 * len(markets))
    async with simulator_process(names, weight_limit=limit) as url, aiohttp.ClientSession() as ctl:
        async with engine_on(url, markets, window, weight_limit=limit) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            sub = engine.subscribe([BarClosed, IndicatorsUpdated], maxsize=len(markets) * 8)
            await asyncio.sleep(3)  # let warm-up recomputation settle before measuring
            while sub.qsize():
                sub.get_nowait()
            # 5m and 1m both close at a five-minute boundary: advance to the next one
            now_ms = int((await (await ctl.get(f"{url}/sim/v1/state")).json())["clock_ms"])
            step = 300_000 if "5m" in intervals else 60_000
            advance = (now_ms // step + 1) * step - now_ms
            async with ctl.post(f"{url}/sim/v1/advance", json={"seconds": advance / 1000}) as resp:
                await resp.read()
            t0 = time.perf_counter()
            closed: dict[tuple[str, str], float] = {}
            updated: dict[tuple[str, str], float] = {}
            async with asyncio.timeout(300):
                while len(updated) < len(markets):
                    ev = await sub.get()
                    now = time.perf_counter() - t0
                    if isinstance(ev, BarClosed) and not ev.backfilled:
                        closed.setdefault((ev.symbol, ev.interval), now)
                    elif isinstance(ev, IndicatorsUpdated):
                        updated.setdefault((ev.symbol, ev.interval), now)
            lat = sorted(updated.values())
            own = sorted(updated[k] - closed[k] for k in updated if k in closed)
            last_close = max(closed.values()) if closed else 0.0
            after = [max(0.0, t - last_close) for t in lat]
            return {
                "windows": len(markets),
                "p50_s": lat[len(lat) // 2],
                "p99_s": lat[int(len(lat) * 0.99) - 1],
                "max_s": lat[-1],
                "last_close_s": last_close,
                "after_last_close_p99_s": after[int(len(after) * 0.99) - 1],
                "after_last_close_max_s": after[-1],
                "own_close_p50_s": own[len(own) // 2] if own else float("nan"),
                "own_close_p99_s": own[int(len(own) * 0.99) - 1] if own else float("nan"),
            }


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
        "ingest_server_ceiling_msgs_per_s": await bench_ingest_ceiling(),
        "warm_up_100x1000_s": await bench_warm_up(),
        "closed_bar_storm": await bench_closed_bar_storm(),
    }


def main() -> None:
    """`python -m bench.engine`: ingest, warm-up, closed-bar storm and engine RSS rows
    (`python -m bench.engine scale`: the engine-scale rows — warm-up 1,000/2,000/5,000 markets and
    the 10,000-window storm)."""
    if sys.argv[1:] == ["scale"]:
        print_scale(run_scale())
        return
    r = asyncio.run(run_all())
    print(
        f"ingest: {r['ingest_msgs_per_s']:,.0f} msgs/s (python-binance {r['ingest_python_binance_msgs_per_s']:,.0f};"
        f" the blast server's ceiling {r['ingest_server_ceiling_msgs_per_s']:,.0f})"
    )
    print(f"warm-up 100 symbols x 1000 bars: {r['warm_up_100x1000_s']:.2f} s")
    storm = r["closed_bar_storm"]
    print(f"closed-bar storm, 1000 symbols: p50 {storm['p50_s']:.3f} s, p99 {storm['p99_s']:.3f} s")
    print(f"RSS 1000 symbols x 2 intervals x 1000 bars: {bench_memory():.0f} MB")


def bench_memory_per_window() -> dict[str, float]:
    """What one more 1000-bar window with the default indicators costs: RSS of a process holding
    2,000 windows minus one holding 1,000 (each a fresh process), over the 1,000 added."""
    small, large = bench_memory(500), bench_memory(1000)
    return {"rss_1000_windows_mb": small, "rss_2000_windows_mb": large, "per_window_mb": (large - small) / 1000}


def run_scale() -> dict[str, Any]:
    return {
        "memory": bench_memory_per_window(),
        "warm_up": bench_warm_up_scaling(),
        "storm_10000": asyncio.run(bench_closed_bar_storm(5000, 1000, ("1m", "5m"))),
    }


def print_scale(r: dict[str, Any]) -> None:
    m = r["memory"]
    print(
        f"RSS per 1000-bar window with the default indicators: {m['per_window_mb']:.3f} MB"
        f" (1,000 windows {m['rss_1000_windows_mb']:.0f} MB, 2,000 windows {m['rss_2000_windows_mb']:.0f} MB)"
    )
    for w in r["warm_up"]:
        print(
            f"warm-up {w['markets']:>5} markets x 1000 bars: {w['seconds']:6.1f} s, 429 answers {w['rate_limited']}, "
            f"weight-budget floor {w['budget_floor_s']:.0f} s"
        )
    s = r["storm_10000"]
    print(
        f"closed-bar storm, {s['windows']} windows, from the advance: p50 {s['p50_s']:.3f} s, p99 {s['p99_s']:.3f} s;"
        f" the last close message arrived at {s['last_close_s']:.3f} s;"
        f" after it: p99 {s['after_last_close_p99_s']:.3f} s,"
        f" all {s['after_last_close_max_s']:.3f} s; each window from its own close: p50 {s['own_close_p50_s']:.3f} s,"
        f" p99 {s['own_close_p99_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
