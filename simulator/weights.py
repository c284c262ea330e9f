"""Request weight per IP over a rolling minute, as Binance counts it (REQUEST_WEIGHT 6000/1m).

The documented weight of each endpoint (rest-api.md, "Weight") is :func:`request_weight`'s answer:
a table by path, method-specific entries (``DELETE /api/v3/openOrders`` weighs 1, its ``GET`` 6; the
documented 80 of a ``GET`` without ``symbol`` is not charged yet), and the weights that depend on
parameters (depth limit, how many symbols a ticker asks for).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping

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
    "/api/v3/account/commission": 20,
    "/api/v3/myTrades": 20,
    "/api/v3/myPreventedMatches": 20,
    "/api/v3/depth": 5,
    "/api/v3/trades": 25,
    "/api/v3/historicalTrades": 25,
    "/api/v3/aggTrades": 4,
    "/api/v3/avgPrice": 2,
    "/api/v3/ticker/bookTicker": 2,
    "/api/v3/ticker": 4,
    "/api/v3/rateLimit/order": 40,
    "/api/v3/order/cancelReplace": 1,
    "/api/v3/orderList": 4,
    "/api/v3/openOrderList": 6,
    "/api/v3/allOrderList": 20,
}
METHOD_WEIGHTS: dict[tuple[str, str], int] = {
    ("DELETE", "/api/v3/openOrders"): 1,
    ("DELETE", "/api/v3/order"): 1,
    ("DELETE", "/api/v3/orderList"): 1,
}
"""Where one path's methods weigh differently: the cancels weigh 1."""


def request_weight(method: str, path: str, query: Mapping[str, str]) -> int:
    """The documented weight of one request (1 for a path without a documented weight)."""
    if (method, path) in METHOD_WEIGHTS:
        return METHOD_WEIGHTS[(method, path)]
    weight = ENDPOINT_WEIGHTS.get(path, 1)
    if path == "/api/v3/exchangeInfo":
        return 2 if "symbol" in query or "symbols" in query else 20
    if path == "/api/v3/myPreventedMatches":
        return 2 if "preventedMatchId" in query else 20  # rest-api.md: 2 by preventedMatchId, 20 by orderId
    if path == "/api/v3/ticker":
        count = query["symbols"].count(",") + 1 if "symbols" in query else 1
        return min(200, 4 * count)
    return market_data_weight(path, query, weight)


def market_data_weight(path: str, query: Mapping[str, str], weight: int) -> int:
    """The documented weight of market-data requests whose weight depends on their parameters."""
    if path == "/api/v3/depth":
        try:
            limit = int(query.get("limit", "100"))
        except ValueError:
            return weight
        return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250
    if path in ("/api/v3/ticker/bookTicker", "/api/v3/ticker/price") and "symbol" not in query:
        return 4
    if path == "/api/v3/ticker/24hr" and "symbol" not in query:
        count = query["symbols"].count(",") + 1 if "symbols" in query else 101
        return 2 if count <= 20 else 40 if count <= 100 else 80
    return weight


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
