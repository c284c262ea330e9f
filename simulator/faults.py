"""Injected faults: what the control API can make the exchange do wrong.

``POST /sim/v1/faults`` takes a JSON object naming one or more of them (design.md §4):

* ``{"http_error": {"status": 429, "retry_after": 2, "count": 3, "path": "/api/v3/klines"}}``:
  the next ``count`` REST requests (to ``path`` if given) answer ``status``.  Binance's own
  body comes with it: 429/418 the rate-limit message, 451 the "restricted location" refusal,
  403 a firewall refusal, anything else -1000 "An unknown error occurred".
* ``{"refuse_streams": {"status": 451}}``: every market-stream websocket handshake (``/ws``,
  ``/ws/<stream>``, ``/stream``) is answered ``status`` with the same body as REST, until
  ``{"refuse_streams": null}`` or a reset.  Open connections stay (add ``"drop_streams": true``
  to make clients reconnect into the refusal).  With a 451 ``http_error`` of a large count it
  reproduces a region Binance refuses.
* ``{"stall_streams_s": 5}``, ``{"drop_streams": true}``, ``{"server_shutdown": true}``,
  ``{"max_connection_age_s": 30}``, ``{"clock_skew_ms": 1500}``: the stream and clock faults.
* ``{"order_fault": {"kind": "timeout"|"error_after_accept", ...}}``, ``{"drop_ws_api": true}``,
  ``{"user_stream_terminated": true}``: the trading faults.
* ``{"order_rate": {"per_10s": 5, "per_day": 100}}``: tighter ``ORDERS`` rate limits (either may be
  left out; ``null`` restores Binance's 100 per 10 s and 200,000 per day).  exchangeInfo states
  them, placements past them answer 429/-1015 (order_rate.py); the counts made so far stay.
* ``{"max_num_orders": 5, "max_num_algo_orders": 2, "max_num_order_lists": 1}``: tighter count
  filters (any of them; ``null`` restores Binance's 200, 5 and 20), stated in exchangeInfo and
  enforced with -2010 (count_filters.py).
* ``{"reset": true}``: clear every fault, the two above included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

RESTRICTED_LOCATION_MSG = (
    "Service unavailable from a restricted location according to 'b. Eligibility' in "
    "https://www.binance.com/en/terms. Please contact customer service if you believe you received this "
    "message in error."
)
"""Binance's words (HTTP 451, code 0) to clients in a region it does not serve."""


def error_body(status: int) -> dict[str, Any]:
    """The body Binance sends with an error ``status`` (REST and refused websocket handshakes alike)."""
    if status in (418, 429):
        return {"code": -1003, "msg": "Too many requests; current limit is exceeded. Please use the Retry-After."}
    if status == 451:
        return {"code": 0, "msg": RESTRICTED_LOCATION_MSG}
    if status == 403:
        return {"code": 0, "msg": "Request blocked by the web application firewall (WAF)."}
    return {"code": -1000, "msg": "An unknown error occurred while processing the request."}


@dataclass
class HttpErrorFault:
    """The next ``count`` matching REST requests answer ``status`` with Retry-After."""

    status: int
    retry_after: int
    count: int
    path: str | None = None

    def matches(self, path: str) -> bool:
        return self.count > 0 and (self.path is None or self.path == path)

    def body(self) -> dict[str, Any]:
        return error_body(self.status)


@dataclass
class StreamRefusal:
    """Market-stream handshakes are answered ``status`` (e.g. 451) instead of 101 until cleared."""

    status: int = 451

    def body(self) -> dict[str, Any]:
        return error_body(self.status)


@dataclass
class OrderFault:
    """The next ``count`` new orders are accepted, but the client does not get a clean answer.

    ``timeout``: the answer is held back ``delay_s`` seconds (longer than the client waits);
    ``error_after_accept``: the answer is an HTTP ``status`` (5xx) error.
    """

    kind: str
    count: int = 1
    status: int = 503
    delay_s: float = 30.0


@dataclass
class Faults:
    http_errors: list[HttpErrorFault] = field(default_factory=list)
    order_faults: list[OrderFault] = field(default_factory=list)
    stall_until: float = 0.0
    stall_started: float = 0.0
    clock_skew_ms: int = 0
    refuse_streams: StreamRefusal | None = None

    def take_http_error(self, path: str) -> HttpErrorFault | None:
        for fault in self.http_errors:
            if fault.matches(path):
                fault.count -= 1
                if fault.count <= 0:
                    self.http_errors.remove(fault)
                return fault
        return None

    def take_order_fault(self) -> OrderFault | None:
        if not self.order_faults:
            return None
        fault = self.order_faults[0]
        fault.count -= 1
        if fault.count <= 0:
            self.order_faults.pop(0)
        return fault

    def stall(self, seconds: float) -> None:
        """Freeze the connections open now for ``seconds``; new connections are healthy."""
        self.stall_started = time.monotonic()
        self.stall_until = self.stall_started + seconds

    def stalled(self, opened: float) -> bool:
        """Whether a connection opened at ``opened`` (monotonic) is frozen now."""
        return opened <= self.stall_started and time.monotonic() < self.stall_until

    def reset(self) -> None:
        self.http_errors.clear()
        self.order_faults.clear()
        self.stall_until = 0.0
        self.stall_started = 0.0
        self.clock_skew_ms = 0
        self.refuse_streams = None
