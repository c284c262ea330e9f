"""Alert engine benchmarks: per-tick cost with 1M alerts, memory, mass firing, push latency, set_alert rate.

    python -m bench.alerts          # prints a table, returns the figures

- 1,000,000 touch price alerts over 1,000 symbols: median/p99 cost of a tick that fires
  nothing (target ≤ 10 µs median), and the RSS they add (target ≤ 600 MB; measured in a
  fresh subprocess).
- The same 1,000,000 alerts, also stored in a file-backed SQLite database (WAL), with ticks
  that cross: one alert per 1,000 ticks, and bursts where one tick in 1,000 crosses 100
  alerts at once.  A crossing tick's time includes the firing's commit (alert deleted,
  event, notification and push frame written in one transaction), as in the daemon.
- 10,000 alerts crossed by one tick: time until they are fired and committed (≤ 1 s).
- Tick → SSE frame on loopback at 1,000 ticks/s against the real daemon: p50/p99 (≤ 2/10 ms).
- ``set_alert`` over MCP HTTP with the official SDK client: calls per second (sequential; 8
  clients).  chartgen-style session-less JSON-RPC calls are measured by bench/set_alert_http.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from alerts import Alert, AlertEvaluator, AlertStore, PushHub, Subscription
from bench.alerts_push import bench_push_latency_and_set_alert, bench_tick_to_sse
from engine import Tick
from storage import Database
from testkit.null_market import NullMarket

SYMBOLS = 1000
ALERTS = 1_000_000


def _alerts(n: int, symbols: int, rng: random.Random, start: int = 0) -> list[Alert]:
    now = time.time()
    out = []
    for i in range(start, start + n):
        symbol = f"S{i % symbols:04d}USDT"
        above = i % 2 == 0
        level = 100.0 * (1.05 + rng.random()) if above else 100.0 * (0.95 - rng.random() * 0.5)
        out.append(
            Alert(
                id=str(uuid.UUID(int=rng.getrandbits(128))),
                principal="bench",
                symbol=symbol,
                interval="1m",
                kind="price_above" if above else "price_below",
                threshold=level,
                created_at=now,
            )
        )
    return out


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


async def bench_tick_cost(n: int = ALERTS, symbols: int = SYMBOLS, ticks: int = 200_000) -> dict[str, float]:
    """Per-tick evaluation with ``n`` alerts indexed, for ticks that cross nothing."""
    rng = random.Random(7)
    evaluator = AlertEvaluator(None, NullMarket(), PushHub())  # type: ignore[arg-type]
    rss0 = _rss_mb()
    for start in range(0, n, 10_000):  # as the service loads them: in batches from SQLite
        evaluator.index_many(_alerts(min(10_000, n - start), symbols, rng, start))
    rss1 = _rss_mb()
    names = [f"S{i:04d}USDT" for i in range(symbols)]
    samples = []
    on_tick = evaluator.on_tick
    for i in range(ticks):
        tick = Tick(names[i % symbols], "1m", 100.0 + rng.random(), i, 0)
        t0 = time.perf_counter_ns()
        await on_tick(tick)
        samples.append(time.perf_counter_ns() - t0)
    samples.sort()
    return {
        "median_us": samples[len(samples) // 2] / 1000,
        "p99_us": samples[int(len(samples) * 0.99)] / 1000,
        "rss_growth_mb": rss1 - rss0,
        "alerts": float(len(evaluator.touch)),
    }


def _designated(groups: int, per_group: int, symbols: int, now: float) -> tuple[list[Alert], list[Tick]]:
    """Alerts that crossing ticks will fire, and those ticks: group ``g`` is ``per_group`` price_below
    alerts on one symbol just under 100 (the quiet ticks trade at 100-101 and the random
    price_below levels are under 95), crossed together by one tick that reaches no other group."""
    alerts: list[Alert] = []
    ticks: list[Tick] = []
    for g in range(groups):
        symbol = f"S{g % symbols:04d}USDT"
        top = 99.9 - (g // symbols) * 0.001  # later groups of a symbol sit lower: each tick crosses one group
        for i in range(per_group):
            alerts.append(
                Alert(
                    id=f"x{g:06d}-{i:03d}",
                    principal=f"p{g % 10}",
                    symbol=symbol,
                    interval="1m",
                    kind="price_below",
                    threshold=top - i * 1e-7,
                    created_at=now,
                )
            )
        ticks.append(Tick(symbol, "1m", top - per_group * 1e-7 - 1e-8, g, 0))
    return alerts, ticks


async def bench_crossing(
    n: int = ALERTS, symbols: int = SYMBOLS, ticks: int = 200_000, every: int = 1000, burst: int = 1
) -> dict[str, float]:
    """Per-tick cost with ``n`` alerts, one tick in ``every`` crossing ``burst`` alerts (fired and committed).

    The alerts are in a file-backed SQLite database (WAL) as well as in the indexes, and the
    10 owners have push subscriptions, so a crossing tick pays what the daemon pays: the
    index take, the firing transaction (alert deleted, event, notification, push frame) and
    its commit.  Reports the quiet and the crossing ticks separately, and all ticks together.
    """
    from daemon import ALL_MIGRATIONS

    rng = random.Random(11)
    now = time.time()
    groups = ticks // every
    crossing_alerts, crossing_ticks = _designated(groups, burst, symbols, now)
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate(ALL_MIGRATIONS)
        store = AlertStore(db)
        evaluator = AlertEvaluator(store, NullMarket(), PushHub())
        for p in range(10):
            await store.subscribe(Subscription(principal=f"p{p}"), now)
        random_count = n - len(crossing_alerts)
        for start in range(0, random_count, 10_000):
            batch = _alerts(min(10_000, random_count - start), symbols, rng, start)
            await store.insert_many(batch)
            evaluator.index_many(batch)
        await store.insert_many(crossing_alerts)
        evaluator.index_many(crossing_alerts)
        names = [f"S{i:04d}USDT" for i in range(symbols)]
        quiet: list[int] = []
        crossing: list[int] = []
        fired = 0
        on_tick = evaluator.on_tick
        for i in range(ticks):
            if i % every == every - 1:
                tick = crossing_ticks[i // every]
                t0 = time.perf_counter_ns()
                result = await on_tick(tick)
                crossing.append(time.perf_counter_ns() - t0)
                fired += len(result)
            else:
                tick = Tick(names[i % symbols], "1m", 100.0 + rng.random(), i, 0)
                t0 = time.perf_counter_ns()
                await on_tick(tick)
                quiet.append(time.perf_counter_ns() - t0)
        await db.close()
    assert fired == groups * burst, (fired, groups, burst)
    every_tick = sorted(quiet + crossing)
    quiet.sort()
    crossing.sort()
    return {
        "alerts": float(n),
        "burst": float(burst),
        "every": float(every),
        "fired": float(fired),
        "quiet_median_us": quiet[len(quiet) // 2] / 1000,
        "quiet_p99_us": quiet[int(len(quiet) * 0.99)] / 1000,
        "crossing_ticks": float(len(crossing)),
        "crossing_median_us": crossing[len(crossing) // 2] / 1000,
        "crossing_p99_us": crossing[min(len(crossing) - 1, int(len(crossing) * 0.99))] / 1000,
        "crossing_max_us": crossing[-1] / 1000,
        "all_median_us": every_tick[len(every_tick) // 2] / 1000,
        "all_p99_us": every_tick[int(len(every_tick) * 0.99)] / 1000,
        "all_mean_us": sum(every_tick) / len(every_tick) / 1000,
    }


def bench_memory_subprocess() -> dict[str, float]:
    """bench_tick_cost in a fresh interpreter, so the RSS growth is the alerts' own."""
    code = (
        "import asyncio, json; from bench.alerts import bench_tick_cost; "
        "print(json.dumps(asyncio.run(bench_tick_cost(ticks=100_000))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def bench_mass_fire(n: int = 10_000) -> float:
    """Seconds from the tick that crosses ``n`` alerts to their committed firing (file-backed SQLite, WAL)."""
    from daemon import ALL_MIGRATIONS

    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate(ALL_MIGRATIONS)
        store = AlertStore(db)
        rng = random.Random(3)
        alerts = [
            Alert(
                id=str(uuid.UUID(int=rng.getrandbits(128))),
                principal=f"p{i % 10}",
                symbol="BTCUSDT",
                interval="1m",
                kind="price_above",
                threshold=1000.0 + i * 0.01,
                created_at=time.time(),
            )
            for i in range(n)
        ]
        await store.insert_many(alerts)
        evaluator = AlertEvaluator(store, NullMarket(), PushHub())
        evaluator.index_many(alerts)
        t0 = time.perf_counter()
        fired = await evaluator.on_tick(Tick("BTCUSDT", "1m", 5000.0, 0, 0))
        elapsed = time.perf_counter() - t0
        await db.close()
        assert len(fired) == n
        return elapsed


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    results["tick_1m_alerts"] = bench_memory_subprocess()
    results["tick_1m_alerts_crossing_1"] = asyncio.run(bench_crossing(burst=1))
    results["tick_1m_alerts_crossing_100"] = asyncio.run(bench_crossing(burst=100))
    results["fire_10000_s"] = asyncio.run(bench_mass_fire())
    results.update(asyncio.run(bench_tick_to_sse()))
    results.update(asyncio.run(bench_push_latency_and_set_alert(steps=600, rate=200.0)))
    return results


def print_table(r: dict[str, Any]) -> None:
    t = r["tick_1m_alerts"]
    rows = [
        ("tick eval, 1M alerts / 1000 symbols (median)", t["median_us"], "µs", 10),
        ("tick eval, 1M alerts (p99)", t["p99_us"], "µs", None),
        ("RSS growth for 1M alerts", t["rss_growth_mb"], "MB", 600),
    ]
    for key, label in (("tick_1m_alerts_crossing_1", "1 alert"), ("tick_1m_alerts_crossing_100", "100 alerts")):
        c = r[key]
        rows += [
            (f"1M alerts, 1 tick in 1000 crosses {label}: quiet (median)", c["quiet_median_us"], "µs", 10),
            ("  quiet ticks (p99)", c["quiet_p99_us"], "µs", None),
            ("  crossing ticks incl. commit (median)", c["crossing_median_us"], "µs", None),
            ("  crossing ticks incl. commit (p99)", c["crossing_p99_us"], "µs", None),
            ("  every tick (median)", c["all_median_us"], "µs", None),
            ("  every tick (mean)", c["all_mean_us"], "µs", None),
            ("  every tick (p99)", c["all_p99_us"], "µs", None),
        ]
    rows += [
        ("10,000 alerts crossed by one tick → committed", r["fire_10000_s"] * 1000, "ms", 1000),
        ("tick → SSE frame p50 @1000 ticks/s (engine bus)", r["tick_to_sse_p50_ms"], "ms", 2),
        ("tick → SSE frame p99 @1000 ticks/s (engine bus)", r["tick_to_sse_p99_ms"], "ms", 10),
        ("sim trade → SSE frame p50 @200/s (whole path)", r["sse_p50_ms"], "ms", None),
        ("sim trade → SSE frame p99 @200/s (whole path)", r["sse_p99_ms"], "ms", None),
    ]
    for name, value, unit, target in rows:
        ok = "" if target is None else ("yes" if value <= target else "NO")
        goal = "" if target is None else f"≤{target}{unit}"
        print(f"{name:<60} {value:>10.2f}{unit}  {goal:>9}  {ok}")
    for key in ("set_alert_sequential_per_s", "set_alert_8_clients_per_s"):  # chartgen's clients: bench.set_alert_http
        print(f"{key + ' (official SDK client)':<60} {r[key]:>10.0f}/s")


if __name__ == "__main__":
    out = run()
    print_table(out)
