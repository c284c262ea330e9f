"""What the halt flag's read costs order admission (brokers.halt.check_not_halted inside admit_in).

    python -m bench.halt_check

Admits N order intents through :func:`brokers.orders.admission.admit_in` in a
``run_transaction`` each (the guard's path, one database hop per order), on a WAL database file
in a temp dir, the daily limit off (its sum would dominate and grow with every order), with and without the halt check
(the check replaced by a no-op for the baseline), both ``durable=False`` (CPU + SQLite only)
and ``durable=True`` (the real path: fsync per commit).  Runs alternate so disk noise hits both.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from brokers import HALT_MIGRATIONS, ORDER_MIGRATIONS, OrderRequest, admit_in, check_not_halted
from storage import Database

N = 1000
ROUNDS = 3
admission = sys.modules[admit_in.__module__]
"""The module whose ``check_not_halted`` the bench switches off and on (the one thing it measures)."""


async def _admit(db: Database, prefix: str, n: int, *, durable: bool) -> list[float]:
    out = []
    for i in range(n):
        req = OrderRequest("BTCUSDT", "BUY", "LIMIT", f"{prefix}-{i}", quantity=Decimal("0.001"), price=Decimal(60000))
        now = time.time()
        started = time.perf_counter()
        await db.run_transaction(
            lambda conn, req=req, now=now: admission.admit_in(
                conn, "bench", req, Decimal(60), now, daily_limit=None, since=now - 86400
            ),
            durable=durable,
        )
        out.append((time.perf_counter() - started) * 1e6)
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate([ORDER_MIGRATIONS, HALT_MIGRATIONS])
        await _admit(db, "warm", 500, durable=False)
        for durable, n in ((False, N), (True, N // 4)):
            timings: dict[str, list[float]] = {"with check": [], "without": []}
            for r in range(ROUNDS):
                admission.check_not_halted = check_not_halted  # type: ignore[attr-defined]
                timings["with check"] += await _admit(db, f"on{durable}{r}", n, durable=durable)
                admission.check_not_halted = lambda conn: None  # type: ignore[attr-defined]
                timings["without"] += await _admit(db, f"off{durable}{r}", n, durable=durable)
            admission.check_not_halted = check_not_halted  # type: ignore[attr-defined]
            for name, xs in timings.items():
                xs.sort()
                print(
                    f"durable={durable!s:<5} {name:<10} n={len(xs):>5} mean {statistics.fmean(xs):7.1f} µs"
                    f"  p50 {xs[len(xs) // 2]:7.1f} µs  p99 {xs[int(len(xs) * 0.99)]:7.1f} µs"
                )
        raw = []
        conn_fn = check_not_halted
        for _ in range(5):
            started = time.perf_counter()
            await db.run_transaction(lambda conn: [conn_fn(conn) for _ in range(10000)])
            raw.append((time.perf_counter() - started) / 10000 * 1e6)
        print(f"the check alone (SELECT halted FROM trading_halt, in a transaction): {min(raw):.2f} µs per order")
        await db.close()


if __name__ == "__main__":
    asyncio.run(main())
