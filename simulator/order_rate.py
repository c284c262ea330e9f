"""The account's unfilled-order count: ``ORDERS`` 100 per 10 s and 200,000 per day (rest-api.md, LIMITS).

Binance counts the order placements of an account in each ``ORDERS`` interval: a new order
counts 1, an OCO or OTO 2, an OTOCO 3, a cancel-replace 1 (even when its new order is not
attempted), a test order 0.  The simulator counts a placement once its request is
authenticated, whether the order is then accepted or refused (filters, balance, "would take"),
because Binance evaluates the count before the order reaches the matching engine.  A placement
past a limit is refused with HTTP 429, -1015 and ``Retry-After`` and is not counted.

The intervals are fixed windows on the simulator's clock (10-second and day buckets from the
epoch), so a manual-clock test passes a window by advancing the clock, and ``Retry-After`` is
the number of (simulated) seconds left in the full window.  Binance's decrement of the count
when orders fill (its "unfilled order count" FAQ) is not simulated: every placement counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_PER_10S = 100
DEFAULT_PER_DAY = 200_000
_INTERVAL_MS = {"SECOND": 1_000, "MINUTE": 60_000, "DAY": 86_400_000}


@dataclass(frozen=True, slots=True)
class OrderWindow:
    """One ``ORDERS`` rate limit: at most ``limit`` placements per ``interval_num`` ``interval``."""

    interval: Literal["SECOND", "MINUTE", "DAY"]
    interval_num: int
    limit: int

    @property
    def span_ms(self) -> int:
        return _INTERVAL_MS[self.interval] * self.interval_num

    @property
    def header(self) -> str:
        """``X-MBX-ORDER-COUNT-10S``, ``X-MBX-ORDER-COUNT-1D``: intervalNum then the interval's letter."""
        return f"X-MBX-ORDER-COUNT-{self.interval_num}{self.interval[0]}"

    def rate_limit(self) -> dict[str, Any]:
        """The exchangeInfo ``rateLimits`` entry."""
        return {"rateLimitType": "ORDERS", "interval": self.interval, "intervalNum": self.interval_num,
                "limit": self.limit}  # fmt: skip


@dataclass(frozen=True, slots=True)
class OrderRateRefusal:
    """A placement past a limit: -1015 with Binance's text, and the seconds to wait."""

    msg: str
    retry_after: int
    code: int = -1015


class OrderRate:
    """Order placements counted per window on the simulator's clock ``now_ms``.

    >>> rate = OrderRate(lambda: 0)
    >>> rate.take(2) is None, rate.counts()[0]["count"]
    (True, 2)
    """

    def __init__(
        self, now_ms: Callable[[], int], *, per_10s: int = DEFAULT_PER_10S, per_day: int = DEFAULT_PER_DAY
    ) -> None:
        self._now_ms = now_ms
        self.windows: tuple[OrderWindow, ...] = ()
        self._buckets: dict[OrderWindow, tuple[int, int]] = {}
        self.set_limits(per_10s, per_day)

    def set_limits(self, per_10s: int, per_day: int) -> None:
        """New limits (a fault tightening them, or Binance's back); the counts made so far stay."""
        if per_10s < 1 or per_day < 1:
            raise ValueError("order rate limits must be at least 1")
        counted = {w.span_ms: self._buckets.get(w, (0, 0)) for w in self.windows}
        self.windows = (OrderWindow("SECOND", 10, per_10s), OrderWindow("DAY", 1, per_day))
        self._buckets = {w: counted.get(w.span_ms, (0, 0)) for w in self.windows}

    def reset_limits(self) -> None:
        self.set_limits(DEFAULT_PER_10S, DEFAULT_PER_DAY)

    def _count(self, window: OrderWindow, now: int) -> int:
        bucket, count = self._buckets[window]
        return count if bucket == now // window.span_ms else 0

    def take(self, n: int = 1) -> OrderRateRefusal | None:
        """Count ``n`` placements now; a refusal (nothing counted) if any window would pass its limit."""
        now = self._now_ms()
        for window in self.windows:
            if self._count(window, now) + n > window.limit:
                left_ms = (now // window.span_ms + 1) * window.span_ms - now
                msg = (
                    f"Too many new orders; current limit is {window.limit} orders per "
                    f"{window.interval_num} {window.interval}."
                )
                return OrderRateRefusal(msg, max(1, math.ceil(left_ms / 1000)))
        for window in self.windows:
            self._buckets[window] = (now // window.span_ms, self._count(window, now) + n)
        return None

    def headers(self) -> dict[str, str]:
        """The ``X-MBX-ORDER-COUNT-*`` headers of an order answer."""
        now = self._now_ms()
        return {w.header: str(self._count(w, now)) for w in self.windows}

    def counts(self) -> list[dict[str, Any]]:
        """``GET /api/v3/rateLimit/order``: each interval's limit and the count in its current window."""
        now = self._now_ms()
        return [{**w.rate_limit(), "count": self._count(w, now)} for w in self.windows]

    def rate_limits(self) -> list[dict[str, Any]]:
        """exchangeInfo's ``ORDERS`` entries (the limits in force)."""
        return [w.rate_limit() for w in self.windows]
