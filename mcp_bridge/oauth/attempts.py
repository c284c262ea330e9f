"""Passphrase attempts on the consent page: a growing delay per client address and a global budget.

A guesser must not get more than a few guesses a minute however many addresses it uses,
and must not be able to lock the operator out for long.  So:

- per address, each failure doubles the wait before that address may try again (1 s, 2 s,
  4 s, … capped at ``max_delay_s``, a minute by default); a success clears the address;
- globally, at most ``global_limit`` attempts per ``global_window_s`` are checked at all
  (5 a minute by default), whoever sends them;
- a refused attempt costs nothing and extends nothing, so every wait anybody is shown is
  at most a minute, and the operator can always get in within a minute of a guesser stopping.

An attempt is counted when it starts, not when the (slow, threaded) scrypt check ends, so a
burst of concurrent posts cannot all slip past the counts; a success then gives its global
slot back.  In memory on purpose, like :mod:`mcp_bridge.rate_limit`: a restart forgets the
counts, which only loosens the limits for a moment.  Our own code rather than a library's
because the rule is the point — no rate limiter we depend on does per-key exponential
back-off plus a global budget with this refund.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(slots=True)
class _Address:
    failures: int
    next_allowed: float
    last_seen: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """A started attempt; hand it back to :meth:`PassphraseAttempts.succeeded` or ``failed``."""

    address: str
    started: float


class TooManyAttempts(Exception):
    """No attempt may be made now; ``retry_after_s`` says when one may."""

    def __init__(self, retry_after_s: float, *, everyone: bool) -> None:
        self.retry_after_s = retry_after_s
        self.everyone = everyone
        who = "on this server" if everyone else "from your address"
        super().__init__(f"Too many wrong passphrases {who}; wait {max(1, round(retry_after_s))} s and try again.")


class PassphraseAttempts:
    """Per-address exponential back-off plus a global sliding budget of checked attempts.

    Usage::

        attempt = attempts.begin(ip)      # raises TooManyAttempts (retry_after_s) when refused
        if await check(passphrase):
            attempts.succeeded(attempt)
        else:
            attempts.failed(attempt)
    """

    def __init__(
        self,
        *,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        global_limit: int = 5,
        global_window_s: float = 60.0,
        forget_after_s: float = 900.0,
        max_addresses: int = 10_000,
        clock: Clock = time.monotonic,
    ) -> None:
        if base_delay_s <= 0 or max_delay_s < base_delay_s:
            raise ValueError("base_delay_s must be > 0 and max_delay_s >= base_delay_s")
        if global_limit < 1 or global_window_s <= 0:
            raise ValueError("global_limit must be >= 1 and global_window_s > 0")
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.global_limit = global_limit
        self.global_window_s = global_window_s
        self.forget_after_s = forget_after_s
        self.max_addresses = max_addresses
        self.clock = clock
        self._addresses: dict[str, _Address] = {}
        self._recent: deque[float] = deque()

    def _prune(self, now: float) -> None:
        while self._recent and self._recent[0] <= now - self.global_window_s:
            self._recent.popleft()

    def retry_after(self, address: str) -> TooManyAttempts | None:
        """Why ``address`` may not try now (None: it may)."""
        now = self.clock()
        state = self._addresses.get(address)
        if state is not None and now < state.next_allowed:
            return TooManyAttempts(state.next_allowed - now, everyone=False)
        self._prune(now)
        if len(self._recent) >= self.global_limit:
            return TooManyAttempts(self._recent[0] + self.global_window_s - now, everyone=True)
        return None

    def begin(self, address: str) -> Attempt:
        """Count an attempt from ``address`` now, or raise :class:`TooManyAttempts`."""
        refused = self.retry_after(address)
        if refused is not None:
            raise refused
        now = self.clock()
        self._recent.append(now)
        state = self._addresses.get(address)
        if state is not None and now - state.last_seen > self.forget_after_s:
            state = None  # quiet long enough: start again from the base delay
        failures = 1 if state is None else state.failures + 1
        delay = min(self.base_delay_s * 2 ** min(failures - 1, 32), self.max_delay_s)
        self._remember(address, _Address(failures, now + delay, now))
        return Attempt(address, now)

    def succeeded(self, attempt: Attempt) -> None:
        """The passphrase was right: the address is cleared and the global slot given back."""
        self._addresses.pop(attempt.address, None)
        try:
            self._recent.remove(attempt.started)
        except ValueError:
            pass  # already aged out of the window

    def failed(self, attempt: Attempt) -> None:
        """The passphrase was wrong: the counts taken by :meth:`begin` stand."""

    def _remember(self, address: str, state: _Address) -> None:
        if address not in self._addresses and len(self._addresses) >= self.max_addresses:
            now = state.last_seen
            for key in [k for k, v in self._addresses.items() if now - v.last_seen > self.forget_after_s]:
                del self._addresses[key]
            if len(self._addresses) >= self.max_addresses:  # still full: forget the longest-idle half
                by_age = sorted(self._addresses, key=lambda k: self._addresses[k].last_seen)
                for key in by_age[: self.max_addresses // 2]:
                    del self._addresses[key]
        self._addresses[address] = state
