"""Rendering under a flood: is a quiet client still served while another floods the render pool?

    python -m bench.render_flood [--workers N ...] [--runs R]

The daemon runs as its own process (``--serve --trade --sim``, manual sim clock), with two
personal access tokens, A and B.  Client A runs in a separate process (so its own JSON
handling does not slow B's client): ``--flood`` concurrent requests at all times, half
4096×4096 PNG charts of 5000 bars, half 5000-bar ``format: series`` payloads (sample data,
default indicators).  Client B, from this process, first measures its idle figures (MCP
``ping``; a 200-bar 1920×1080 PNG chart with the default indicators), then the same while A
floods: ``ping`` every 10 ms throughout, and ``--charts`` of its charts one after another.
All calls are raw JSON-RPC POSTs with a bearer over keep-alive connections, as chartgen's
clients send them.  Also reported: the daemon's RSS (its process and render workers) idle
after start, and A's completed and refused requests.

Targets (issue 12 §4): B's ping p99 under 50 ms and B's chart under 2× its idle time.

Also measured, to choose where series payloads are built: the event loop's lag while
5000-bar series payloads are built two at a time on threads versus worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLOOD = 8
B_CHARTS = 6
PNG_ARGS = {"format": "png", "width": 4096, "height": 4096, "bars": 5000}
SERIES_ARGS = {"format": "series", "bars": 5000}
B_CHART_ARGS = {"format": "png", "bars": 200}


def _call(name: str, arguments: dict[str, Any], req_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (the render workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return out


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    """RSS of ``pid`` and all its descendants (the render workers), in MB."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024


async def _flood(url: str, token: str, concurrency: int) -> None:
    """Client A (``--flood-client``): keep ``concurrency`` heavy requests in flight until stdin closes."""
    headers = {"Authorization": f"Bearer {token}"}
    counts = {"png": 0, "series": 0, "refused": 0, "errors": 0}
    first = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:

        async def loop(i: int) -> None:
            kind, args = ("png", PNG_ARGS) if i % 2 == 0 else ("series", SERIES_ARGS)
            n = 0
            while True:
                n += 1
                async with http.post(url, json=_call("generate_chart", args, i * 100_000 + n), headers=headers) as r:
                    body = await r.read()
                if r.status != 200:
                    counts["errors"] += 1
                elif b'"isError":true' in body:
                    counts["refused" if b"retry" in body else "errors"] += 1
                else:
                    counts[kind] += 1
                first.set()

        tasks = [asyncio.create_task(loop(i)) for i in range(concurrency)]
        await first.wait()
        print("flooding", flush=True)
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.read()  # until the parent closes our stdin
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(counts), flush=True)


class ClientB:
    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        self.http, self.url, self.headers = http, url, {"Authorization": f"Bearer {token}"}
        self.n = 0

    async def ping(self) -> float:
        self.n += 1
        t0 = time.perf_counter()
        async with self.http.post(
            self.url, json={"jsonrpc": "2.0", "id": self.n, "method": "ping"}, headers=self.headers
        ) as r:
            await r.read()
        assert r.status == 200, r.status
        return (time.perf_counter() - t0) * 1000

    async def chart(self) -> float:
        self.n += 1
        t0 = time.perf_counter()
        async with self.http.post(
            self.url, json=_call("generate_chart", B_CHART_ARGS, self.n), headers=self.headers
        ) as r:
            body = await r.read()
        elapsed = (time.perf_counter() - t0) * 1000
        assert r.status == 200 and b'"isError":true' not in body, body[:300]
        return elapsed


async def bench_render_flood(workers: int, flood: int = FLOOD, b_charts: int = B_CHARTS) -> dict[str, Any]:
    from testkit.daemon_proc import PRODUCTION_RENDER, create_token, start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        token_a, token_b = await create_token(data, "flood-a"), await create_token(data, "quiet-b")
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1h"],
            data_dir=data,
            env={"CHARTGEN_LOG_LEVEL": "info", "CHARTGEN_RENDER_WORKERS": str(workers), **PRODUCTION_RENDER},
        )
        try:
            await daemon.wait_ready()
            async with aiohttp.ClientSession() as http:
                b = ClientB(http, daemon.mcp_url, token_b)
                for _ in range(3):
                    await b.chart()  # warm the workers, caches and connection
                rss_idle = _rss_mb(daemon.proc.pid)
                idle_pings = [await b.ping() for _ in range(50)]
                idle_charts = [await b.chart() for _ in range(b_charts)]

                flooder = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bench.render_flood",
                    "--flood-client",
                    daemon.mcp_url,
                    token_a,
                    str(flood),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
                assert flooder.stdout is not None and flooder.stdin is not None
                assert (await flooder.stdout.readline()).strip() == b"flooding"
                pings: list[float] = []
                stop = asyncio.Event()

                async def pinger() -> None:
                    while not stop.is_set():
                        pings.append(await b.ping())
                        await asyncio.sleep(0.01)  # the ping cadence, not synchronisation

                ping_task = asyncio.create_task(pinger())
                procs = _tree(daemon.proc.pid)
                cpu0, t0 = [_cpu_s(p) for p in procs], time.perf_counter()
                charts = [await b.chart() for _ in range(b_charts)]
                wall = time.perf_counter() - t0
                cpu = [(_cpu_s(p) - c) / wall for p, c in zip(procs, cpu0, strict=True)]
                rss_flood = _rss_mb(daemon.proc.pid)
                stop.set()
                await ping_task
                flooder.stdin.close()
                out, _ = await flooder.communicate()
                counts = json.loads(out.decode().strip().splitlines()[-1])
        finally:
            await daemon.stop()
    idle_chart = statistics.median(idle_charts)
    return {
        "render_workers": workers,
        "flood_concurrency": flood,
        "ping_idle_ms": {"p50": _pct(idle_pings, 50), "p99": _pct(idle_pings, 99)},
        "ping_flood_ms": {"p50": _pct(pings, 50), "p99": _pct(pings, 99), "max": max(pings), "n": len(pings)},
        "chart_idle_ms": idle_chart,
        "chart_flood_ms": {"median": statistics.median(charts), "max": max(charts), "runs": charts},
        "chart_ratio_median": statistics.median(charts) / idle_chart,
        "chart_ratio_max": max(charts) / idle_chart,
        "flooder": counts,
        "cpu_cores_flood": {"daemon": cpu[0], "workers": sum(cpu[1:])},
        "rss_idle_mb": rss_idle,
        "rss_flood_mb": rss_flood,
    }


def _series_job() -> int:
    """A 5000-bar series payload with the default chart indicators, built as a worker builds it."""
    from engine import ChartJob, parse_requests, run_chart_job, sample_bars

    requests = tuple(parse_requests(["ema_stack", "cipher_b", "macd"]))
    job = ChartJob(sample_bars(5000), requests, (None,) * 3, symbol=None, interval="1h", format="series")
    text = run_chart_job(job).text
    return len(text or "")


async def bench_loop_lag(jobs: int = 12, concurrency: int = 2) -> dict[str, Any]:
    """Where to build series payloads: the event loop's lag (a 2 ms timer's lateness) while ``jobs``
    payloads are built ``concurrency`` at a time on threads, and on (warm) worker processes."""
    import multiprocessing
    from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

    async def lag_while(executor: Executor) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(executor, _series_job) for _ in range(concurrency)))  # warm
        lags: list[float] = []
        stop = asyncio.Event()

        async def probe() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.002)
                lags.append((time.perf_counter() - t0 - 0.002) * 1000)

        limit = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with limit:
                await loop.run_in_executor(executor, _series_job)

        task = asyncio.create_task(probe())
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(jobs)))
        wall = time.perf_counter() - t0
        stop.set()
        await task
        return {"p50_ms": _pct(lags, 50), "p99_ms": _pct(lags, 99), "max_ms": max(lags), "wall_s": wall}

    with ThreadPoolExecutor(concurrency) as threads:
        on_threads = await lag_while(threads)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(concurrency, mp_context=ctx) as processes:
        on_processes = await lag_while(processes)
    return {"threads": on_threads, "processes": on_processes}


def run(workers: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    out: dict[str, Any] = {"loop_lag": asyncio.run(bench_loop_lag())}
    out.update({f"workers_{w}": asyncio.run(bench_render_flood(w)) for w in workers})
    return out


def print_table(results: dict[str, Any]) -> None:
    lag = results.get("loop_lag")
    if lag is not None:
        print("event-loop lag while 5000-bar series payloads are built, 2 at a time (p50 / p99 / max):")
        for where in ("threads", "processes"):
            x = lag[where]
            print(f"  on {where:<9} {x['p50_ms']:6.2f} / {x['p99_ms']:6.2f} / {x['max_ms']:6.2f} ms")
    for name, r in results.items():
        if not name.startswith("workers_"):
            continue
        p, c = r["ping_flood_ms"], r["chart_flood_ms"]
        ping_ok = "yes" if p["p99"] < 50 else "NO"
        chart_ok = "yes" if r["chart_ratio_max"] < 2 else "NO"
        print(f"render_workers={r['render_workers']}, A keeps {r['flood_concurrency']} heavy charts in flight:")
        pings = f"{p['p50']:6.1f} / {p['p99']:6.1f} / {p['max']:6.1f} ms"
        print(f"  B ping p50 / p99 / max {pings}  (target p99 < 50)  {ping_ok}")
        print(
            f"  B 200-bar chart idle {r['chart_idle_ms']:6.0f} ms; under flood median {c['median']:6.0f}, "
            f"max {c['max']:6.0f} ms = {r['chart_ratio_max']:.2f}x idle  (target < 2x)  {chart_ok}"
        )
        rss = f"daemon RSS idle {r['rss_idle_mb']:.0f} MB, under flood {r['rss_flood_mb']:.0f} MB"
        use = r["cpu_cores_flood"]
        print(f"  A served {r['flooder']}; {rss}")
        print(f"  CPU under flood (cores): daemon {use['daemon']:.2f}, render workers {use['workers']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.render_flood")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="render_workers values to measure")
    parser.add_argument("--runs", type=int, default=1, help="repeat each measurement")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    parser.add_argument("--flood-client", nargs=3, metavar=("URL", "TOKEN", "CONCURRENCY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_client:
        url, token, concurrency = args.flood_client
        asyncio.run(_flood(url, token, int(concurrency)))
        return
    for _ in range(args.runs):
        results = run(tuple(args.workers))
        print_table(results)
        if args.json:
            print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
