"""Five-field crontab strings (UTC) → APScheduler 3.11 triggers, refusing bad fields by name.

Each field is read with standard crontab rules (``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n``,
``a/n`` and comma lists; month and weekday names) and handed to
:meth:`CronTrigger.from_crontab` as an explicit list, so APScheduler's own reading of a field
never matters.  Two deliberate corrections of APScheduler 3.x:

* weekdays are crontab's (0 and 7 = Sunday, 1 = Monday); APScheduler 3.x numbers Monday 0,
  so weekdays are passed by name;
* when both day-of-month and day-of-week are restricted (neither is ``*``), a day matching
  *either* fires, as in Vixie cron (APScheduler alone would need both): an :class:`OrTrigger`
  of the two.

A string that is not five valid fields raises :class:`CronError` naming the field, e.g.
``cron field 'hour' (2nd): 25 is out of range 0-23``.
"""

from __future__ import annotations

from datetime import datetime

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("day_of_week", 0, 7))
ORDINALS = ("1st", "2nd", "3rd", "4th", "5th")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MAX_LENGTH = 200


class CronError(ValueError):
    """A cron string that is not five valid fields; the message names the field."""


def _value(text: str, index: int, lo: int, hi: int) -> int:
    name = FIELDS[index][0]
    low = text.lower()
    if name == "month" and low in MONTHS:
        return MONTHS.index(low) + 1
    if name == "day_of_week" and low in WEEKDAYS:
        return WEEKDAYS.index(low)
    if not text.isascii() or not text.isdigit():
        raise _error(index, f"{text!r} is not a number" + (" or a name" if name in ("month", "day_of_week") else ""))
    value = int(text)
    if not lo <= value <= hi:
        raise _error(index, f"{value} is out of range {lo}-{hi}")
    return value


def _error(index: int, detail: str) -> CronError:
    return CronError(f"cron field '{FIELDS[index][0]}' ({ORDINALS[index]}): {detail}")


def _expand(text: str, index: int) -> set[int]:
    """The values one field selects (crontab rules); raises CronError naming the field."""
    _, lo, hi = FIELDS[index]
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _error(index, f"empty list item in {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isascii() or not step_text.isdigit():
                raise _error(index, f"step {step_text!r} is not a whole number")
            step = int(step_text)
            if step < 1:
                raise _error(index, "step must be at least 1")
        if base == "*":
            first, last = lo, (6 if FIELDS[index][0] == "day_of_week" else hi)
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, index, lo, hi), _value(b, index, lo, hi)
            if first > last:
                raise _error(index, f"range {base!r} runs backwards")
        else:
            first = _value(base, index, lo, hi)
            last = (6 if FIELDS[index][0] == "day_of_week" else hi) if slash else first
        if step > hi - lo + 1 and slash:
            raise _error(index, f"step {step} is larger than the field's range {lo}-{hi}")
        values.update(range(first, last + 1, step))
    if FIELDS[index][0] == "day_of_week" and 7 in values:
        values.discard(7)
        values.add(0)
    return values


def _render(index: int, values: set[int]) -> str:
    if FIELDS[index][0] == "day_of_week":
        return ",".join(WEEKDAYS[v] for v in sorted(values))  # by name: APScheduler 3.x numbers Monday 0
    return ",".join(str(v) for v in sorted(values))


def parse_cron(expr: str) -> tuple[str, ...]:
    """The five fields, each ``*`` or an explicit list APScheduler reads the same way; CronError if invalid."""
    if not isinstance(expr, str):
        raise CronError("cron must be a string of five fields, e.g. '0 8 * * 1'")
    if len(expr) > MAX_LENGTH:
        raise CronError(f"cron is too long (at most {MAX_LENGTH} characters)")
    parts = expr.split()
    if len(parts) != 5:
        raise CronError(
            f"cron needs five fields (minute hour day-of-month month day-of-week, UTC), got {len(parts)}: "
            "e.g. '0 8 * * 1' for Mondays at 08:00"
        )
    out = []
    for index, text in enumerate(parts):
        out.append("*" if text == "*" else _render(index, _expand(text, index)))
    return tuple(out)


def cron_trigger(expr: str, *, start: datetime | None = None, end: datetime | None = None) -> BaseTrigger:
    """The UTC trigger of a five-field crontab string (see the module docstring for the two corrections)."""
    minute, hour, day, month, dow = parse_cron(expr)
    if day != "*" and dow != "*":
        by_day = CronTrigger.from_crontab(f"{minute} {hour} {day} {month} *", timezone="UTC")
        by_weekday = CronTrigger.from_crontab(f"{minute} {hour} * {month} {dow}", timezone="UTC")
        for t in (by_day, by_weekday):
            _bound(t, start, end)
        return OrTrigger([by_day, by_weekday])
    trigger = CronTrigger.from_crontab(" ".join((minute, hour, day, month, dow)), timezone="UTC")
    _bound(trigger, start, end)
    return trigger


def _bound(trigger: CronTrigger, start: datetime | None, end: datetime | None) -> None:
    """Set start/end dates on a trigger built by from_crontab (which takes neither)."""
    if start is not None:
        trigger.start_date = start
    if end is not None:
        trigger.end_date = end
