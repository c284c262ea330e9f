"""Injected faults: what the control API can make the exchange do wrong."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class HttpErrorFault:
    """The next ``count`` matching REST requests answer ``status`` with Retry-After."""

    status: int
    retry_after: int
    count: int
    path: str | None = None

    def matches(self, path: str) -> bool:
        return self.count > 0 and (self.path is None or self.path == path)


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
