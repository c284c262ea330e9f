"""The simulator's clock advance: every subscribed kline stream closes its kline at once.

    python -m bench.sim_advance [--symbols 1000] [--interval 1m] [--connections 4] [--seconds 60]
                                [--advances 3] [--runs 1]

A manual-clock simulator in this process with ``--symbols`` symbols; a real websocket client
(aiohttp) subscribes to ``<symbol>@kline_<interval>`` of every symbol over ``--connections``
combined-stream connections (``/stream?streams=…``).  Then ``--advances`` times:
``POST /sim/v1/advance {"seconds": N}`` and, from just before the request, the time until

- the first closed-kline frame (``k.x`` true, the kline the advance closed) was received,
- all ``--symbols`` of them were received,
- the advance's HTTP answer arrived,

and the CPU time this process used until all were received (the steadier figure on a shared machine).

The first advance of a run is the cold one (nothing cached); later ones follow on.  The client
shares this process (and its event loop) with the simulator; its share (reading ~2 frames per
symbol) is the same before and after a change to the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp
import orjson

from bench.agent_common import print_machine
from bench.sim_klines import symbols
from simulator import INTERVAL_MS, open_time_of, start_simulator

DEADLINE_S = 300.0


class Closes:
    """Closed-kline frames received, by the open time of the kline they close."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.first: dict[int, float] = {}
        self.seen: dict[int, set[str]] = {}
        self.done: dict[int, asyncio.Event] = {}

    def event(self, open_time: int) -> asyncio.Event:
        return self.done.setdefault(open_time, asyncio.Event())

    def add(self, frame: dict[str, Any]) -> None:
        k = frame["data"]["k"]
        if not k["x"]:
            return
        t = k["t"]
        self.first.setdefault(t, time.perf_counter())
        seen = self.seen.setdefault(t, set())
        seen.add(k["s"])
        if len(seen) == self.expected:
            self.event(t).set()


async def _reader(ws: aiohttp.ClientWebSocketResponse, closes: Closes) -> None:
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            closes.add(orjson.loads(msg.data))


async def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


async def bench_advance(
    n_symbols: int, interval: str, connections: int, seconds: float, advances: int
) -> list[dict[str, float]]:
    names = symbols(n_symbols)
    streams = [f"{s.lower()}@kline_{interval}" for s in names]
    per_conn = -(-len(streams) // connections)
    closes = Closes(n_symbols)
    out: list[dict[str, float]] = []
    async with (
        await start_simulator(clock="manual", symbols=names) as sim,
        aiohttp.ClientSession() as http,
    ):
        sockets = []
        for i in range(0, len(streams), per_conn):
            url = f"{sim.ws_url}/stream?streams={'/'.join(streams[i : i + per_conn])}"
            sockets.append(await http.ws_connect(url, max_msg_size=1 << 22))
        readers = [asyncio.create_task(_reader(ws, closes)) for ws in sockets]
        hub = sim.exchange.hub
        await _wait_for(lambda: sum(len(c.streams) for c in hub.connections) == n_symbols, "subscriptions")
        try:
            for _ in range(advances):
                closing = open_time_of(interval, sim.exchange.now_ms())
                done = closes.event(closing)
                t0, cpu0 = time.perf_counter(), time.process_time()
                async with http.post(f"{sim.url}/sim/v1/advance", json={"seconds": seconds}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                answered = time.perf_counter()
                async with asyncio.timeout(DEADLINE_S):
                    await done.wait()
                everything, cpu = time.perf_counter(), time.process_time() - cpu0
                out.append(
                    {
                        "first_closed_s": closes.first[closing] - t0,
                        "all_closed_s": everything - t0,
                        "answer_s": answered - t0,
                        "cpu_s": cpu,
                    }
                )
        finally:
            for ws in sockets:
                await ws.close()
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--symbols", type=int, default=1000, help="symbols, one kline stream each")
    parser.add_argument("--interval", default="1m")
    parser.add_argument("--connections", type=int, default=4, help="websocket connections sharing the streams")
    parser.add_argument("--seconds", type=float, default=60.0, help="clock advance per step")
    parser.add_argument("--advances", type=int, default=3, help="advances per run (the first is cold)")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if args.seconds * 1000 < INTERVAL_MS[args.interval]:
        parser.error("--seconds must close the interval's kline (at least its length)")
    print_machine()
    firsts = []
    for run in range(args.runs):
        results = asyncio.run(bench_advance(args.symbols, args.interval, args.connections, args.seconds, args.advances))
        for i, r in enumerate(results):
            print(
                f"run {run + 1} advance {i + 1} ({args.seconds:g} s, {args.symbols:,} × {args.interval}, "
                f"{args.connections} connections): first closed frame {r['first_closed_s'] * 1000:.0f} ms, "
                f"all {args.symbols:,} {r['all_closed_s'] * 1000:.0f} ms, answer {r['answer_s'] * 1000:.0f} ms, "
                f"CPU {r['cpu_s'] * 1000:.0f} ms"
                "  target ≤ 300 ms (first)"
            )
        firsts.append(results[0]["first_closed_s"])
    if args.runs > 1:
        median = statistics.median(firsts) * 1000
        print(f"cold advance, first closed frame: median {median:.0f} ms over {args.runs} runs")


if __name__ == "__main__":
    main()
