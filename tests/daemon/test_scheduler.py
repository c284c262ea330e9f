"""The daemon's one APScheduler: periodic jobs run on the loop (a failing run is logged and the
schedule goes on), user schedules fire through it, /status lists every periodic job, and a
scheduled order survives a daemon restart under the misfire policy."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from brokers import client_id
from daemon.scheduler import DaemonScheduler
from testkit.daemon_proc import DaemonProc, mcp_client, running_daemon
from tests.brokers.test_schedules import BUY, rig_on

DAEMON_JOBS = {"order-reconcile", "binance-time-sync", "alert-expiry", "push-queue-ttl"}


async def test_periodic_jobs_run_on_the_loop_and_a_failing_run_does_not_stop_the_schedule() -> None:
    scheduler = DaemonScheduler()
    assert isinstance(scheduler._aps, AsyncIOScheduler)
    runs: list[int] = []
    enough = asyncio.Event()

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) in (1, 2):
            raise RuntimeError(f"boom {len(runs)}")
        if len(runs) >= 4:
            enough.set()

    scheduler.every("flaky", 0.02, flaky)
    assert scheduler.status()["jobs"][0]["name"] == "flaky"  # listed before the start too
    async with scheduler.running():
        async with asyncio.timeout(10):
            await enough.wait()
        [job] = scheduler.status()["jobs"]
        assert job["name"] == "flaky" and job["trigger"].startswith("interval[")
        assert job["next_run_time"].endswith("Z") and datetime.fromisoformat(job["next_run_time"])
        assert job["failures"] == 2 and job["runs"] >= 4 and job["last_outcome"] == "ok"
    assert not scheduler.started


async def test_one_run_at_a_time_and_stopping_cancels_a_run_in_progress(caplog: pytest.LogCaptureFixture) -> None:
    """...and the run cancelled by the stop is recorded as such, not reported by APScheduler as a failure."""
    caplog.set_level(logging.ERROR, logger="apscheduler")
    scheduler = DaemonScheduler()
    started = asyncio.Event()
    cancelled = asyncio.Event()
    active = 0
    most = 0

    async def slow() -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        started.set()
        try:
            await asyncio.Event().wait()  # never finishes on its own
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            active -= 1

    scheduler.every("slow", 0.01, slow)
    async with scheduler.running():
        async with asyncio.timeout(10):
            await started.wait()
    assert cancelled.is_set() and most == 1
    assert scheduler._records["slow"].last_outcome == "cancelled"
    assert [r.getMessage() for r in caplog.records if r.name.startswith("apscheduler")] == []


async def test_a_job_run_soon_runs_now_and_once_more_when_asked_during_a_run() -> None:
    """run_soon runs an hourly job at once; asked twice while that run is in progress, the job runs
    exactly once more after it (not skipped as APScheduler skips a due run while one is in
    progress, and not twice); the hourly schedule itself never fired."""
    scheduler = DaemonScheduler()
    runs: list[int] = []
    ran = asyncio.Queue[int]()
    release = asyncio.Event()

    async def hourly() -> None:
        runs.append(len(runs))
        ran.put_nowait(len(runs))
        if len(runs) == 1:
            await release.wait()

    scheduler.every("hourly", 3600.0, hourly)
    async with scheduler.running():
        scheduler.run_soon("hourly")
        async with asyncio.timeout(10):
            assert await ran.get() == 1
            scheduler.run_soon("hourly")
            scheduler.run_soon("hourly")  # both during the first run: one more run covers them
            release.set()
            assert await ran.get() == 2
        [job] = scheduler.status()["jobs"]
        assert (job["runs"], job["requested"]) == (2, 3)
        next_run = datetime.fromisoformat(job["next_run_time"])
        assert next_run.timestamp() > time.time() + 3000  # the schedule moved on an interval from the run
        scheduler.run_soon("hourly")
        async with asyncio.timeout(10):
            assert await ran.get() == 3
    assert runs == [0, 1, 2]


async def test_a_user_schedule_fires_through_the_apscheduler(tmp_path: Path) -> None:
    rig = await rig_on(tmp_path / "s.db", time.time)  # type: ignore[arg-type]  # real time, as APScheduler's
    scheduler = DaemonScheduler()
    rig.schedules.jobs = scheduler
    done = asyncio.Event()
    audit = rig.audit

    async def write(lines: Any) -> None:
        await audit(lines)
        if any(" SCHEDULE-FINISHED " in line for line in lines):
            done.set()

    rig.schedules._audit = write
    async with scheduler.running():
        made = await rig.schedules.create("alice", {**BUY, "every": "1s", "max_runs": 2})
        assert scheduler.status()["schedules"][0]["name"] == f"schedule:{made['schedule_id']}"
        async with asyncio.timeout(15):
            await done.wait()
        assert scheduler.status()["schedules"] == []
    placed = await rig.placed()
    assert len(placed) == 2 and all(p.startswith("cg-" + made["schedule_id"] + "-") for p in placed)
    await rig.db.close()


# --- through the daemon -------------------------------------------------------------------
ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]


async def _status(daemon: DaemonProc) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{daemon.base}/status", headers={"Authorization": f"Bearer {daemon.token}"}) as r:
            assert r.status == 200
            return dict(await r.json())


async def _tool(daemon: DaemonProc, name: str, args: dict[str, Any]) -> Any:
    async with mcp_client(daemon.mcp_url, daemon.token) as client:
        result = await client.call_tool(name, args)
        assert not result.is_error, result.content[0].text
        return json.loads(result.content[0].text)


async def _until(done: Any, timeout_s: float = 30.0) -> None:
    """Wait for another process's effect (a row, a trades.log line), polling within a bound."""
    async with asyncio.timeout(timeout_s):
        while True:
            if done():
                return
            await asyncio.sleep(0.05)  # the daemon is another process: polled, bounded by the timeout


def _orders(db: Path, schedule_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT client_order_id FROM orders WHERE client_order_id LIKE ?", (f"cg-{schedule_id}-%",))
        return sorted(r[0] for r in rows)


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_status_lists_every_periodic_job_and_schedules_follow_the_misfire_policy_across_restarts(
    tmp_path: Path,
) -> None:
    env = {"CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000", "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000"}
    db = tmp_path / "chartgen.db"
    async with running_daemon(ARGS, data_dir=tmp_path, env=env) as daemon:
        status = await _status(daemon)
        jobs = {j["name"]: j for j in status["scheduler"]["jobs"]}
        assert DAEMON_JOBS <= set(jobs), jobs
        assert all(j["next_run_time"] and j["next_run_time"].endswith("Z") for j in jobs.values())
        made = await _tool(daemon, "schedule_order", {**BUY, "every": "1h"})
        sid = made["schedule_id"]
        assert [s["name"] for s in (await _status(daemon))["scheduler"]["schedules"]] == [f"schedule:{sid}"]
    # down across three scheduled times; the last was a minute ago (within the 300 s grace)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schedules SET created_at = created_at - 3 * 3600 - 60 WHERE id = ?", (sid,))
        created = conn.execute("SELECT created_at FROM schedules WHERE id = ?", (sid,)).fetchone()[0]
    last_due = datetime.fromtimestamp(int(created) + 3 * 3600, UTC)
    async with running_daemon(ARGS, data_dir=tmp_path, env=env) as daemon:
        await _until(lambda: bool(_orders(db, sid)))  # the catch-up run at start
        [listed] = await _tool(daemon, "list_schedules", {})
        assert listed["runs_done"] == 1 and listed["status"] == "active"
    assert _orders(db, sid) == [client_id(sid, last_due)]  # one order, for the last missed time
    trades = (tmp_path / "trades.log").read_text()
    assert f"SCHEDULE-COALESCED id={sid}" in trades and f"SCHEDULE-RUN id={sid}" in trades
    # down again, this time past the grace of every missed time: skipped, logged, no order
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE schedules SET created_at = created_at - 3 * 3600 - 600,"
            " last_fire_at = last_fire_at - 3 * 3600 - 600 WHERE id = ?",
            (sid,),
        )
    async with running_daemon(ARGS, data_dir=tmp_path, env=env) as daemon:
        await _until(lambda: f"SCHEDULE-SKIPPED id={sid}" in (tmp_path / "trades.log").read_text())
        assert (await _tool(daemon, "cancel_schedule", {"schedule_id": sid}))["ok"] is True
    assert len(_orders(db, sid)) == 1
