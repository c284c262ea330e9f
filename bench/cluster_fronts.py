"""Cluster fronts and workers together: alerts set through either front, fired once by the workers,
and their notifications on streams open at every front.

    python -m bench.cluster_fronts [--markets 600] [--workers 3] [--fronts 2] [--alerts 2000]
                                   [--crossings 100] [--hosts 3] [--concurrency 16] [--bus local|nats]

Debian's PostgreSQL on loopback (testkit/postgres.py, fsync on), the exchange simulator on the
real clock (in this process) with ``--markets`` symbols × 1m, ``chartgen worker`` processes and
``chartgen --serve --cluster`` front processes (each a subprocess; everything shares the cores).
``--bus nats`` also starts Debian's nats-server on loopback (testkit/nats.py, JetStream on
file storage) and runs the roles with ``bus = "nats"``: fired notifications are announced to the
fronts over NATS instead of PostgreSQL's ``NOTIFY``.
The first principal (a cluster token made in PostgreSQL) subscribes to push at one front and opens
a notification stream (``GET /sse``) at every front; the stream checks cover its alerts.

- **set_alert through the fronts**: ``--alerts`` price alerts 2-6 % from the start prices (above
  and below), sent round-robin to the fronts as session-less ``tools/call`` requests,
  ``--concurrency`` at a time, by ``--principals`` tokens in turn: the latency of each call (p50,
  p99) and the calls per second.  One principal's alerts are set one at a time in PostgreSQL
  (the per-client cap is checked under a per-principal lock held to the commit's fsync), so
  several principals are what fronts run in parallel.
- **indexed**: from the last set_alert answer until the workers' ``/metrics`` count every alert
  (the store's ``NOTIFY`` reached the market's owner).
- **crossing → stream**: ``--crossings`` prices posted, each on a different market, 3.5 % above
  its start price (reaching its +2 % and +3 % alerts): per notification frame and per front, the
  time from the post to the frame read on that front's stream (includes the simulator's one
  stream update a second); p50, p99, max.
- **windows**: every market's window on the worker holding it (``GET /window``) compared bar for
  bar with the simulator's klines;
- **exactly once**: every market evaluated past the last post, the fired set compared with the
  simulator's trade tape (reached but not fired, fired without a crossing, fired twice), and per
  front stream: frames for alerts that did not fire, and alerts whose frame came twice or never.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.agent_common import print_machine
from bench.cluster_workers import _exactly_once, _marked_past, _percentile

DEADLINE_S = 300.0


async def _tool(
    http: aiohttp.ClientSession, url: str, token: str, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        r.raise_for_status()
        result = (await r.json())["result"]
    if result.get("isError"):
        raise RuntimeError(f"{name}: {result['content'][0]['text']}")
    return dict(json.loads(result["content"][0]["text"]))


async def _read_stream(resp: aiohttp.ClientResponse, frames: list[tuple[str, float]]) -> None:
    """Append (alert id, arrival time) for each notification frame of a raw SSE stream."""
    while line := await resp.content.readline():
        text = line.decode()
        if text.startswith("data: "):
            frames.append((json.loads(text[6:])["params"]["alert_id"], time.monotonic()))


async def _indexed(http: aiohttp.ClientSession, urls: list[str]) -> int:
    total = 0
    for url in urls:
        async with http.get(f"{url}/metrics") as r:
            m = re.search(r"^chartgen_worker_alerts (\S+)$", await r.text(), re.M)
        total += int(float(m.group(1))) if m else 0
    return total


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon import CLUSTER_MIGRATIONS
    from mcp_bridge import ALL_SCOPES, PgTokenStore
    from simulator import start_simulator
    from storage import PostgresDatabase
    from testkit.daemon_proc import DaemonProc, start_fronts
    from testkit.nats import running_nats
    from testkit.postgres import postgres_server
    from testkit.workers import Workers, until, window_problems

    _nats_stack = contextlib.AsyncExitStack()

    symbols = [f"F{n:03d}USDT" for n in range(args.markets)]
    rng = random.Random(5)
    row: dict[str, Any] = {"markets": args.markets, "workers": args.workers, "fronts": args.fronts, "bus": args.bus}
    with postgres_server() as server, tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as sync_stack:
        bus_env: dict[str, str] = {}
        if args.bus == "nats":
            nats_dir = Path(sync_stack.enter_context(tempfile.TemporaryDirectory()))
            nats = await _nats_stack.enter_async_context(running_nats(nats_dir / "jetstream"))
            small = {
                "market_max_bytes": 64 << 20,
                "notify_max_bytes": 64 << 20,
                "commands_max_bytes": 8 << 20,
                "ticks_max_bytes": 4 << 20,
            }
            bus_env = {"CHARTGEN_BUS": "nats", "CHARTGEN_NATS_URL": nats.url, "CHARTGEN_BUS_LIMITS": json.dumps(small)}
        weight = 6000 * args.hosts
        sim = await start_simulator(host="127.0.0.1", port=0, clock="real", symbols=symbols, weight_limit=weight)
        dsn = await server.new_database()
        db = await PostgresDatabase.open(dsn)
        await db.migrate(CLUSTER_MIGRATIONS)
        tokens = [
            (await PgTokenStore(db).create(f"bench{i}", principal=f"bench{i}", scopes=ALL_SCOPES))[0]
            for i in range(args.principals)
        ]
        token = tokens[0]  # the principal whose streams are read
        env = {
            "CHARTGEN_POSTGRES_DSN": dsn,
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_INTERVALS": "1m",
            "CHARTGEN_LOG_FORMAT": "json",
            "CHARTGEN_ALERTS_MAX_PER_CLIENT": str(max(10_000, args.alerts)),
            **bus_env,
        }
        workers = Workers(
            dsn,
            sim.url,
            Path(logs),
            symbols=symbols,
            heartbeat_s=1.0,
            liveness_s=4.0,
            env={"CHARTGEN_BINANCE_WEIGHT_LIMIT": str(weight), **bus_env},
        )
        fronts: list[DaemonProc] = []
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None))
        readers: list[asyncio.Task[None]] = []
        try:
            for _ in range(args.workers):
                await workers.start(http=True)
            await start_fronts(fronts, args.fronts, env)
            await until(lambda: workers.settled(db, args.workers), DEADLINE_S, 0.1)
            worker_urls = [await workers.http_url(i) for i in range(args.workers)]
            print(f"  {args.workers} workers live on {args.markets} markets, {args.fronts} fronts ready", flush=True)

            await _tool(http, fronts[0].mcp_url, token, "subscribe_notifications", {})
            frames: list[list[tuple[str, float]]] = [[] for _ in fronts]
            for front, got in zip(fronts, frames, strict=True):
                resp = await http.get(
                    f"{front.base}/sse", headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
                )
                assert resp.status == 200, await resp.text()
                readers.append(asyncio.create_task(_read_stream(resp, got)))

            base = {s: float(p) for s, p in sim.exchange.start_prices()}
            specs = []
            for i in range(args.alerts):
                s = symbols[i % len(symbols)]
                pct = rng.randint(2, 6) / 100 * (1 if rng.random() < 0.5 else -1)
                kind = "price_above" if pct > 0 else "price_below"
                specs.append((s, kind, round(base[s] * (1 + pct), 8)))
            start_ms = sim.exchange.now_ms()
            latencies: list[float] = []
            ids: dict[str, tuple[str, str, float]] = {}
            streamed: set[str] = set()
            gate = asyncio.Semaphore(args.concurrency)

            async def set_one(i: int, spec: tuple[str, str, float]) -> None:
                s, kind, level = spec
                front = fronts[i % len(fronts)]
                owner = tokens[i % len(tokens)]
                async with gate:
                    t0 = time.perf_counter()
                    args_ = {"symbol": s, "condition": {kind: level}}
                    made = await _tool(http, front.mcp_url, owner, "set_alert", args_)
                    latencies.append(time.perf_counter() - t0)
                ids[made["alert_id"]] = spec
                if owner == token:
                    streamed.add(made["alert_id"])

            t_set = time.perf_counter()
            await asyncio.gather(*(set_one(i, spec) for i, spec in enumerate(specs)))
            set_s = time.perf_counter() - t_set
            t_index = time.monotonic()
            await until(lambda: _has(http, worker_urls, args.alerts), DEADLINE_S, 0.05)
            row |= {
                "set_alert_per_s": round(args.alerts / set_s, 1),
                "set_alert_p50_ms": round(_percentile(latencies, 0.5) * 1000, 2),
                "set_alert_p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
                "indexed_after_s": round(time.monotonic() - t_index, 3),
            }
            print(
                f"  set_alert through {args.fronts} fronts: {row['set_alert_per_s']}/s,"
                f" p50 {row['set_alert_p50_ms']} ms, p99 {row['set_alert_p99_ms']} ms;"
                f" all indexed by the workers {row['indexed_after_s']} s after the last answer",
                flush=True,
            )

            posted: dict[str, float] = {}
            for s in rng.sample(symbols, min(args.crossings, len(symbols))):
                async with http.post(
                    f"{sim.url}/sim/v1/price", json={"symbol": s, "price": f"{base[s] * 1.035:.8f}"}
                ) as r:
                    r.raise_for_status()
                posted[s] = time.monotonic()
            for s in posted:
                async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": s, "price": f"{base[s]:.8f}"}) as r:
                    r.raise_for_status()
            end_ms = sim.exchange.now_ms()
            await until(lambda: _marked_past(db, workers.markets, end_ms), DEADLINE_S, 0.2)

            class _Spec:  # what _exactly_once reads of an alert
                def __init__(self, alert_id: str, spec: tuple[str, str, float]) -> None:
                    self.id, (self.symbol, self.kind, self.threshold) = alert_id, spec

            row |= await _exactly_once(db, sim, [_Spec(i, s) for i, s in ids.items()], start_ms, end_ms)
            problems = await window_problems(http, worker_urls, sim.url, workers.markets)
            row["windows_differing"] = len(problems)
            print(
                f"  windows: {len(workers.markets) - len(problems)} of {len(workers.markets)} equal the exchange's"
                f" klines{'; e.g. ' + problems[0] if problems else ''}",
                flush=True,
            )
            rows = await db.fetch("SELECT alert_id FROM alert_events WHERE outcome = 'fired'")
            fired = {r["alert_id"] for r in rows} & streamed  # the streams are the first principal's
            with contextlib.suppress(TimeoutError):  # what is still missing then is reported below
                await until(lambda: _all_framed(frames, fired), 60.0, 0.05)
            per_front = []
            for got in frames:
                seen = [a for a, _ in got]
                delays = [t - posted[ids[a][0]] for a, t in got if a in ids and ids[a][0] in posted]
                per_front.append(
                    {
                        "frames": len(seen),
                        "doubled": len(seen) - len(set(seen)),
                        "not_fired": len(set(seen) - fired),
                        "missing": len(fired - set(seen)),
                        "p50_s": round(_percentile(delays, 0.5), 3) if delays else None,
                        "p99_s": round(_percentile(delays, 0.99), 3) if delays else None,
                        "max_s": round(max(delays), 3) if delays else None,
                    }
                )
            row["streams"] = per_front
            print(
                f"  exactly once: {row['reached']} reached, {row['fired']} fired; missed {row['missed']},"
                f" fired without a crossing {row['unreached_fired']}, fired twice {row['doubled']}",
                flush=True,
            )
            for i, f in enumerate(per_front):
                print(
                    f"  stream at front {i + 1}: {f['frames']} frames, doubled {f['doubled']}, missing {f['missing']},"
                    f" not fired {f['not_fired']}; crossing → frame p50 {f['p50_s']} s, p99 {f['p99_s']} s,"
                    f" max {f['max_s']} s",
                    flush=True,
                )
        finally:
            for task in readers:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for front in fronts:
                await front.stop()
            await workers.close()
            await http.close()
            await db.close()
            await sim.close()
            await _nats_stack.aclose()
    return row


async def _has(http: aiohttp.ClientSession, urls: list[str], want: int) -> bool:
    return await _indexed(http, urls) >= want


async def _all_framed(frames: list[list[tuple[str, float]]], fired: set[str]) -> bool:
    return all(fired <= {a for a, _ in got} for got in frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markets", type=int, default=600)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--fronts", type=int, default=2)
    parser.add_argument("--alerts", type=int, default=2000)
    parser.add_argument("--crossings", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--principals", type=int, default=1, help="tokens the alerts are set with (round-robin); streams: the first"
    )
    parser.add_argument(
        "--hosts", type=int, default=3, help="REST weight budget as if the workers ran on this many hosts (IPs)"
    )
    parser.add_argument(
        "--bus", choices=("local", "nats"), default="local", help="how fronts hear of fired notifications"
    )
    args = parser.parse_args()
    print_machine()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
