"""Cluster workers: how long a dead worker's markets stay unfollowed, and the evaluation lag at a
given number of markets per worker.

    python -m bench.cluster_workers [--markets 150] [--workers 1,2,3] [--rounds 5] [--alerts 2000]
                                    [--heartbeat 1] [--liveness 4] [--lag-window 65]

Debian's PostgreSQL on loopback (testkit/postgres.py, fsync on), the exchange simulator on the
real clock (in this process) with ``--markets`` symbols × 1m, ``--alerts`` armed price alerts spread
over them (10-20 % away: armed, indexed, handed over, not fired), and ``chartgen worker`` processes
(testkit/workers.py).  For each worker count:

- **all live**: from starting the workers until every market's hand-over mark was written by its
  rendezvous owner (warm-up from REST, alerts indexed, first tick evaluated);
- **evaluation lag** over ``--lag-window`` seconds, which crosses a minute boundary (every market's
  bar closes at once — the closed-bar storm): sampled twice a second, per sample the worst market's
  lag (the server's clock minus the exchange time of the newest tick its owner evaluated, which
  includes the simulator's one update a second per stream); p50, p99 and max of those worst lags;
- with two workers or more, ``--rounds`` of **worker death** while prices move: a few prices
  posted on random markets, a random live worker SIGKILLed, more prices posted, then the seconds
  until every market is evaluated again by its new rendezvous owner (detection takes up to
  ``--liveness`` + one heartbeat; then warm-up, indexing, first tick and the trade backfill); the
  killed worker is restarted and the cluster settles before the next round;
- **windows**: at the end, every market's window on the worker holding it (``GET /window``)
  compared bar for bar with the simulator's klines — gap-free and equal, after the kills;
- **exactly once**: the alerts sit 1-6 % from the start prices and the posted prices half-way
  between those levels; at the end every market is evaluated past the last post, and the fired
  set is compared with what the simulator's trade tape (read in this process) says was reached:
  reached but not fired (missed), fired but not reached, and fired twice (``alert_events`` rows).

Everything — the workers, PostgreSQL, the simulator and this process — shares the machine's cores.
All workers reach the simulator from 127.0.0.1, so they share one REST weight budget (Binance
counts 6,000 a minute per IP); ``--hosts N`` gives the simulator and the workers N times that, as
if the workers ran on N hosts.  A take-over costs about 6 weight per market (klines 2, aggTrades 4).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from bench.agent_common import print_machine
from storage import PostgresDatabase

DEADLINE_S = 300.0


OFF_LEVEL = [sign * (j + 0.5) / 100 for j in range(7) for sign in (1, -1)]
"""Posted prices, as a fraction from the start price: half-way between alert levels."""


async def _post(
    http: aiohttp.ClientSession,
    url: str,
    rng: random.Random,
    symbols: list[str],
    base: dict[str, float],
    at: float | None = None,
) -> None:
    s = rng.choice(symbols)
    price = base[s] * (at if at is not None else 1 + rng.choice(OFF_LEVEL))
    async with http.post(f"{url}/sim/v1/price", json={"symbol": s, "price": f"{price:.8f}"}) as r:
        r.raise_for_status()


async def _marked_past(db: PostgresDatabase, markets: list[str], end_ms: int) -> bool:
    rows = await db.fetch("SELECT evaluated_ms FROM cluster_market_marks WHERE market = ANY($1::text[])", markets)
    return len(rows) == len(markets) and all(r["evaluated_ms"] > end_ms for r in rows)


async def _exactly_once(
    db: PostgresDatabase, sim: Any, alerts: list[Any], start_ms: int, end_ms: int
) -> dict[str, int]:
    """The fired set against the simulator's tape (read in-process: an oracle independent of the workers)."""
    rows = await db.fetch("SELECT alert_id, COUNT(*) AS n FROM alert_events WHERE outcome = 'fired' GROUP BY alert_id")
    fired = {r["alert_id"]: int(r["n"]) for r in rows}
    reached: set[str] = set()
    by_symbol: dict[str, list[Any]] = {}
    for a in alerts:
        by_symbol.setdefault(a.symbol, []).append(a)
    for sym, mine in by_symbol.items():
        tape = sim.exchange.tapes[sym].between(start_ms + 1, end_ms, 10**7)
        hi = max((float(t.price) for t in tape), default=0.0)
        lo = min((float(t.price) for t in tape), default=float("inf"))
        for a in mine:
            level = a.threshold
            if (a.kind == "price_above" and hi >= level) or (a.kind == "price_below" and lo <= level):
                reached.add(a.id)
    return {
        "reached": len(reached),
        "fired": len(fired),
        "missed": len(reached - set(fired)),
        "unreached_fired": len(set(fired) - reached),
        "doubled": sum(1 for n in fired.values() if n > 1),
    }


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def _lags(db: PostgresDatabase, markets: list[str], window_s: float) -> list[float]:
    worst: list[float] = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        row = await db.fetchrow(
            "SELECT MAX(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 - evaluated_ms) AS lag, COUNT(*) AS n"
            " FROM cluster_market_marks WHERE market = ANY($1::text[])",
            markets,
        )
        if row is not None and row["n"] == len(markets):
            worst.append(float(row["lag"]) / 1000)
        await asyncio.sleep(0.5)
    return worst


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from alerts import Alert, PgAlertStore
    from daemon import CLUSTER_MIGRATIONS
    from simulator import start_simulator
    from testkit.postgres import postgres_server
    from testkit.workers import Workers, until, window_problems

    symbols = [f"B{n:03d}USDT" for n in range(args.markets)]
    rng = random.Random(11)
    results: list[dict[str, Any]] = []
    with postgres_server() as server, tempfile.TemporaryDirectory() as logs:
        weight = 6000 * args.hosts
        sim = await start_simulator(host="127.0.0.1", port=0, clock="real", symbols=symbols, weight_limit=weight)
        http = aiohttp.ClientSession()
        try:
            for n in args.workers:
                dsn = await server.new_database()
                db = await PostgresDatabase.open(dsn)
                await db.migrate(CLUSTER_MIGRATIONS)
                base = {s: float(p) for s, p in sim.exchange.start_prices()}
                now = sim.exchange.now_ms() / 1000
                alerts = []
                for i in range(args.alerts):
                    s = symbols[i % len(symbols)]
                    above = rng.random() < 0.5
                    level = base[s] * (1 + rng.randint(1, 6) / 100 * (1 if above else -1))
                    alerts.append(
                        Alert(
                            id=f"b{uuid.uuid4().hex[:12]}",
                            principal=f"p{i % 50}",
                            symbol=s,
                            interval="1m",
                            kind="price_above" if above else "price_below",
                            threshold=level,
                            created_at=now,
                            armed_at=now,
                        )
                    )
                await PgAlertStore(db).insert_many(alerts)
                workers = Workers(
                    dsn,
                    sim.url,
                    Path(logs),
                    symbols=symbols,
                    heartbeat_s=args.heartbeat,
                    liveness_s=args.liveness,
                    env={"CHARTGEN_BINANCE_WEIGHT_LIMIT": str(weight)},
                )
                try:
                    started = time.monotonic()
                    for _ in range(n):
                        await workers.start(http=True)
                    await until(lambda n=n, w=workers, d=db: w.settled(d, n), DEADLINE_S, 0.1)
                    all_live = time.monotonic() - started
                    lags = await _lags(db, workers.markets, args.lag_window)
                    row: dict[str, Any] = {
                        "workers": n,
                        "markets": len(symbols),
                        "markets_per_worker": round(len(symbols) / n, 1),
                        "alerts": len(alerts),
                        "all_live_s": round(all_live, 2),
                        "lag_p50_s": round(_percentile(lags, 0.5), 2),
                        "lag_p99_s": round(_percentile(lags, 0.99), 2),
                        "lag_max_s": round(max(lags), 2),
                    }
                    each = row["markets_per_worker"]
                    print(
                        f"{n} worker(s), {len(symbols)} markets ({each} each), {len(alerts)} alerts:"
                        f" all live {all_live:.2f} s; worst-market lag p50 {row['lag_p50_s']} s"
                        f" p99 {row['lag_p99_s']} s max {row['lag_max_s']} s over {len(lags)} samples",
                        flush=True,
                    )
                    takeovers: list[float] = []
                    for r in range(args.rounds if n >= 2 else 0):
                        for _ in range(args.moves):
                            await _post(http, sim.url, rng, symbols, base)
                        dead = rng.choice(await workers.live(db))
                        workers.kill(dead)
                        killed = time.monotonic()
                        for _ in range(args.moves):
                            await _post(http, sim.url, rng, symbols, base)
                        await until(lambda n=n, w=workers, d=db: w.settled(d, n - 1), DEADLINE_S, 0.05)
                        takeovers.append(time.monotonic() - killed)
                        print(
                            f"  round {r + 1}: markets evaluated again {takeovers[-1]:.2f} s after the kill", flush=True
                        )
                        await workers.start(http=True)
                        await until(lambda n=n, w=workers, d=db: w.settled(d, n), DEADLINE_S, 0.1)
                    if takeovers:
                        row |= {
                            "takeover_p50_s": round(statistics.median(takeovers), 2),
                            "takeover_max_s": round(max(takeovers), 2),
                            "takeover_rounds": len(takeovers),
                        }
                        print(
                            f"  worker death: markets evaluated again p50 {row['takeover_p50_s']} s"
                            f" max {row['takeover_max_s']} s ({len(takeovers)} kills; liveness {args.liveness:g} s,"
                            f" heartbeat {args.heartbeat:g} s)",
                            flush=True,
                        )
                    for sym in symbols:  # back to the start: nothing more to reach
                        await _post(http, sim.url, rng, [sym], base, at=1.0)
                    end_ms = sim.exchange.now_ms()
                    await until(lambda d=db, m=workers.markets, e=end_ms: _marked_past(d, m, e), DEADLINE_S, 0.2)
                    row |= await _exactly_once(db, sim, alerts, int(now * 1000), end_ms)
                    problems = await window_problems(http, await workers.live_urls(), sim.url, workers.markets)
                    row["windows_differing"] = len(problems)
                    print(
                        f"  windows: {len(workers.markets) - len(problems)} of {len(workers.markets)} equal the"
                        f" exchange's klines{'; e.g. ' + problems[0] if problems else ''}",
                        flush=True,
                    )
                    print(
                        f"  exactly once: {row['reached']} alerts reached, {row['fired']} fired;"
                        f" missed {row['missed']}, fired without a crossing {row['unreached_fired']},"
                        f" fired twice {row['doubled']}",
                        flush=True,
                    )
                    results.append(row)
                finally:
                    await workers.close()
                    await db.close()
        finally:
            await http.close()
            await sim.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markets", type=int, default=150)
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 3])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--alerts", type=int, default=2000)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--liveness", type=float, default=4.0)
    parser.add_argument("--lag-window", type=float, default=65.0)
    parser.add_argument("--moves", type=int, default=6, help="prices posted before and after each kill")
    parser.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="REST weight budget as if the workers were spread over this many hosts (IPs): 6,000/min each",
    )
    args = parser.parse_args()
    print_machine()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
