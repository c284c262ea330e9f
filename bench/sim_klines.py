"""The simulator's kline history: many ``GET /api/v3/klines`` of full windows, as a warm-up does.

    python -m bench.sim_klines [--requests 1000] [--limit 1000] [--concurrency 32] [--interval 1m]
                               [--runs 1]

A manual-clock simulator in this process with ``--requests`` symbols; one aiohttp client sends one
request per symbol (``limit`` bars, the newest window), ``--concurrency`` in flight at a time.
Every symbol is asked once, so nothing comes from the simulator's cache of closed klines: this is
the cost of a cold warm-up, the floor under every warm-up measurement.  Printed per run: wall time
from the first request to the last answer, requests per second, bars per second, and the CPU time
this process used meanwhile (on a machine shared with other work, the steadier figure).  The client
shares this process (and its event loop) with the simulator: its share is the same before and
after a change to the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp

from bench.agent_common import print_machine
from simulator import start_simulator


def symbols(n: int) -> list[str]:
    return [f"S{i:04d}USDT" for i in range(n)]


async def bench_klines(requests: int, limit: int, concurrency: int, interval: str) -> dict[str, Any]:
    names = symbols(requests)
    async with (
        await start_simulator(clock="manual", symbols=names, weight_limit=10_000_000) as sim,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http,
    ):
        url = f"{sim.url}/api/v3/klines"
        sem = asyncio.Semaphore(concurrency)
        rows = 0

        async def one(sym: str) -> None:
            nonlocal rows
            async with sem, http.get(url, params={"symbol": sym, "interval": interval, "limit": limit}) as r:
                body = await r.read()
                assert r.status == 200, body
                rows += body.count(b"[") - 1  # the client does not parse: the simulator is measured

        t0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(s) for s in names))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert rows == requests * limit, rows
    return {"requests": requests, "bars": rows, "seconds": elapsed, "cpu_s": cpu, "per_s": requests / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests, one symbol each")
    parser.add_argument("--limit", type=int, default=1000, help="bars per request (1..1000)")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight at a time")
    parser.add_argument("--interval", default="1m")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    print_machine()
    times = []
    for _ in range(args.runs):
        r = asyncio.run(bench_klines(args.requests, args.limit, args.concurrency, args.interval))
        times.append(r["seconds"])
        print(
            f"sim klines: {r['requests']:,} × {args.limit} bars ({args.interval}), {args.concurrency} in flight: "
            f"{r['seconds']:.2f} s ({r['per_s']:,.0f} req/s, {r['bars'] / r['seconds']:,.0f} bars/s; "
            f"this process's CPU {r['cpu_s']:.2f} s)  target ≤ 3 s"
        )
    if args.runs > 1:
        print(f"median {statistics.median(times):.2f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
