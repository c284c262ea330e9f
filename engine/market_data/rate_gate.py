"""Request-weight budgeting and Retry-After bans for one exchange host.

Binance counts request weight per IP in a rolling minute and reports the total in
``X-MBX-USED-WEIGHT-1M``; past the limit it answers 429 (and 418, a ban, if one keeps going),
both with ``Retry-After`` in seconds.  The gate is consulted before every request: it waits
while a ban is in force (or fails fast when the wait is longer than the caller allows), and
it slows callers down before the budget is exhausted instead of after.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping

from engine.market_data.errors import RateLimited

WEIGHT_HEADER = "X-MBX-USED-WEIGHT-1M"


WINDOW_S = 60.0


class RateGate:
    """Shared by every request to one host; safe for concurrent coroutines.

    Our own reservations are counted over a rolling minute (monotonic clock); the exchange's
    ``X-MBX-USED-WEIGHT-1M`` (which also counts other clients on the same IP) is trusted
    until its minute ends.  The usage is the larger of the two, so the budget holds whether
    the exchange counts per calendar minute (Binance) or per rolling minute (our simulator):
    a burst at the end of one minute is not followed by a second full burst at the start of
    the next, which a calendar-minute count alone allowed and a rolling counter answers with 429.
    """

    def __init__(self, weight_limit: int = 6000, budget_fraction: float = 0.8) -> None:
        self.weight_limit = weight_limit
        self.budget = int(weight_limit * budget_fraction)
        self._spent: deque[tuple[float, int]] = deque()
        self._own = 0
        self._reported = 0
        self._minute = self._current_minute()
        self._banned_until = 0.0
        self._lock = asyncio.Lock()

    @staticmethod
    def _current_minute() -> int:
        return int(time.time() // 60)

    def _reported_now(self) -> int:
        return self._reported if self._current_minute() == self._minute else 0

    def _usage(self, now: float) -> int:
        while self._spent and self._spent[0][0] <= now - WINDOW_S:
            self._own -= self._spent.popleft()[1]
        return max(self._own, self._reported_now())

    @property
    def used_weight(self) -> int:
        """Weight counted against the budget now: ours over the last minute, or the exchange's report."""
        return self._usage(time.monotonic())

    def ban_remaining(self) -> float:
        """Seconds until requests may be sent again (0 when not banned)."""
        return max(0.0, self._banned_until - time.monotonic())

    def _wait_for(self, weight: int, now: float) -> float:
        """Seconds until ``weight`` fits the budget (never more than a minute, whatever the wall clock did)."""
        waits = [0.0]
        if self._own + weight > self.budget:
            freed, own_wait = self._own, WINDOW_S
            for t, w in self._spent:
                freed -= w
                if freed + weight <= self.budget:
                    own_wait = t + WINDOW_S - now
                    break
            waits.append(own_wait)
        if self._reported_now() + weight > self.budget:
            waits.append((self._minute + 1) * 60 - time.time())
        return min(60.05, max(0.05, max(waits) + 0.05))

    async def acquire(self, weight: int, *, max_wait_s: float) -> None:
        """Wait until a request of ``weight`` may be sent; raise RateLimited if that takes > ``max_wait_s``."""
        async with self._lock:
            while True:
                ban = self.ban_remaining()
                if ban > 0:
                    if ban > max_wait_s:
                        raise RateLimited(f"rate limited by the exchange; retry in {ban:.0f} s", retry_after_s=ban)
                    await asyncio.sleep(ban)
                    continue
                now = time.monotonic()
                if self._usage(now) + weight <= self.budget:
                    self._spent.append((now, weight))  # reserve; the exchange's header corrects its part
                    self._own += weight
                    if self._reported_now():
                        self._reported += weight
                    return
                wait = self._wait_for(weight, now)
                if wait > max_wait_s:
                    raise RateLimited(
                        f"request-weight budget of {self.budget}/min used up; retry in {wait:.0f} s",
                        retry_after_s=wait,
                    )
                await asyncio.sleep(wait)

    def observe(self, status: int, headers: Mapping[str, str]) -> float | None:
        """Record a response; returns the Retry-After seconds for 429/418, else None."""
        used = headers.get(WEIGHT_HEADER)
        if used is not None and used.isdigit():
            self._minute, self._reported = self._current_minute(), int(used)
        if status in (418, 429):
            try:
                retry = float(headers.get("Retry-After", "60"))
            except ValueError:
                retry = 60.0
            self._banned_until = max(self._banned_until, time.monotonic() + retry)
            return retry
        return None
