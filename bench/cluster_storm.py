"""Scale-out: the closed-bar storm across 1, 2 and 3 cluster workers — markets followed vs workers at
a fixed number of markets per worker.

    python -m bench.cluster_storm [--per-worker 1000] [--workers 1,2,3] [--window-bars 1000]
                                  [--storms 2] [--hosts 20]

Debian's PostgreSQL and nats-server on loopback (testkit), the exchange simulator on a manual
clock in this process with ``--per-worker`` × N symbols × 1m, and N ``chartgen worker`` processes
(testkit/workers.py) with ``bus = "nats"`` and the default indicators (cipher_b, macd, rsi)
over ``--window-bars`` bars.  For each N: start the workers, nudge the clock (0.1 s steps, inside
the minute) until every market was taken by its rendezvous owner and evaluated (its hand-over mark
written), then ``--storms`` times advance the clock to the next minute: every market's bar closes
at once.  Each worker publishes every closed bar and, once it recomputed that window's indicators,
its indicator update on NATS (daemon/parts/market_bus.py), both stamped with the worker's clock
(``published_ms``; one host, one clock).  This process subscribes to ``chartgen.market.>`` and,
per storm, reports:

- **complete**: markets whose indicator update for the closed bar arrived (must be all), and whose
  closed bar arrived;
- **from the last close**: per market, its update's time minus the moment the simulator finished
  pushing the closes (the last close message left it; it reached a worker no earlier — so this is
  the single-node storm row's measure, "after the last close message reached the engine", or a
  little more) — p50, p99, max over all markets;
- **from the advance**: the same from the moment the clock was advanced (includes the simulator
  computing every market's klines and pushing the closes, in this process).

"Settled" also waits for every market's first indicator update (computed once its window is warm:
it seeds the indicator states, ~16 ms a window here), so a storm measures closes, not that backlog.

Everything — the workers, PostgreSQL, NATS, the simulator and this process — shares the machine's
cores.  All workers reach the simulator from 127.0.0.1; ``--hosts`` multiplies its REST weight
budget (6,000 a minute per IP) as if they ran on that many hosts: warming 1,000 bars costs ~5 weight
per market.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.agent_common import print_machine
from bench.cluster_workers import _percentile
from storage import PostgresDatabase

DEADLINE_S = 900.0


class Collected:
    """Bars and indicator updates seen on NATS, by (symbol, bar time)."""

    def __init__(self) -> None:
        self.bars: dict[tuple[str, int], dict[str, Any]] = {}
        self.updates: dict[tuple[str, int], dict[str, Any]] = {}

    async def on_message(self, msg: Any) -> None:
        kind = msg.subject.split(".")[2]
        if kind == "bar":
            body = json.loads(msg.data)
            self.bars.setdefault((body["symbol"], body["time"]), body)
        elif kind == "indicator":
            body = json.loads(msg.data)
            self.updates.setdefault((body["symbol"], body["bar_time"]), body)


async def _storm(sim: Any, collected: Collected, symbols: list[str]) -> dict[str, Any]:
    now_ms = sim.exchange.now_ms()
    to_close = 60 - (now_ms / 1000) % 60 + 0.001
    bar_time = int((now_ms // 60_000) * 60)
    advanced_ms = time.time() * 1000
    sim.exchange.advance(to_close)  # pushes every market's closing kline (blocks this process meanwhile)
    pushed_ms = time.time() * 1000
    keys = [(s, bar_time) for s in symbols]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(k in collected.updates for k in keys):  # noqa: ASYNC110
        await asyncio.sleep(0.2)  # filled by the NATS subscription's callback
    got = [k for k in keys if k in collected.updates]
    after_push = [max(0.0, collected.updates[k]["published_ms"] - pushed_ms) for k in got]
    after_advance = [collected.updates[k]["published_ms"] - advanced_ms for k in got]
    bars = sum(1 for k in keys if k in collected.bars)
    return {
        "complete": len(got),
        "bars": bars,
        "push_s": round((pushed_ms - advanced_ms) / 1000, 2),
        "close_p50_s": round(_percentile(after_push, 0.5) / 1000, 3),
        "close_p99_s": round(_percentile(after_push, 0.99) / 1000, 3),
        "close_max_s": round(max(after_push) / 1000, 3),
        "advance_p99_s": round(_percentile(after_advance, 0.99) / 1000, 3),
        "advance_max_s": round(max(after_advance) / 1000, 3),
    }


def _settled(
    sim: Any, workers: Any, db: PostgresDatabase, n: int, collected: Collected, markets: int
) -> Callable[[], Awaitable[bool]]:
    """Every market taken by its owner and evaluated, and its first indicator update seen."""

    async def check() -> bool:
        if (sim.exchange.now_ms() / 1000) % 60 < 50:
            sim.exchange.advance(0.1)  # a tick on every market, inside the minute
        seeded = {symbol for symbol, _ in collected.updates}
        return len(seeded) == markets and bool(await workers.settled(db, n))

    return check


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import nats

    from daemon import CLUSTER_MIGRATIONS
    from simulator import start_simulator
    from testkit.nats import running_nats
    from testkit.postgres import postgres_server
    from testkit.workers import Workers, until

    results: list[dict[str, Any]] = []
    weight = 6000 * args.hosts
    with postgres_server() as server, tempfile.TemporaryDirectory() as tmp:
        async with running_nats(Path(tmp) / "jetstream") as bus_server:
            for n in args.workers:
                symbols = [f"S{i:04d}USDT" for i in range(args.per_worker * n)]
                sim = await start_simulator(host="127.0.0.1", port=0, symbols=symbols, weight_limit=weight)
                dsn = await server.new_database()
                db = await PostgresDatabase.open(dsn)
                await db.migrate(CLUSTER_MIGRATIONS)
                collected = Collected()
                client = await nats.connect(bus_server.url)
                await client.subscribe("chartgen.market.>", cb=collected.on_message)
                logs = Path(tmp) / f"logs-{n}"
                logs.mkdir()
                workers = Workers(
                    dsn,
                    sim.url,
                    logs,
                    symbols=symbols,
                    heartbeat_s=1.0,
                    liveness_s=4.0,
                    window_bars=args.window_bars,
                    env={
                        "CHARTGEN_BUS": "nats",
                        "CHARTGEN_NATS_URL": bus_server.url,
                        "CHARTGEN_BINANCE_WEIGHT_LIMIT": str(weight),
                    },
                )
                try:
                    started = time.monotonic()
                    for _ in range(n):
                        await workers.start()

                    await until(_settled(sim, workers, db, n, collected, len(symbols)), DEADLINE_S, 0.5)
                    all_live = time.monotonic() - started
                    for k in range(args.storms):
                        storm = str(k + 1)
                        row = {"workers": n, "markets": len(symbols), "per_worker": args.per_worker, "storm": storm}
                        row |= {"all_live_s": round(all_live, 1)} | await _storm(sim, collected, symbols)
                        print(
                            f"{n} worker(s), {len(symbols)} markets ({args.per_worker} each, {args.window_bars} bars),"
                            f" storm {storm}: {row['complete']}/{len(symbols)} updates ({row['bars']} bars);"
                            f" after the last close p50"
                            f" {row['close_p50_s']} s p99 {row['close_p99_s']} s max {row['close_max_s']} s;"
                            f" after the advance p99 {row['advance_p99_s']} s max {row['advance_max_s']} s"
                            f" (the simulator pushed the closes in {row['push_s']} s); all live {all_live:.1f} s",
                            flush=True,
                        )
                        results.append(row)
                        await asyncio.sleep(2)  # let the workers' evaluation of the closes settle
                finally:
                    await client.close()
                    await workers.close()
                    await db.close()
                    await sim.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-worker", type=int, default=1000, help="markets (symbols × 1m) per worker")
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 3])
    parser.add_argument("--window-bars", type=int, default=1000)
    parser.add_argument("--storms", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=20, help="REST weight budget as if on this many IPs")
    args = parser.parse_args()
    print_machine()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
