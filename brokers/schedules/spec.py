"""When a schedule fires: its spec (pydantic), its trigger, and which scheduled times are due.

:class:`ScheduleSpec` validates the timing arguments of ``schedule_order``: exactly one of
``cron`` (five crontab fields, UTC — :mod:`brokers.schedules.cron`) or ``every`` (``30s``,
``15m``, ``4h``, ``7d``, ``1w``; at least 1 s, at most 365 d), optional ``start_at`` /
``end_at`` (ISO 8601; UTC unless an offset is given) and ``max_runs`` ≥ 1.  Every refusal
names the field.  Scheduled times are whole UTC seconds.

:func:`plan` is the misfire rule (pure, so tests drive it with any clock): see
:mod:`brokers.schedules.service`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from brokers.orders.args import OrderInputError
from brokers.schedules.cron import CronError, cron_trigger

SCHEDULE_KEYS = frozenset({"cron", "every", "start_at", "end_at", "max_runs"})
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MIN_EVERY_S = 1
MAX_EVERY_S = 365 * 86400
MAX_RUNS = 1_000_000
_EVERY = re.compile(r"^([0-9]{1,9})([smhdw])$")
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


class ScheduleInputError(OrderInputError):
    """Schedule arguments the caller must correct (the message names the field)."""


def parse_every(text: Any) -> int:
    """``"30s"``, ``"4h"``, ``"7d"``, ``"1w"`` → seconds; ScheduleInputError naming ``every`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"every must be a string such as '30s', '4h', '7d' or '1w'; got {type(text).__name__}")
    m = _EVERY.match(text.strip().lower())
    if m is None:
        raise ValueError(
            f"every must be a whole number and a unit s, m, h, d or w, e.g. '30s', '4h'; got {text[:40]!r}"
        )
    seconds = int(m.group(1)) * UNITS[m.group(2)]
    if seconds < MIN_EVERY_S:
        raise ValueError(f"every must be at least {MIN_EVERY_S}s; got {text.strip()!r}")
    if seconds > MAX_EVERY_S:
        raise ValueError(f"every must be at most 365d; got {text.strip()!r}")
    return seconds


def parse_time(name: str, value: Any) -> datetime:
    """An ISO 8601 time as an aware UTC datetime truncated to whole seconds (no offset: UTC)."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"{name} must be an ISO 8601 time such as '2026-12-01T08:00:00Z'")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"{name} must be an ISO 8601 time such as '2026-12-01T08:00:00Z'; got {value[:40]!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        parsed = parsed.astimezone(UTC).replace(microsecond=0)
    except (OverflowError, ValueError):
        raise ValueError(f"{name} is out of range") from None
    if not _EARLIEST <= parsed <= _LATEST:
        raise ValueError(f"{name} must be between 2000 and 9000")
    return parsed


class ScheduleSpec(BaseModel):
    """The timing of a schedule; build with :func:`parse_spec`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cron: str | None = None
    every: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None

    @field_validator("cron", mode="before")
    @classmethod
    def _cron(cls, v: Any) -> Any:
        if v is None:
            return None
        try:
            cron_trigger(v)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return " ".join(v.split())

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: Any) -> Any:
        if v is None:
            return None
        parse_every(v)
        return v.strip().lower()

    @field_validator("start_at", "end_at", mode="before")
    @classmethod
    def _time(cls, v: Any, info: Any) -> Any:
        return None if v is None else parse_time(info.field_name, v).isoformat()

    @field_validator("max_runs", mode="before")
    @classmethod
    def _max_runs(cls, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_RUNS:
            raise ValueError(f"max_runs must be a whole number from 1 to {MAX_RUNS}")
        return v

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give exactly one of cron (e.g. '0 8 * * 1') or every (e.g. '4h')")
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        return self

    @property
    def start(self) -> datetime | None:
        return None if self.start_at is None else datetime.fromisoformat(self.start_at)

    @property
    def end(self) -> datetime | None:
        return None if self.end_at is None else datetime.fromisoformat(self.end_at)

    def describe(self) -> str:
        return f"cron '{self.cron}' UTC" if self.cron is not None else f"every {self.every}"

    def trigger(self, created_at: float) -> BaseTrigger:
        """The APScheduler trigger; an ``every`` schedule without start_at counts from its creation."""
        if self.cron is not None:
            return cron_trigger(self.cron, start=self.start, end=self.end)
        assert self.every is not None
        seconds = parse_every(self.every)
        anchor = self.start or datetime.fromtimestamp(int(created_at) + seconds, UTC)
        return IntervalTrigger(seconds=seconds, start_date=anchor, end_date=self.end, timezone=UTC)


def parse_spec(args: dict[str, Any]) -> ScheduleSpec:
    """The schedule keys of ``args`` as a spec; ScheduleInputError naming the field otherwise."""
    try:
        return ScheduleSpec.model_validate({k: args[k] for k in SCHEDULE_KEYS if k in args})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if where and not msg.startswith(where.split(".")[0]) and not msg.startswith("cron field"):
            msg = f"{where}: {msg}"
        raise ScheduleInputError(msg) from None


def next_fire(trigger: BaseTrigger, at_or_after: datetime) -> datetime | None:
    """The first scheduled time at or after ``at_or_after`` (None: the schedule has ended)."""
    fire: datetime | None = trigger.get_next_fire_time(None, at_or_after)  # APScheduler 3 ships no types
    return fire


@dataclass(frozen=True, slots=True)
class Plan:
    """What a firing does now.  ``kind``: ``idle`` (nothing due), ``run`` (one order for ``due``),
    ``skip`` (every due time is older than the grace), ``finished`` (no scheduled time left).
    ``first_due`` is the oldest due time (earlier than ``due`` when missed times coalesce);
    ``settled`` is the time up to which every scheduled time is dealt with afterwards."""

    kind: str
    due: datetime | None = None
    first_due: datetime | None = None
    settled: datetime | None = None

    @property
    def coalesced(self) -> bool:
        return self.first_due is not None and self.due is not None and self.first_due < self.due


def plan(trigger: BaseTrigger, after: datetime, now: datetime, grace_s: float, *, tolerance_s: float = 0.0) -> Plan:
    """The misfire rule: of the times in (``after``, ``now``], run the latest if it is within
    ``grace_s`` of now (earlier ones coalesce into it), else skip them all."""
    first = next_fire(trigger, after + timedelta(microseconds=1))
    if first is None:
        return Plan("finished")
    horizon = now + timedelta(seconds=tolerance_s)
    if first > horizon:
        return Plan("idle")
    t = next_fire(trigger, max(first, now - timedelta(seconds=grace_s)))
    latest: datetime | None = None
    for _ in range(200_000):  # bounded: at most grace_s / 1 s scheduled times lie in the window
        if t is None or t > horizon:
            break
        latest = t
        t = next_fire(trigger, t + timedelta(microseconds=1))
    if latest is None:
        return Plan("skip", due=first, first_due=first, settled=now)
    return Plan("run", due=latest, first_due=first, settled=latest)


def iso(dt: datetime | None) -> str | None:
    """A scheduled time as chartgen prints it: ISO 8601 UTC with ``Z``."""
    return None if dt is None else dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
