"""The daemon's one scheduler: an APScheduler 3.11 ``AsyncIOScheduler`` on the daemon's loop.

It runs every periodic job of the daemon — order reconciliation, Binance clock resync, alert
expiry, push-queue TTL sweep, ccxt stream rotation — and every user schedule
(:mod:`brokers.schedules`).  Jobs run with ``max_instances=1`` and ``coalesce=True``; a failing
run is logged at warning (``periodic_job_failed``, with its traceback) and the schedule continues;
a run is not logged (APScheduler's "Running job" / "executed successfully" are debug lines:
daemon/logging.py), /status shows each job's last run.  The in-memory job store
is rebuilt at every start: the daemon's periodic jobs are added by the runtimes that own
them, user schedules from their table (design.md §8: no SQLAlchemyJobStore).

:meth:`DaemonScheduler.status` is the one list of every periodic job (GET /status): name,
trigger, next run time (UTC ISO) and the last run's outcome.

A daemon job can also be run now, off its schedule (:meth:`DaemonScheduler.run_soon`: a worker's
heartbeat when a command says its markets changed).

Jobs may be added before :meth:`DaemonScheduler.running` starts the scheduler (they wait for
it); leaving it shuts the scheduler down and cancels runs in progress, so enter it after the
services its jobs use and it stops before them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[Any]]
SCHEDULE_PREFIX = "schedule:"


@dataclass(slots=True)
class JobRecord:
    """What /status shows about one job besides APScheduler's own view."""

    kind: str
    """``daemon`` (a periodic job of the daemon) or ``schedule`` (a user's scheduled order)."""
    runs: int = 0
    failures: int = 0
    last_run_at: float | None = None
    last_outcome: str | None = None
    """``ok``, or ``failed: <error>``."""
    requested: int = 0
    """Runs asked for off the schedule (:meth:`DaemonScheduler.run_soon`)."""
    running: bool = False
    again: bool = False
    """A run was asked for while one was in progress: run once more right after it."""


def _iso(dt: datetime | float | None) -> str | None:
    if dt is None:
        return None
    at = datetime.fromtimestamp(dt, UTC) if isinstance(dt, (int, float)) else dt.astimezone(UTC)
    return at.isoformat().replace("+00:00", "Z")


class DaemonScheduler:
    """The AsyncIOScheduler and the record of each job's last run."""

    def __init__(self) -> None:
        self._aps = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None},
        )
        self._records: dict[str, JobRecord] = {}
        self._running_tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        # a run asked for during a run starts once APScheduler counts that run finished (it counts
        # before it sends these events; asked for earlier, the run would be skipped)
        self._aps.add_listener(self._job_done, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)

    # --- jobs -----------------------------------------------------------------------------
    def every(self, name: str, interval_s: float, job: Job) -> None:
        """A daemon job every ``interval_s`` seconds (first run one interval after it is added)."""
        self._add(name, IntervalTrigger(seconds=interval_s, timezone=UTC), job, kind="daemon")

    def add_schedule_job(self, job_id: str, trigger: BaseTrigger, func: Job, *, catch_up: bool) -> None:
        """A user schedule's job (:class:`brokers.schedules.service.JobHost`); ``catch_up`` also fires
        it once now, so the misfire policy can deal with times missed while the daemon was down."""
        self._add(job_id, trigger, func, kind="schedule")
        if catch_up:
            self._aps.add_job(
                self._wrap(job_id, func),
                trigger="date",
                run_date=datetime.now(UTC),
                id=f"{job_id}:catch-up",
                name=f"{job_id}:catch-up",
                replace_existing=True,
            )

    def remove_job(self, job_id: str) -> None:
        for jid in (job_id, f"{job_id}:catch-up"):
            with contextlib.suppress(JobLookupError):
                self._aps.remove_job(jid)
        self._records.pop(job_id, None)

    def run_soon(self, name: str) -> None:
        """Run daemon job ``name`` now, off its schedule (its next scheduled run then comes one interval
        later).  Asked while a run is in progress, it runs once more right after that run: APScheduler
        skips a run due while one is in progress (``max_instances=1``), and the run in progress may
        have read its inputs before the change that asked for this one."""
        record = self._records.get(name)
        if record is None:
            log.warning("run_soon_unknown_job", job=name)
            return
        record.requested += 1
        if self._closing:
            return
        if record.running:
            record.again = True
        else:
            self._run_now(name)

    def _job_done(self, event: JobExecutionEvent) -> None:
        record = self._records.get(event.job_id)
        if record is not None and record.again and not self._closing:
            record.again = False
            self._run_now(event.job_id)

    def _run_now(self, name: str) -> None:
        with contextlib.suppress(JobLookupError):  # removed meanwhile
            self._aps.modify_job(name, next_run_time=datetime.now(UTC))

    def _add(self, name: str, trigger: BaseTrigger, job: Job, *, kind: str) -> None:
        self._records[name] = JobRecord(kind)
        self._aps.add_job(self._wrap(name, job), trigger=trigger, id=name, name=name, replace_existing=True)

    def _wrap(self, name: str, job: Job) -> Job:
        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running_tasks.add(task)
            record = self._records.get(name) or JobRecord("daemon")
            record.last_run_at, record.runs = time.time(), record.runs + 1
            record.running, record.again = True, False
            try:
                await job()
                record.last_outcome = "ok"
            except asyncio.CancelledError:
                record.last_outcome = "cancelled"
                if not self._closing:
                    raise
                # Cancelled by close(): the run ends here. Raised on, APScheduler's executor would
                # log it as 'Job "…" raised an exception' with a traceback at every shutdown.
                log.info("periodic_job_cancelled", job=name)
            except Exception as exc:
                record.failures += 1
                record.last_outcome = f"failed: {type(exc).__name__}: {exc}"[:300]
                log.warning("periodic_job_failed", job=name, exc_info=True)
            finally:
                record.running = False
                if task is not None:
                    self._running_tasks.discard(task)

        return run

    # --- lifetime -------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[DaemonScheduler]:
        """Started on the running loop; on exit shut down and runs in progress cancelled and awaited."""
        self._aps.start()
        log.info("scheduler_started", jobs=len(self._aps.get_jobs()))
        try:
            yield self
        finally:
            await self.close()

    async def close(self) -> None:
        self._closing = True
        if self._aps.running:
            self._aps.shutdown(wait=False)
            # AsyncIOScheduler.shutdown is deferred with call_soon_threadsafe: wait until it has run
            done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(done.set_result, None)
            await done
        for task in list(self._running_tasks):
            task.cancel()
        for task in list(self._running_tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running_tasks.clear()

    @property
    def started(self) -> bool:
        return bool(self._aps.running)

    # --- status ---------------------------------------------------------------------------
    def next_run_time(self, job_id: str) -> datetime | None:
        job = self._aps.get_job(job_id)
        return None if job is None else self._next(job)

    @staticmethod
    def _next(job: Any) -> datetime | None:
        """The job's next run; for a job added before the start (pending), its trigger's first time."""
        if hasattr(job, "next_run_time"):
            return job.next_run_time
        return job.trigger.get_next_fire_time(None, datetime.now(UTC))

    def status(self) -> dict[str, Any]:
        """Every periodic job of the daemon, and the user schedules (by id), for GET /status."""
        jobs: list[dict[str, Any]] = []
        schedules: list[dict[str, Any]] = []
        for job in self._aps.get_jobs():
            record = self._records.get(job.id)
            entry = {
                "name": job.id,
                "trigger": str(job.trigger),
                "next_run_time": _iso(self._next(job)),
                "last_run_at": None if record is None else _iso(record.last_run_at),
                "last_outcome": None if record is None else record.last_outcome,
                "runs": 0 if record is None else record.runs,
                "failures": 0 if record is None else record.failures,
                "requested": 0 if record is None else record.requested,
            }
            (schedules if job.id.startswith(SCHEDULE_PREFIX) else jobs).append(entry)
        return {"running": self.started, "jobs": jobs, "schedules": schedules}
