"""Scheduled orders: create, list, cancel, and the run of each scheduled time — one order per run.

The ``schedules`` table (:mod:`brokers.schedules.store`) is the truth; the daemon's one
APScheduler (``daemon/scheduler.py``, behind :class:`JobHost`) only says *when*: each active
schedule is a job there, re-added from the table at every start.  Where a run's order goes is a
:class:`ScheduleRuns`: on a single node :class:`~brokers.schedules.order_runs.OrderServiceRuns`
(described below); on a cluster the order leader's intents (cluster/schedule_runs.py, with the
table in PostgreSQL: brokers/schedules/pg_store.py).

**One order per scheduled time.**  A run for scheduled time T places one order whose client
order id is ``cg-<schedule id>-<T as epoch seconds>`` (:func:`client_id`), deterministic and at
most 36 characters of ``[A-Za-z0-9._:/-]``; the ``cg-`` prefix marks it as an unattended intent, which
reconciliation sends (once) if a crash left it recorded but unsent.  The run goes through the order guard
(``OrderGuard.admit``: allow-list, symbol, filters, price, per-order and daily limits, the
halt switch), which records the intent; then the schedule's progress (runs done, last
scheduled time completed) is committed durably; then the order is sent once
(``OrderService.send_recorded``).  A crash after the intent is recorded is never a second
order: a restart that meets T again finds the client id already used and only records the
progress, and an intent that was never sent is found unsent by reconciliation (lookup by client
order id) and sent then.  Should the exchange itself answer "duplicate order", that is reported as the
order already placed, not as a failure.

**Refusals.**  A run the guard or the exchange refuses (limit reached, insufficient balance,
trading halted, filters, no price) is written to trades.log (``SCHEDULE-REFUSED``), uses up its
scheduled time (it counts toward ``max_runs``) and is not retried: the next scheduled time
is the next attempt.

**Misfire policy** (ours; APScheduler's own is switched off for these jobs).  At each firing,
and once at start, the scheduled times in (last completed, now] are due:

* the latest of them runs once if it is at most ``misfire_grace_s`` (setting
  ``schedule_misfire_grace_s``, default 300 s) old — several missed times coalesce into that
  one run (``SCHEDULE-COALESCED`` in trades.log names the first and the last);
* if even the latest is older than that, nothing runs: ``SCHEDULE-SKIPPED id=… due=…
  reason=…`` is written and the schedule waits for its next time.

So a daemon stopped across three scheduled times and restarted within the grace of the last
one places exactly one order (for the last); restarted later, none.  A schedule ends
(``finished``) after ``max_runs`` runs or when its trigger has no time left (``end_at``).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog
from apscheduler.triggers.base import BaseTrigger

from brokers.models import Actor
from brokers.orders.args import parse_order
from brokers.orders.args import plain_decimal as plain
from brokers.orders.service import UNATTENDED_PREFIX, OrderService
from brokers.schedules.order_runs import OrderServiceRuns
from brokers.schedules.spec import SCHEDULE_KEYS, ScheduleInputError, ScheduleSpec, iso, next_fire, parse_spec, plan
from brokers.schedules.store import ACTIVE, CANCELLED, FINISHED, ScheduleRepository, ScheduleRow, ScheduleStore

log = structlog.get_logger(__name__)

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
ID = re.compile(r"^s-[0-9a-f]{12}$")
CLIENT_ID = re.compile(r"^[A-Za-z0-9._:/-]{1,36}$")
MAX_ACTIVE_PER_OWNER = 100
DEFAULT_MISFIRE_GRACE_S = 300.0


class JobHost(Protocol):
    """The scheduler that fires schedules (the daemon's APScheduler)."""

    def add_schedule_job(
        self, job_id: str, trigger: BaseTrigger, func: Callable[[], Awaitable[None]], *, catch_up: bool
    ) -> None: ...

    def remove_job(self, job_id: str) -> None: ...


def client_id(schedule_id: str, due: datetime) -> str:
    """The client order id of the run of ``schedule_id`` for scheduled time ``due`` (deterministic)."""
    cid = f"{UNATTENDED_PREFIX}{schedule_id}-{int(due.timestamp())}"
    assert CLIENT_ID.match(cid), cid
    return cid


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class ScheduleRuns(Protocol):
    """Where a schedule's orders go (a single node's order service, or a cluster's order leader)."""

    async def check(self, fields: dict[str, Any]) -> list[str]:
        """At schedule_order: what can be checked before any run (ScheduleInputError); warnings."""
        ...

    async def run(self, row: ScheduleRow, due: datetime, cid: str, ends: bool, now: float) -> tuple[str, str]:
        """One run for scheduled time ``due`` (order ``cid``): settle the schedule's progress (``ends``
        finishes it) and place or record the order; returns ("run" | "refused", the audit line)."""
        ...


class ScheduleService:
    """Scheduled orders of every principal, run through one order path (:class:`ScheduleRuns`)."""

    def __init__(
        self,
        store: ScheduleRepository,
        orders: OrderService | None,
        *,
        runs: ScheduleRuns | None = None,
        audit: AuditWriter | None = None,
        jobs: JobHost | None = None,
        misfire_grace_s: float = DEFAULT_MISFIRE_GRACE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        if runs is None:
            assert orders is not None and isinstance(store, ScheduleStore), "a single node's runs need its orders"
            runs = OrderServiceRuns(orders, store)
        self.runs = runs
        self.jobs = jobs
        self.misfire_grace_s = misfire_grace_s
        self._audit = audit
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}

    # --- tools ----------------------------------------------------------------------------
    async def create(self, owner: str | None, args: object) -> dict[str, Any]:
        """schedule_order: validate the timing and the order (without sending), store, schedule."""
        if not isinstance(args, dict):
            raise ScheduleInputError("schedule_order takes an object of place_order arguments plus cron or every")
        spec = parse_spec(args)
        order_args = {k: v for k, v in args.items() if k not in SCHEDULE_KEYS}
        if "client_order_id" in order_args:
            raise ScheduleInputError(
                "client_order_id cannot be given: each run's id is derived from the schedule id and its time"
            )
        fields = parse_order(order_args)
        warnings = await self.runs.check(fields)
        now = self._clock()
        trigger = spec.trigger(now)
        first = next_fire(trigger, _at(now))
        if first is None:
            raise ScheduleInputError("the schedule never fires: its end_at has passed or its cron date never occurs")
        if await self.store.count_active(owner) >= MAX_ACTIVE_PER_OWNER:
            raise ScheduleInputError(
                f"at most {MAX_ACTIVE_PER_OWNER} active schedules per client; cancel one with cancel_schedule"
            )
        row = ScheduleRow(
            id=f"s-{secrets.token_hex(6)}", owner=owner, order_args=order_args, cron=spec.cron, every=spec.every,
            start_at=spec.start_at, end_at=spec.end_at, max_runs=spec.max_runs, runs_done=0, last_fire_at=None,
            status=ACTIVE, created_at=now, updated_at=now,
        )  # fmt: skip
        await self.store.insert(row)
        self._add_job(row, trigger, catch_up=False)
        await self._write(f"SCHEDULE-CREATED id={row.id} {self._order_text(fields)} {spec.describe()}")
        out = {"schedule_id": row.id, "next_run_at": iso(first), **self._timing(row, spec)}
        return out | ({"warnings": warnings} if warnings else {})

    async def listing(self, actor: Actor) -> list[dict[str, Any]]:
        """list_schedules: the actor's own schedules (everyone's for an admin), newest first."""
        now = _at(self._clock())
        return [self._entry(row, now, owner=actor.admin) for row in await self.store.visible(actor)]

    async def active_listing(self) -> list[dict[str, Any]]:
        """Every principal's active schedules, each as an admin's list_schedules entry (``owner``,
        ``next_run_at``) with ``max_runs`` always present: the dashboard's Trading panel."""
        now = _at(self._clock())
        rows = [row for row in await self.store.active() if row.status == ACTIVE]
        return [self._entry(row, now, owner=True) | {"max_runs": row.max_runs} for row in rows]

    def _entry(self, row: ScheduleRow, now: datetime, *, owner: bool) -> dict[str, Any]:
        """One schedule as list_schedules shows it; ``next_run_at`` None unless it is active."""
        spec = parse_spec(row.timing())
        entry: dict[str, Any] = {"schedule_id": row.id, "status": row.status, "order": row.order_args}
        if owner:
            entry["owner"] = row.owner
        entry |= self._timing(row, spec)
        entry["runs_done"] = row.runs_done
        entry["last_completed_at"] = None if row.last_fire_at is None else iso(_at(row.last_fire_at))
        nxt = None
        if row.status == ACTIVE:
            after = _at(row.last_fire_at if row.last_fire_at is not None else row.created_at)
            nxt = next_fire(spec.trigger(row.created_at), max(now, after))
        entry["next_run_at"] = iso(nxt)
        entry["created_at"] = iso(_at(row.created_at))
        return entry

    async def cancel(self, actor: Actor, schedule_id: object) -> dict[str, Any]:
        """cancel_schedule: stop one of the actor's schedules (any for an admin); another's is "not found"."""
        if not isinstance(schedule_id, str) or not schedule_id:
            raise ScheduleInputError("schedule_id is required: the id schedule_order returned")
        row = await self.store.get(schedule_id) if ID.match(schedule_id) else None
        if row is None or not actor.may_act_on(row.owner):
            raise ScheduleInputError(f"schedule not found: {schedule_id[:64]}")
        async with self._lock(row.id):
            if not await self.store.set_status(row.id, CANCELLED, self._clock()):
                current = await self.store.get(row.id)
                raise ScheduleInputError(f"schedule {row.id} is already {current.status if current else 'gone'}")
            self._remove_job(row.id)
        await self._write(f"SCHEDULE-CANCELLED id={row.id} runs={row.runs_done}")
        return {"ok": True, "schedule_id": row.id, "runs_done": row.runs_done}

    # --- running --------------------------------------------------------------------------
    async def start(self) -> int:
        """(Re)add every active schedule to the scheduler; one with a due or missed time also gets a
        catch-up firing at once (the misfire policy decides there).  Returns the number added."""
        rows = await self.store.active()
        self.load(rows)
        log.info("schedules_loaded", active=len(rows))
        return len(rows)

    def load(self, rows: Sequence[ScheduleRow]) -> None:
        """Add these active schedules' jobs (:meth:`start` for all; a cluster's leader as they appear)."""
        now = _at(self._clock())
        for row in rows:
            trigger = parse_spec(row.timing()).trigger(row.created_at)
            after = _at(row.last_fire_at if row.last_fire_at is not None else row.created_at)
            pending = plan(trigger, after, now, self.misfire_grace_s).kind != "idle"
            self._add_job(row, trigger, catch_up=pending)

    def unload(self, schedule_ids: Sequence[str]) -> None:
        """Remove these schedules' jobs (a cluster's leader that lost its lease, or a schedule that ended)."""
        for sid in schedule_ids:
            self._remove_job(sid)

    async def fire(self, schedule_id: str) -> str:
        """One firing of a schedule: what is due now per the misfire policy.  Returns what it did
        (idle, run, refused, skipped, finished, inactive) — for tests and logs."""
        async with self._lock(schedule_id):
            row = await self.store.get(schedule_id)
            if row is None or row.status != ACTIVE:
                self._remove_job(schedule_id)
                return "inactive"
            trigger = parse_spec(row.timing()).trigger(row.created_at)
            after = _at(row.last_fire_at if row.last_fire_at is not None else row.created_at)
            now_ts = self._clock()
            decision = plan(trigger, after, _at(now_ts), self.misfire_grace_s)
            if decision.kind == "idle":
                return "idle"
            if decision.kind == "finished":
                await self.store.set_status(row.id, FINISHED, now_ts)
                return await self._finished(row, row.runs_done)
            assert decision.due is not None and decision.settled is not None
            if decision.kind == "skip":
                late = round(now_ts - decision.due.timestamp())
                ends = next_fire(trigger, decision.settled + timedelta(seconds=1)) is None
                await self.store.settle(row.id, decision.settled.timestamp(), ran=False, finished=ends, now=now_ts)
                await self._write(
                    f"SCHEDULE-SKIPPED id={row.id} due={iso(decision.due)} reason=missed by {late}s, more than "
                    f"misfire_grace_s={self.misfire_grace_s:g} (every missed time up to now skipped)"
                )
                return await self._finished(row, row.runs_done) if ends else "skipped"
            if decision.coalesced:
                await self._write(
                    f"SCHEDULE-COALESCED id={row.id} due={iso(decision.first_due)}..{iso(decision.due)} "
                    f"into one run at {iso(decision.due)}"
                )
            return await self._run(row, trigger, decision.due, now_ts)

    async def _run(self, row: ScheduleRow, trigger: BaseTrigger, due: datetime, now: float) -> str:
        cid = client_id(row.id, due)
        runs = row.runs_done + 1
        ends = (row.max_runs is not None and runs >= row.max_runs) or next_fire(
            trigger, datetime.fromtimestamp(due.timestamp() + 1, UTC)
        ) is None
        kind, line = await self.runs.run(row, due, cid, ends, now)
        await self._write(line)
        return await self._finished(row, runs) if ends else kind

    async def _finished(self, row: ScheduleRow, runs: int) -> str:
        self._remove_job(row.id)
        await self._write(f"SCHEDULE-FINISHED id={row.id} runs={runs}")
        return "finished"

    # --- helpers --------------------------------------------------------------------------
    def _add_job(self, row: ScheduleRow, trigger: BaseTrigger, *, catch_up: bool) -> None:
        if self.jobs is not None:
            sid = row.id

            async def run() -> None:
                await self.fire(sid)

            self.jobs.add_schedule_job(f"schedule:{sid}", trigger, run, catch_up=catch_up)

    def _remove_job(self, schedule_id: str) -> None:
        if self.jobs is not None:
            self.jobs.remove_job(f"schedule:{schedule_id}")

    def _lock(self, schedule_id: str) -> asyncio.Lock:
        return self._locks.setdefault(schedule_id, asyncio.Lock())

    def _timing(self, row: ScheduleRow, spec: ScheduleSpec) -> dict[str, Any]:
        out: dict[str, Any] = {"trigger": spec.describe()}
        for key in ("cron", "every", "start_at", "end_at", "max_runs"):
            if getattr(row, key) is not None:
                out[key] = getattr(row, key)
        return out

    def _order_text(self, fields: dict[str, Any]) -> str:
        qty = fields.get("quantity")
        amount = plain(qty) if qty is not None else f"quote:{plain(fields.get('quote_quantity') or 0)}"
        kind = fields["type"] if fields.get("price") is None else f"{fields['type']}@{plain(fields['price'])}"
        return f"{fields['side']} {fields['symbol']} {amount} {kind}"

    async def _write(self, line: str) -> None:
        if self._audit is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))
            await self._audit([f"{stamp} {line}"])
