"""Per-client-address limits: a sliding count of events within a window (auth endpoints, failed bearers).

The address is the real client's: ``request.client`` after uvicorn's proxy-header handling,
which believes ``X-Forwarded-For`` only from ``trusted_proxies`` (daemon/http_server.py).
IPv6 clients are counted per /64 (one host usually holds a whole /64 and could otherwise
rotate through it); IPv4-mapped IPv6 addresses count as their IPv4 address.

In memory on purpose: a restart forgets the counts, which only ever loosens a limit for a
moment, and nothing on the request path touches the database for it.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import time
from collections import deque


@functools.lru_cache(maxsize=4096)
def client_key(host: str) -> str:
    """The key a client address is counted under: the IPv4 address, or the IPv6 /64 network."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # not an IP (a unix socket peer, "unknown"): counted as it is
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class IpLimiter:
    """At most ``limit`` events per ``window_s`` per client (:func:`client_key`); :meth:`retry_after` says when
    one is allowed again."""

    def __init__(self, limit: int, window_s: float, *, max_ips: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_ips = max_ips
        self._events: dict[str, deque[float]] = {}

    def _recent(self, ip: str, now: float) -> deque[float]:
        ip = client_key(ip)
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
        if client_key(ip) not in self._events:  # the common case: a client without events, nothing stored
            return None
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


class BearerFailures:
    """Failed bearer attempts per client address, and the tokens that were valid when last checked.

    Past ``limit`` failures within ``window_s`` an address gets 429 for any token it has not
    shown valid before, unchecked (no database probe for a guesser).  A token already verified
    (from any address) is still checked, so a legitimate client behind the same NAT or proxy as
    a guesser is not locked out by it; the check itself still refuses a revoked or expired one.
    Tokens are remembered by SHA-256, never as text, at most ``remember`` of them.
    """

    def __init__(self, limit: int = 30, window_s: float = 60.0, *, remember: int = 10_000) -> None:
        self.failures = IpLimiter(limit, window_s)
        self.remember = remember
        self._valid: dict[bytes, None] = {}

    @staticmethod
    def _digest(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def refused(self, ip: str, token: str) -> float | None:
        """Seconds until ``ip`` may try an unknown token again; None: check this token now."""
        wait = self.failures.retry_after(ip)
        if wait is None or self._digest(token) in self._valid:
            return None
        return wait

    def failed(self, ip: str) -> None:
        if self.failures.retry_after(ip) is None:
            self.failures.record(ip)

    def succeeded(self, token: str) -> None:
        digest = self._digest(token)
        if digest in self._valid:
            return
        if len(self._valid) >= self.remember:
            del self._valid[next(iter(self._valid))]  # the oldest remembered
        self._valid[digest] = None
