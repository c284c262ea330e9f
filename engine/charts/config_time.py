"""Time words of construct_chart_config: ranges, intervals, and how many bars a range takes.

A range ("last 7 days", "past week", "today", "3 months", "YTD", preference "1M") becomes a
length in seconds; the interval follows the chart-img seed's rule when none is named:

- range < 1 day → 5m (up to 4 hours) or 15m;
- 1 day – 7 days → 1h;
- over 7 days up to 3 months → 4h (the seed leaves 7D–1M open; 4h keeps 42–540 bars);
- over 3 months up to 2 years → 1d; longer → 1w.

Bars = range / interval, counted in trading time for markets that close: stocks and
indices trade 6.5 h on 5 days of 7 (Yahoo's hourly bars: 7 a day, its 4h bars: 2 a day),
currencies and futures 24 h on 5 days of 7; crypto trades always.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from engine.charts.config_vocabulary import NUMBER_WORDS
from engine.market_data.intervals import BINANCE_INTERVALS

DAY = 86_400
UNIT_SECONDS: dict[str, int] = {
    "minute": 60,
    "hour": 3600,
    "day": DAY,
    "week": 7 * DAY,
    "fortnight": 14 * DAY,
    "month": 30 * DAY,
    "quarter": 90 * DAY,
    "year": 365 * DAY,
}
_UNIT_SPELLINGS: dict[str, str] = {
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "minute": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "hour": "hour",
    "d": "day",
    "day": "day",
    "w": "week",
    "wk": "week",
    "week": "week",
    "fortnight": "fortnight",
    "mo": "month",
    "mos": "month",
    "month": "month",
    "q": "quarter",
    "quarter": "quarter",
    "y": "year",
    "yr": "year",
    "year": "year",
}
YAHOO_INTERVALS = ("1m", "2m", "5m", "15m", "30m", "1h", "4h", "1d", "1w", "1M")
"""Intervals the Yahoo source serves (engine.market_data.yahoo maps each one)."""

_NUM = r"(\d+|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
_UNIT = r"(minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|wks?|w|fortnights?|months?|mos?|quarters?|q|years?|yrs?|y)"
RANGE_LAST = re.compile(
    r"(?<![a-z0-9])(?:(?:over|for|in|during)\s+)?(?:the\s+)?(?:last|past|previous|this|recent)\s+"
    rf"(?:{_NUM}\s*-?\s*)?{_UNIT}s?(?![a-z0-9])"
)
RANGE_BARE = re.compile(
    rf"(?<![a-z0-9.]){_NUM}\s*-?\s*(minutes?|hours?|days?|weeks?|fortnights?|months?|quarters?|years?)(?![a-z0-9])"
)
RANGE_TODAY = re.compile(r"(?<![a-z0-9])(?:today|intraday|today's|this session)(?![a-z0-9])")
RANGE_YTD = re.compile(r"(?<![a-z0-9])(?:ytd|year[- ]to[- ]date)(?![a-z0-9])")
INTERVAL_COMPACT = re.compile(r"(?<![a-z0-9.])(1|2|3|4|5|6|8|12|15|30)\s*(m|min|h|hr|d|w|wk)(?![a-z0-9])")
INTERVAL_WORDY = re.compile(
    r"(?<![a-z0-9.])(1|2|3|4|5|6|8|12|15|30)\s*-?\s*(minute|min|hour|hr|day|week)s?\s*"
    r"(?=chart|candles?|bars?|timeframe|interval|tf(?![a-z]))"
)
INTERVAL_ON = re.compile(
    r"(?<![a-z0-9])on\s+(?:the\s+|an?\s+)?(1|2|3|4|5|6|8|12|15|30)\s*-?\s*(minute|min|hour|hr|day|week|m|h|d|w)s?"
    r"(?![a-z0-9])"
)
_INTERVAL_UNIT = {"m": "m", "min": "m", "minute": "m", "h": "h", "hr": "h", "hour": "h", "d": "d", "day": "d"}
_INTERVAL_UNIT |= {"w": "w", "wk": "w", "week": "w"}


@dataclass(frozen=True, slots=True)
class Span:
    """A time range: its length in seconds and a short label (``7D``, ``3M``, ``YTD``)."""

    seconds: int
    label: str


def number(word: str | None) -> int:
    if not word:
        return 1
    return int(word) if word.isdigit() else NUMBER_WORDS.get(word, 1)


def unit_name(spelling: str) -> str:
    return _UNIT_SPELLINGS[spelling.rstrip("s") if spelling.rstrip("s") in _UNIT_SPELLINGS else spelling]


def span_of(count: int, unit: str) -> Span:
    letter = {"minute": "m", "hour": "H", "day": "D", "week": "W", "fortnight": "W", "month": "M"}
    letter |= {"quarter": "M", "year": "Y"}
    shown = {"fortnight": 2, "quarter": 3}.get(unit, 1) * count
    return Span(count * UNIT_SECONDS[unit], f"{shown}{letter[unit]}")


def ytd(now: datetime) -> Span:
    start = datetime(now.year, 1, 1, tzinfo=UTC)
    return Span(max(DAY, int((now - start).total_seconds())), "YTD")


_PREF = re.compile(r"^\s*(\d+)\s*([a-zA-Z]+)\s*$")
_PREF_UNITS = {"m": "minute", "min": "minute", "h": "hour", "H": "hour", "D": "day", "d": "day", "W": "week"}
_PREF_UNITS |= {"w": "week", "M": "month", "mo": "month", "Y": "year", "y": "year"}


def preference_range(text: str, now: datetime) -> Span | None:
    """A chart-img style range (``7D``, ``1M``, ``3M``, ``1Y``, ``YTD``, ``12H``; ``M`` is months, ``m`` minutes)."""
    if text.strip().upper() == "YTD":
        return ytd(now)
    m = _PREF.match(text)
    if m is None:
        return None
    unit = _PREF_UNITS.get(m.group(2)) or _UNIT_SPELLINGS.get(m.group(2).lower().rstrip("s"))
    return span_of(int(m.group(1)), unit) if unit else None


def interval_of(count: str, unit: str) -> str:
    """``4`` + ``hour`` → ``4h``; ``1`` + ``week`` → ``1w``."""
    return f"{int(count)}{_INTERVAL_UNIT[unit]}"


def interval_for(span: Span) -> tuple[str, str]:
    """The seed's interval for a range, and the rule that chose it."""
    s = span.seconds
    if s < DAY:
        return ("5m", "range under 1 day (up to 4 h) → 5m") if s <= 4 * 3600 else ("15m", "range under 1 day → 15m")
    if s <= 7 * DAY:
        return "1h", "range of 1–7 days → 1h"
    if s <= 92 * DAY:
        return "4h", "range over 7 days up to 3 months → 4h"
    if s <= 730 * DAY:
        return "1d", "range over 3 months up to 2 years → 1d"
    return "1w", "range over 2 years → 1w"


def interval_seconds(interval: str) -> int:
    """Nominal bar length of a Binance or Yahoo interval."""
    name = {"1wk": "1w", "1mo": "1M"}.get(interval, interval)
    return {"2m": 120}.get(name) or BINANCE_INTERVALS[name]


def bars_for(span: Span, interval: str, calendar: str) -> int:
    """Bars of ``interval`` that cover ``span`` on a market with ``calendar`` (crypto, fx, stock)."""
    step = interval_seconds(interval)
    if calendar == "crypto" or step >= 7 * DAY:
        return max(1, math.ceil(span.seconds / step))
    days = span.seconds / DAY
    trading_days = max(1, round(days * 5 / 7)) if days >= 1 else 1
    if step >= DAY:
        return max(1, math.ceil(trading_days * DAY / step))
    if calendar == "fx":
        per_day = math.ceil(DAY / step)
    elif interval == "4h":
        per_day = 2  # Yahoo's 4h bars: hourly bars in 4-hour buckets restarting each trading day
    else:
        per_day = math.ceil(23_400 / step)  # a 6.5-hour session
    if days < 1:
        return max(1, math.ceil(min(span.seconds, 23_400) / step))
    return trading_days * per_day
