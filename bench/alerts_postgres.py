"""Alert firing on PostgreSQL: fired and committed alerts per second across worker processes.

    python -m bench.alerts_postgres [--alerts N] [--workers 1,2,3] [--batch 1,10,100]

Starts Debian's PostgreSQL on loopback (testkit/postgres.py: a private cluster in a temp
directory, ``fsync=on`` and ``synchronous_commit=on`` — every commit on disk before it returns).
For each (workers, batch) case a fresh database is migrated and ``N`` armed price alerts are
inserted for 50 owners (half of them subscribed to push, so half the firings also queue an SSE
frame); then ``workers`` separate processes (multiprocessing, spawn) each fire their own share —
as cluster workers fire the alerts of the markets they own — through
:meth:`alerts.pg_store.PgAlertStore.fire`, ``batch`` alerts per firing transaction (the alerts
one tick crosses).  Reported: alerts fired and committed per second (all of them, over the
wall time from the common start to the last commit), the p50/p99 of one firing transaction,
and a check that every alert fired exactly once.

``--overlap`` instead has every worker try every alert (each in its own order): the
contention case, where exactly-once is decided by the row locks.

The server, the workers and the benchmark share the machine's cores; the machine is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import time
import uuid
from typing import Any

from alerts import PG_MIGRATIONS, Alert, Firing, PgAlertStore, QueueLimits, Subscription
from bench.agent_common import pct, print_machine
from storage import PostgresDatabase

OWNERS = 50
LIMITS = QueueLimits(push_cap=1_000_000, push_ttl_s=3600.0, poll_cap=1_000_000)


def _alerts(n: int) -> list[Alert]:
    now = time.time()
    return [
        Alert(
            id=str(uuid.uuid4()),
            principal=f"owner{i % OWNERS}",
            symbol=f"SYM{i % 600}USDT",
            interval="1m",
            kind="price_above",
            threshold=100.0 + i % 97,
            created_at=now,
        )
        for i in range(n)
    ]


async def _worker(dsn: str, ids: list[str], batch: int, start_at: float) -> tuple[int, list[float], float]:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    store = PgAlertStore(db, LIMITS)
    try:
        await db.fetchval("SELECT 1")  # connected before the common start
        await asyncio.sleep(max(0.0, start_at - time.time()))  # the common start (a benchmark barrier, not sync)
        fired = 0
        took: list[float] = []
        for i in range(0, len(ids), batch):
            firings = [
                Firing(alert_id=a, value=1.0, triggered_at=time.time(), bar_time=None) for a in ids[i : i + batch]
            ]
            t0 = time.perf_counter()
            fired += len(await store.fire(firings))
            took.append(time.perf_counter() - t0)
        return fired, took, time.time()
    finally:
        await db.close()


def _worker_main(args: tuple[str, list[str], int, float], out: Any) -> None:
    out.put(asyncio.run(_worker(*args)))


async def _prepare(dsn: str, alerts: list[Alert]) -> None:
    db = await PostgresDatabase.open(dsn)
    try:
        await db.migrate([PG_MIGRATIONS])
        store = PgAlertStore(db, LIMITS)
        for i in range(0, OWNERS, 2):
            await store.subscribe(Subscription(principal=f"owner{i}"), time.time())
        await store.insert_many(alerts)
    finally:
        await db.close()


async def _count(dsn: str) -> tuple[int, int, int]:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    try:
        events = await db.fetchval("SELECT COUNT(*) FROM alert_events WHERE outcome = 'fired'")
        frames = await db.fetchval("SELECT COUNT(*) FROM push_queue")
        armed = await db.fetchval("SELECT COUNT(*) FROM alerts")
        return int(events), int(frames), int(armed)
    finally:
        await db.close()


def run_case(server: Any, n: int, workers: int, batch: int, overlap: bool) -> dict[str, Any]:
    dsn = asyncio.run(server.new_database())
    alerts = _alerts(n)
    asyncio.run(_prepare(dsn, alerts))
    ids = [a.id for a in alerts]
    rng = random.Random(7)
    shares = (
        [rng.sample(ids, len(ids)) for _ in range(workers)] if overlap else [ids[w::workers] for w in range(workers)]
    )
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2.0 + 0.5 * workers  # after every process imported and connected
    procs = [ctx.Process(target=_worker_main, args=((dsn, share, batch, start_at), out)) for share in shares]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    fired = sum(r[0] for r in results)
    took = sorted(t for r in results for t in r[1])
    wall = max(r[2] for r in results) - start_at
    events, frames, armed = asyncio.run(_count(dsn))
    return {
        "workers": workers,
        "batch": batch,
        "overlap": overlap,
        "alerts": n,
        "fired_per_s": fired / wall,
        "txn_p50_ms": statistics.median(took) * 1000,
        "txn_p99_ms": pct(took, 0.99) * 1000,
        "exactly_once": fired == n == events and armed == 0,
        "push_frames": frames,
    }


def run(n: int, workers: list[int], batches: list[int], overlap: bool) -> list[dict[str, Any]]:
    from testkit.postgres import postgres_server

    rows = []
    with postgres_server() as server:
        for batch in batches:
            for w in workers:
                rows.append(run_case(server, n, w, batch, overlap))
                print_row(rows[-1])
    return rows


def print_row(r: dict[str, Any]) -> None:
    print(
        f"workers {r['workers']}  batch {r['batch']:>4}  {'overlap' if r['overlap'] else 'own share'}:"
        f"  {r['fired_per_s']:>8,.0f} fired/s   txn p50 {r['txn_p50_ms']:.2f} ms  p99 {r['txn_p99_ms']:.2f} ms"
        f"   exactly once: {r['exactly_once']}  ({r['alerts']:,} alerts, {r['push_frames']:,} push frames)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--batch", default="1,10,100")
    parser.add_argument("--overlap", action="store_true")
    args = parser.parse_args()
    print_machine()
    run(args.alerts, [int(x) for x in args.workers.split(",")], [int(x) for x in args.batch.split(",")], args.overlap)


if __name__ == "__main__":
    main()
