"""SQLite durability cost: a small transaction committed under ``synchronous=NORMAL`` vs ``FULL`` (WAL).

    python -m bench.sqlite_durability [--dir DIR] [--n N]

What the documented durability sentence rests on.  The database is created in a temporary
directory under ``--dir`` (default: the system temp dir; pass the data dir's file system to
measure that disk) with the daemon's own settings (:meth:`storage.sqlite.Database.open`:
WAL, busy timeout, NORMAL).  Each case commits ``N`` small transactions one after another —
an INSERT of a ~200-byte row plus a counter UPDATE, the shape of an order intent or a
one-alert firing — and reports commits/s and the p50/p99 latency of one commit:

- ``transaction``: :meth:`Database.transaction` (one thread hop per statement), the order
  intent's path, with ``durable`` False (NORMAL) and True (FULL);
- ``run_transaction``: :meth:`Database.run_transaction` (one hop), the alert firing's path,
  NORMAL and FULL;
- ``sqlite3``: the same transaction on a bare ``sqlite3`` connection on this thread, NORMAL
  and FULL — the disk's fsync cost without aiosqlite's hand-off.

Single process, nothing else writing; the machine is named in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from storage import Database

ROW = "x" * 200
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bench_rows (id INTEGER PRIMARY KEY, payload TEXT NOT NULL, at REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS bench_counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO bench_counter VALUES ('n', 0);"
)


def _stats(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    total = sum(ordered)
    return {
        "commits_per_s": len(ordered) / total if total > 0 else 0.0,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


def _sync_write(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO bench_rows (payload, at) VALUES (?, ?)", (ROW, time.time()))
    conn.execute("UPDATE bench_counter SET value = value + 1 WHERE name = 'n'")


async def _timed(n: int, one: Callable[[], Awaitable[None]]) -> dict[str, float]:
    for _ in range(min(50, n)):  # warm-up: page cache, WAL growth
        await one()
    samples: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        await one()
        samples.append(time.perf_counter() - t0)
    return _stats(samples)


async def _database_cases(path: Path, n: int) -> dict[str, dict[str, float]]:
    db = await Database.open(path)
    try:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                await db.execute(statement)
        out: dict[str, dict[str, float]] = {}
        for durable in (False, True):
            mode = "full" if durable else "normal"

            async def via_transaction(durable: bool = durable) -> None:
                async with db.transaction(durable=durable) as tx:
                    await tx.execute("INSERT INTO bench_rows (payload, at) VALUES (?, ?)", (ROW, time.time()))
                    await tx.execute("UPDATE bench_counter SET value = value + 1 WHERE name = 'n'")

            async def via_run_transaction(durable: bool = durable) -> None:
                await db.run_transaction(_sync_write, durable=durable)

            out[f"transaction_{mode}"] = await _timed(n, via_transaction)
            out[f"run_transaction_{mode}"] = await _timed(n, via_run_transaction)
        assert await db.synchronous() == 1  # every durable transaction restored NORMAL
        return out
    finally:
        await db.close()


def _bare_sqlite_cases(path: Path, n: int) -> dict[str, dict[str, float]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(SCHEMA)
        out: dict[str, dict[str, float]] = {}
        for mode in ("normal", "full"):
            conn.execute(f"PRAGMA synchronous = {mode.upper()}")
            samples: list[float] = []
            for i in range(n + min(50, n)):
                t0 = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                _sync_write(conn)
                conn.execute("COMMIT")
                if i >= min(50, n):
                    samples.append(time.perf_counter() - t0)
            out[f"sqlite3_{mode}"] = _stats(samples)
        return out
    finally:
        conn.close()


def _filesystem(directory: Path) -> str:
    """The mount (device, type) holding ``directory``, from /proc/mounts."""
    best, found = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if str(directory.resolve()).startswith(mount) and len(mount) > len(best):
                best, found = mount, f"{device} ({fstype}) on {mount}"
    except OSError:
        pass
    return found


def run(directory: Path | None = None, n: int = 1000) -> dict[str, Any]:
    """Every case; returns {"filesystem", "n", case: {commits_per_s, p50_ms, p99_ms}}."""
    with tempfile.TemporaryDirectory(prefix="chartgen-durability-", dir=directory) as tmp:
        results: dict[str, Any] = {"filesystem": _filesystem(Path(tmp)), "n": n}
        results.update(asyncio.run(_database_cases(Path(tmp) / "async.db", n)))
        results.update(_bare_sqlite_cases(Path(tmp) / "bare.db", n))
    return results


def print_table(results: dict[str, Any]) -> None:
    print(f"SQLite WAL, {results['n']} sequential small commits per case, on {results['filesystem']}")
    print(f"{'case':<26} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for case in (
        "transaction_normal",
        "transaction_full",
        "run_transaction_normal",
        "run_transaction_full",
        "sqlite3_normal",
        "sqlite3_full",
    ):
        r = results[case]
        print(f"{case:<26} {r['commits_per_s']:>10,.0f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f}")
    for path in ("transaction", "run_transaction", "sqlite3"):
        extra = results[f"{path}_full"]["p50_ms"] - results[f"{path}_normal"]["p50_ms"]
        print(f"FULL adds {extra:.3f} ms per commit at p50 on the {path} path")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_durability", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="directory on the disk to measure (default: the temp dir)")
    parser.add_argument("--n", type=int, default=1000, help="commits per case (default 1000)")
    ns = parser.parse_args()
    if ns.dir is not None:
        os.makedirs(ns.dir, exist_ok=True)
    from bench.__main__ import machine

    print(f"machine: {machine()}")
    print_table(run(ns.dir, ns.n))


if __name__ == "__main__":
    main()
