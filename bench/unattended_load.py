"""Armed unattended work at scale: 100,000 action alerts and 10,000 schedules.

    python -m bench.unattended_load

- Tick evaluation: an evaluator holding 100,000 armed price alerts that each carry a
  place_order action (4 symbols), beside a running APScheduler holding 10,000 schedule jobs on
  the same loop (as in the daemon); median / p99 cost of a tick that crosses nothing.  Target
  ≤ 10 µs median.
- Daemon start: the same 100,000 action alerts and 10,000 active schedules written into a data
  dir's database, then ``chartgen --serve --trade --sim`` started on it as its own process:
  seconds from spawn to ``/readyz`` ready, against the same start with an empty database (the
  difference is what loading them costs).  Target ≤ 3 s.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from alerts import ActionOutcomes, ActionRunner, Alert, AlertEvaluator, AlertStore, PushHub
from bench.alerts import NullMarket
from brokers import ACTIVE, ScheduleRow, ScheduleStore, parse_spec
from engine import Tick
from storage import Database

ALERTS = 100_000
SCHEDULES = 10_000
SYMBOLS = ("BTCUSDT", "ETHUSDT", "SOLUSDT", "BNBUSDT")
ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", ",".join(SYMBOLS), "-i", "1m"]


def _alerts(n: int, now: float) -> list[Alert]:
    rng = random.Random(13)
    out = []
    for i in range(n):
        above = i % 2 == 0
        out.append(
            Alert(
                id=str(uuid.UUID(int=rng.getrandbits(128))),
                principal=f"p{i % 100}",
                symbol=SYMBOLS[i % len(SYMBOLS)],
                interval="1m",
                kind="price_above" if above else "price_below",
                threshold=(1e7 + i) if above else (0.001 + i * 1e-9),
                created_at=now,
                action={"place_order": {"symbol": SYMBOLS[i % len(SYMBOLS)], "side": "buy", "quantity": "0.001"}},
            )
        )
    return out


def _schedules(n: int, now: float) -> list[ScheduleRow]:
    return [
        ScheduleRow(
            id=f"s-{i:012x}",
            owner=f"p{i % 100}",
            order_args={"symbol": "BTCUSDT", "side": "buy", "quantity": "0.001"},
            cron=None,
            every="7d",
            start_at=None,
            end_at=None,
            max_runs=None,
            runs_done=0,
            last_fire_at=None,
            status=ACTIVE,
            created_at=now,
            updated_at=now,
        )
        for i in range(n)
    ]


async def _fill(db_path: Path) -> None:
    from daemon import ALL_MIGRATIONS

    db = await Database.open(db_path)
    try:
        await db.migrate(ALL_MIGRATIONS)
        now = time.time()
        alerts = _alerts(ALERTS, now)
        store = AlertStore(db)
        for i in range(0, len(alerts), 10_000):
            await store.insert_many(alerts[i : i + 10_000])
        schedules = ScheduleStore(db)
        for row in _schedules(SCHEDULES, now):
            await schedules.insert(row)
    finally:
        await db.close()


class _NoExecutor:
    """Never called on quiet ticks; present so the evaluator runs with actions enabled."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a quiet tick called the executor ({name})")


async def bench_tick_with_armed_actions(ticks: int = 200_000) -> dict[str, float]:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        from daemon import ALL_MIGRATIONS

        await db.migrate(ALL_MIGRATIONS)
        hub = PushHub()
        runner = ActionRunner(_NoExecutor(), ActionOutcomes(db), hub)  # type: ignore[arg-type]
        evaluator = AlertEvaluator(AlertStore(db), NullMarket(), hub, actions=runner)
        evaluator.index_many(_alerts(ALERTS, now))
        scheduler = AsyncIOScheduler(timezone="UTC")
        scheduler.start()
        try:
            for row in _schedules(SCHEDULES, now):
                trigger = parse_spec(row.timing()).trigger(now)
                scheduler.add_job(_never, trigger, id=row.id, max_instances=1, coalesce=True)
            rng = random.Random(5)
            samples: list[int] = []
            on_tick = evaluator.on_tick
            for i in range(ticks):
                tick = Tick(SYMBOLS[i % 4], "1m", 100.0 + rng.random() * 1000, i, 0)
                t0 = time.perf_counter_ns()
                await on_tick(tick)
                samples.append(time.perf_counter_ns() - t0)
                if i % 10_000 == 0:
                    await asyncio.sleep(0)  # let the scheduler's loop callbacks run, as in the daemon
            jobs = len(scheduler.get_jobs())
        finally:
            scheduler.shutdown(wait=False)
            await db.close()
    samples.sort()
    return {
        "alerts": float(evaluator.active_count),
        "scheduler_jobs": float(jobs),
        "median_us": samples[len(samples) // 2] / 1000,
        "p99_us": samples[int(len(samples) * 0.99)] / 1000,
    }


async def _never() -> None:
    return None


async def _start_time(data_dir: Path) -> float:
    from testkit.daemon_proc import start_daemon

    t0 = time.perf_counter()
    daemon = await start_daemon(ARGS, data_dir=data_dir, timeout_s=120)
    try:
        await daemon.wait_ready(timeout_s=120)
        return time.perf_counter() - t0
    finally:
        await daemon.stop()


async def bench_start(runs: int = 3) -> dict[str, float]:
    empty: list[float] = []
    loaded: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            empty.append(await _start_time(Path(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            await _fill(Path(tmp) / "chartgen.db")
            loaded.append(await _start_time(Path(tmp)))
    return {
        "empty_s": statistics.median(empty),
        "loaded_s": statistics.median(loaded),
        "loading_cost_s": statistics.median(loaded) - statistics.median(empty),
        "loaded_max_s": max(loaded),
    }


def run() -> dict[str, Any]:
    return {
        "tick_with_armed_actions": asyncio.run(bench_tick_with_armed_actions()),
        "start_with_armed_actions": asyncio.run(bench_start()),
    }


def print_table(r: dict[str, Any]) -> None:
    t, s = r["tick_with_armed_actions"], r["start_with_armed_actions"]
    print(f"{'bench':70} {'value':>10}  target")
    print(f"{'tick, 100k action alerts + 10k scheduler jobs, median (us)':70} {t['median_us']:>10.2f}  <= 10")
    print(f"{'tick, same, p99 (us)':70} {t['p99_us']:>10.2f}")
    print(f"{'daemon start to ready, 100k action alerts + 10k schedules (s)':70} {s['loaded_s']:>10.2f}  <= 3")
    print(f"{'daemon start to ready, empty database (s)':70} {s['empty_s']:>10.2f}")
    print(f"{'loading cost (difference, s)':70} {s['loading_cost_s']:>10.2f}")


if __name__ == "__main__":
    print_table(run())
