"""Per-client-IP limits: a sliding count of events within a window (auth endpoints, failed bearers).

In memory on purpose: a restart forgets the counts, which only ever loosens a limit for a
moment, and nothing on the request path touches the database for it.
"""

from __future__ import annotations

import time
from collections import deque


class IpLimiter:
    """At most ``limit`` events per ``window_s`` per IP; :meth:`retry_after` says when one is allowed again."""

    def __init__(self, limit: int, window_s: float, *, max_ips: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_ips = max_ips
        self._events: dict[str, deque[float]] = {}

    def _recent(self, ip: str, now: float) -> deque[float]:
        q = self._events.get(ip)
        if q is None:
            if len(self._events) >= self.max_ips:  # forget the quietest half rather than grow without bound
                for key in sorted(self._events, key=lambda k: self._events[k][-1] if self._events[k] else 0)[
                    : self.max_ips // 2
                ]:
                    del self._events[key]
            q = self._events[ip] = deque()
        while q and q[0] <= now - self.window_s:
            q.popleft()
        return q

    def retry_after(self, ip: str) -> float | None:
        """None if another event is allowed now, else the seconds until one is."""
        now = time.monotonic()
        q = self._recent(ip, now)
        if len(q) < self.limit:
            return None
        return max(0.0, q[0] + self.window_s - now)

    def record(self, ip: str) -> None:
        now = time.monotonic()
        self._recent(ip, now).append(now)

    def hit(self, ip: str) -> float | None:
        """Record an event unless over the limit; returns retry_after when refused."""
        wait = self.retry_after(ip)
        if wait is None:
            self.record(ip)
        return wait
