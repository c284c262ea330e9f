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
from collections.abc import Mapping

from engine.market_data.errors import RateLimited

WEIGHT_HEADER = "X-MBX-USED-WEIGHT-1M"


class RateGate:
    """Shared by every request to one host; safe for concurrent coroutines."""

    def __init__(self, weight_limit: int = 6000, budget_fraction: float = 0.8) -> None:
        self.weight_limit = weight_limit
        self.budget = int(weight_limit * budget_fraction)
        self._used = 0
        self._minute = self._current_minute()
        self._banned_until = 0.0
        self._lock = asyncio.Lock()

    @staticmethod
    def _current_minute() -> int:
        return int(time.time() // 60)

    @property
    def used_weight(self) -> int:
        """Weight used in the current minute, as last reported (or estimated)."""
        if self._current_minute() != self._minute:
            return 0
        return self._used

    def ban_remaining(self) -> float:
        """Seconds until requests may be sent again (0 when not banned)."""
        return max(0.0, self._banned_until - time.monotonic())

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
                minute = self._current_minute()
                if minute != self._minute:
                    self._minute, self._used = minute, 0
                if self._used + weight <= self.budget:
                    self._used += weight  # reserve; corrected by the response header
                    return
                # never more than a minute, whatever the wall clock did since ``minute`` was read
                wait = min(60.05, max(0.05, (minute + 1) * 60 - time.time() + 0.05))
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
            self._minute, self._used = self._current_minute(), int(used)
        if status in (418, 429):
            try:
                retry = float(headers.get("Retry-After", "60"))
            except ValueError:
                retry = 60.0
            self._banned_until = max(self._banned_until, time.monotonic() + retry)
            return retry
        return None
