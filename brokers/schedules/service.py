"""Scheduled orders: create, list, cancel, and the run of each scheduled time — one order per run.

The ``schedules`` table (:mod:`brokers.schedules.store`) is the truth; the daemon's one
APScheduler (``daemon/scheduler.py``, behind :class:`JobHost`) only says *when*: each active
schedule is a job there, re-added from the table at every start.

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

from brokers.filters import FilterError
from brokers.guard import OrderRefused, order_value
from brokers.models import Actor, BrokerError, OrderRejected, OrderRequest, state_name
from brokers.order_args import OrderInputError, parse_order
from brokers.order_args import plain_decimal as plain
from brokers.schedules.spec import SCHEDULE_KEYS, ScheduleInputError, ScheduleSpec, next_fire, parse_spec, plan
from brokers.schedules.store import ACTIVE, CANCELLED, FINISHED, ScheduleRow, ScheduleStore
from brokers.service import UNATTENDED_PREFIX, OrderService

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


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class ScheduleService:
    """Scheduled orders of every principal, run through one order service."""

    def __init__(
        self,
        store: ScheduleStore,
        orders: OrderService,
        *,
        audit: AuditWriter | None = None,
        jobs: JobHost | None = None,
        misfire_grace_s: float = DEFAULT_MISFIRE_GRACE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.orders = orders
        self.jobs = jobs
        self.misfire_grace_s = misfire_grace_s
        self._audit = audit
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}

    # --- tools ----------------------------------------------------------------------------
    async def create(self, owner: str | None, args: Any) -> dict[str, Any]:
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
        await self._check_order(fields)
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
        return {"schedule_id": row.id, "next_run_at": _iso(first), **self._timing(row, spec)}

    async def listing(self, actor: Actor) -> list[dict[str, Any]]:
        """list_schedules: the actor's own schedules (everyone's for an admin), newest first."""
        now = _at(self._clock())
        out = []
        for row in await self.store.visible(actor):
            spec = parse_spec(row.timing())
            entry: dict[str, Any] = {"schedule_id": row.id, "status": row.status, "order": row.order_args}
            if actor.admin:
                entry["owner"] = row.owner
            entry |= self._timing(row, spec)
            entry["runs_done"] = row.runs_done
            entry["last_completed_at"] = None if row.last_fire_at is None else _iso(_at(row.last_fire_at))
            nxt = None
            if row.status == ACTIVE:
                after = _at(row.last_fire_at if row.last_fire_at is not None else row.created_at)
                nxt = next_fire(spec.trigger(row.created_at), max(now, after))
            entry["next_run_at"] = _iso(nxt)
            entry["created_at"] = _iso(_at(row.created_at))
            out.append(entry)
        return out

    async def cancel(self, actor: Actor, schedule_id: Any) -> dict[str, Any]:
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
        now = _at(self._clock())
        rows = await self.store.active()
        for row in rows:
            trigger = parse_spec(row.timing()).trigger(row.created_at)
            after = _at(row.last_fire_at if row.last_fire_at is not None else row.created_at)
            pending = plan(trigger, after, now, self.misfire_grace_s).kind != "idle"
            self._add_job(row, trigger, catch_up=pending)
        log.info("schedules_loaded", active=len(rows))
        return len(rows)

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
                    f"SCHEDULE-SKIPPED id={row.id} due={_iso(decision.due)} reason=missed by {late}s, more than "
                    f"misfire_grace_s={self.misfire_grace_s:g} (every missed time up to now skipped)"
                )
                return await self._finished(row, row.runs_done) if ends else "skipped"
            if decision.coalesced:
                await self._write(
                    f"SCHEDULE-COALESCED id={row.id} due={_iso(decision.first_due)}..{_iso(decision.due)} "
                    f"into one run at {_iso(decision.due)}"
                )
            return await self._run(row, trigger, decision.due, now_ts)

    async def _run(self, row: ScheduleRow, trigger: BaseTrigger, due: datetime, now: float) -> str:
        cid = client_id(row.id, due)
        runs = row.runs_done + 1
        ends = (row.max_runs is not None and runs >= row.max_runs) or next_fire(
            trigger, datetime.fromtimestamp(due.timestamp() + 1, UTC)
        ) is None
        head = f"id={row.id} due={_iso(due)} order={cid}"
        if await self.orders.store.get(cid) is not None:  # admitted before a crash: never a second order
            await self._settle(row, due, ends, now)
            await self._write(f"SCHEDULE-RUN {head} outcome=already placed (found after a restart; not re-sent)")
            return await self._finished(row, runs) if ends else "run"
        try:
            req = OrderRequest(**{**parse_order(row.order_args), "client_order_id": cid, "owner": row.owner})
            await self.orders.guard.admit(req)
        except (OrderInputError, BrokerError) as exc:
            if isinstance(exc, OrderRefused) and "already used" in str(exc):
                await self._settle(row, due, ends, now)
                await self._write(f"SCHEDULE-RUN {head} outcome=already placed (not re-sent)")
                return await self._finished(row, runs) if ends else "run"
            await self._settle(row, due, ends, now)
            await self._write(f"SCHEDULE-REFUSED {head} reason={exc}")
            log.warning("schedule_run_refused", schedule_id=row.id, due=_iso(due), reason=str(exc))
            return await self._finished(row, runs) if ends else "refused"
        await self._settle(row, due, ends, now)
        try:
            result = await self.orders.send_recorded(req)
        except OrderRejected as exc:
            if "duplicate" in str(exc).lower():
                await self._write(f"SCHEDULE-RUN {head} outcome=already placed (the exchange has this client id)")
                return await self._finished(row, runs) if ends else "run"
            await self._write(f"SCHEDULE-REFUSED {head} reason={exc}")
            return await self._finished(row, runs) if ends else "refused"
        except BrokerError as exc:
            await self._write(f"SCHEDULE-RUN {head} outcome=error, left to reconciliation: {exc}")
            return await self._finished(row, runs) if ends else "run"
        await self._write(f"SCHEDULE-RUN {head} status={result.get('status', state_name('UNKNOWN'))}")
        return await self._finished(row, runs) if ends else "run"

    async def _settle(self, row: ScheduleRow, due: datetime, ends: bool, now: float) -> None:
        await self.store.settle(row.id, due.timestamp(), ran=True, finished=ends, now=now)

    async def _finished(self, row: ScheduleRow, runs: int) -> str:
        self._remove_job(row.id)
        await self._write(f"SCHEDULE-FINISHED id={row.id} runs={runs}")
        return "finished"

    # --- helpers --------------------------------------------------------------------------
    async def _check_order(self, fields: dict[str, Any]) -> None:
        """What the guard can check without sending: allow-list, symbol listed and trading, price and
        lot filters; with a reference price at hand, minimum notional and the per-order limit too."""
        guard = self.orders.guard
        symbol = fields["symbol"]
        allowed = guard.limits.allowed_symbols
        if allowed and symbol not in allowed:
            raise ScheduleInputError(f"{symbol} is not in the allowed symbols ({', '.join(sorted(allowed))})")
        rules = await guard.rules(symbol)
        market = fields["type"] == "MARKET"
        try:
            if fields.get("price") is not None:
                rules.check_price(fields["price"])
            if fields.get("quantity") is not None:
                rules.check_quantity(fields["quantity"], market=market)
        except FilterError as exc:
            raise ScheduleInputError(str(exc)) from None
        try:
            ref = await guard.reference_price(symbol)
        except (OrderInputError, BrokerError):
            return  # no price now: checked again at each run
        req = OrderRequest(**{**fields, "owner": None})
        if req.quantity is not None:
            try:
                rules.check_notional(req.quantity, req.price if req.price is not None else ref.price, market=market)
            except FilterError as exc:
                raise ScheduleInputError(str(exc)) from None
        cap = guard.limits.max_order_notional
        value = order_value(req, ref.price)
        if cap is not None and value > cap:
            raise ScheduleInputError(
                f"each run's order value {plain(value)} exceeds the per-order limit {plain(cap)} at today's price"
            )

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
