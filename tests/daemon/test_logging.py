"""The daemon's log format: JSON lines, and tracebacks that carry no local variables (they
hold signed queries, API keys and tokens — found by the suite's log scan); the scheduler's
routine lines at debug and its failures at warning; and a clean stop that logs no error."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog

from daemon.logging import configure_logging
from daemon.scheduler import DaemonScheduler
from testkit.daemon_proc import LogTail, start_daemon


def test_json_tracebacks_carry_no_local_variables() -> None:
    out = io.StringIO()
    try:
        configure_logging("info", "json", stream=out)
        log = structlog.get_logger("test")

        def send(api_key: str) -> None:
            params = {"apiKey": api_key, "signature": "f" * 64}
            raise RuntimeError(f"request failed ({len(params)} params)")

        try:
            send("a-secret-api-key-value")
        except RuntimeError:
            log.exception("request_failed")
        line = json.loads(out.getvalue().strip().splitlines()[-1])
        assert line["event"] == "request_failed" and line["level"] == "error"
        frames = line["exception"][0]["frames"]
        assert frames and all("locals" not in f or not f["locals"] for f in frames)
        assert "a-secret-api-key-value" not in out.getvalue()
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()


async def _scheduler_lines(level: str) -> list[dict[str, Any]]:
    """The log of a scheduler whose job succeeds twice and fails once, configured at ``level``."""
    out = io.StringIO()
    configure_logging(level, "json", stream=out)
    try:
        scheduler = DaemonScheduler()
        runs = 0
        done = asyncio.Event()

        async def job() -> None:
            nonlocal runs
            runs += 1
            if runs == 3:
                done.set()
            if runs == 2:
                raise RuntimeError("the exchange did not answer")

        scheduler.every("reconcile", 0.01, job)
        async with scheduler.running():
            async with asyncio.timeout(10):
                await done.wait()
        return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()


async def test_the_scheduler_logs_runs_at_debug_and_a_failure_at_warning() -> None:
    lines = await _scheduler_lines("info")
    events = [line["event"] for line in lines]
    assert not [e for e in events if "Running job" in e or "executed successfully" in e or "Added job" in e]
    assert not [line for line in lines if line["level"] in ("error", "critical")]
    [failed] = [line for line in lines if line["event"] == "periodic_job_failed"]
    assert failed["level"] == "warning" and failed["job"] == "reconcile"
    assert "the exchange did not answer" in json.dumps(failed["exception"])
    assert "scheduler_started" in events
    # at debug the routine lines are there, as debug lines
    routine = [line for line in await _scheduler_lines("debug") if "executed successfully" in line["event"]]
    assert routine and {line["level"] for line in routine} == {"debug"}


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_a_clean_stop_logs_no_error(tmp_path: Path) -> None:
    """SIGTERM to a trading daemon on the simulator (with its Binance user-data stream): no error-level
    line — the stream's end at shutdown used to be logged as ``task_crashed UserStreamEnded``."""
    daemon = await start_daemon(
        ["--serve", "--trade", "--sim", "-s", "BTCUSDT", "-i", "1m"], data_dir=tmp_path, stderr_pipe=True
    )
    assert daemon.proc.stderr is not None
    tail = LogTail(daemon.proc.stderr)
    try:
        await daemon.wait_ready()
        await tail.wait_for("user_stream_subscribed", timeout_s=60)
    finally:
        assert await daemon.stop() == 0
    await tail.wait_for("engine_stopped", timeout_s=30)
    async with asyncio.timeout(30):
        await tail._task  # the whole log, up to the process's exit
    errors = [e for e in tail.events if e.get("level") in ("error", "critical") or e.get("event") == "task_crashed"]
    assert errors == []
