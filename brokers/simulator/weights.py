"""Request weight per IP over a rolling minute, as Binance counts it (REQUEST_WEIGHT 6000/1m)."""

from __future__ import annotations

import math
import time
from collections import deque

# documented weights of the endpoints the simulator serves
ENDPOINT_WEIGHTS: dict[str, int] = {
    "/api/v3/ping": 1,
    "/api/v3/time": 1,
    "/api/v3/exchangeInfo": 20,
    "/api/v3/klines": 2,
    "/api/v3/ticker/price": 2,
    "/api/v3/ticker/24hr": 2,
    "/api/v3/order": 1,
    "/api/v3/order/test": 1,
    "/api/v3/openOrders": 6,
    "/api/v3/allOrders": 20,
    "/api/v3/account": 20,
    "/api/v3/myTrades": 20,
}
WINDOW_S = 60.0


class WeightMeter:
    """Rolling one-minute sum of request weight (real monotonic time)."""

    def __init__(self, limit: int = 6000) -> None:
        self.limit = limit
        self._events: deque[tuple[float, int]] = deque()
        self._sum = 0

    def _expire(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - WINDOW_S:
            _, w = self._events.popleft()
            self._sum -= w

    def used(self) -> int:
        self._expire(time.monotonic())
        return self._sum

    def try_spend(self, weight: int) -> float | None:
        """Spend ``weight``; None if allowed, else the seconds until it would fit (Retry-After)."""
        now = time.monotonic()
        self._expire(now)
        if self._sum + weight > self.limit:
            freed, wait = self._sum, WINDOW_S
            for t, w in self._events:
                freed -= w
                if freed + weight <= self.limit:
                    wait = t + WINDOW_S - now
                    break
            return float(max(1, math.ceil(wait)))
        self._events.append((now, weight))
        self._sum += weight
        return None

    def reset(self) -> None:
        self._events.clear()
        self._sum = 0
