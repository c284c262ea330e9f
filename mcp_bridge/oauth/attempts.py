"""Passphrase attempts on the consent page: a growing delay per client address and a global budget.

A guesser must not get more than a few guesses a minute however many addresses it uses,
and must not be able to lock the operator out for long.  So:

- per address, each failure doubles the wait before that address may try again (1 s, 2 s,
  4 s, … capped at ``max_delay_s``, a minute by default); a success clears the address;
- globally, at most ``global_limit`` attempts per ``global_window_s`` are checked at all
  (5 a minute by default), whoever sends them;
- a refused attempt costs nothing and extends nothing, so every wait anybody is shown is
  at most a minute, and the operator can always get in within a minute of a guesser stopping;
- a browser that signed in before carries a *device cookie* (dashboard/device_cookies.py, OWASP's
  "Slow Down Online Guessing Attacks with Device Cookies"); the caller verifies it and names the
  device to :meth:`PassphraseAttempts.begin`.  Such an attempt is limited per device only — at
  most ``device_limit`` failures within ``device_window_s`` — never by the global budget or
  another address's failures, so a guesser on rotating addresses cannot keep the operator out.
  A device past its limit goes on the untrusted list for ``device_window_s``: its attempts are
  then an unknown client's (the address back-off and the global budget).

An attempt is counted when it starts, not when the (slow, threaded) scrypt check ends, so a
burst of concurrent posts cannot all slip past the counts; a success then gives its global
slot back (a device's: its count).  In memory on purpose, like :mod:`mcp_bridge.rate_limit`: a restart forgets the
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


@dataclass(slots=True)
class _Device:
    failures: deque[float]
    """When its failed (or still running) attempts started, inside the device window."""
    locked_until: float
    """On the untrusted list until then (0: never was)."""

    def last_seen(self) -> float:
        """Its newest failure, or the end of its lock: what it is kept for."""
        return max(self.failures[-1] if self.failures else 0.0, self.locked_until)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A started attempt; hand it back to :meth:`PassphraseAttempts.succeeded` or ``failed``."""

    address: str
    started: float
    device: str | None = None
    """The trusted device it was counted against (None: an unknown client's, the global budget's)."""


class TooManyAttempts(Exception):
    """No attempt may be made now; ``retry_after_s`` says when one may."""

    def __init__(self, retry_after_s: float, *, everyone: bool) -> None:
        self.retry_after_s = retry_after_s
        self.everyone = everyone
        who = "on this server" if everyone else "from your address"
        super().__init__(f"Too many wrong passphrases {who}; wait {max(1, round(retry_after_s))} s and try again.")


class PassphraseAttempts:
    """Per-address exponential back-off plus a global sliding budget of checked attempts; per-device
    limits for the attempts of trusted devices.

    Usage::

        attempt = attempts.begin(ip, device)  # raises TooManyAttempts (retry_after_s) when refused
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
        device_limit: int = 10,
        device_window_s: float = 900.0,
        max_devices: int = 10_000,
        clock: Clock = time.monotonic,
    ) -> None:
        if base_delay_s <= 0 or max_delay_s < base_delay_s:
            raise ValueError("base_delay_s must be > 0 and max_delay_s >= base_delay_s")
        if global_limit < 1 or global_window_s <= 0:
            raise ValueError("global_limit must be >= 1 and global_window_s > 0")
        if device_limit < 1 or device_window_s <= 0:
            raise ValueError("device_limit must be >= 1 and device_window_s > 0")
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.global_limit = global_limit
        self.global_window_s = global_window_s
        self.forget_after_s = forget_after_s
        self.max_addresses = max_addresses
        self.device_limit = device_limit
        self.device_window_s = device_window_s
        self.max_devices = max_devices
        self.clock = clock
        self._addresses: dict[str, _Address] = {}
        self._recent: deque[float] = deque()
        self._devices: dict[str, _Device] = {}

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

    def trusted(self, device: str | None) -> bool:
        """Whether attempts carrying ``device`` (a verified device cookie's id) are counted per device:
        a device given and not on the untrusted list."""
        if device is None:
            return False
        state = self._devices.get(device)
        return state is None or self.clock() >= state.locked_until

    def begin(self, address: str, device: str | None = None) -> Attempt:
        """Count an attempt from ``address`` now, or raise :class:`TooManyAttempts`.

        ``device``: the id of a device cookie the caller verified.  A trusted device's attempt is
        counted against that device only (in flight, it counts as a failure); one on the untrusted
        list, or none, is an unknown client's."""
        if device is not None and self.trusted(device):
            now = self.clock()
            state = self._device(device, now)
            state.failures.append(now)
            if len(state.failures) >= self.device_limit:
                # the limit reached (failures and attempts in flight): untrusted for a window from now
                state.failures.clear()
                state.locked_until = now + self.device_window_s
            return Attempt(address, now, device)
        refused = self.retry_after(address)
        if refused is not None:
            raise refused
        now = self.clock()
        self._recent.append(now)
        known = self._addresses.get(address)
        if known is not None and now - known.last_seen > self.forget_after_s:
            known = None  # quiet long enough: start again from the base delay
        failures = 1 if known is None else known.failures + 1
        delay = min(self.base_delay_s * 2 ** min(failures - 1, 32), self.max_delay_s)
        self._remember(address, _Address(failures, now + delay, now))
        return Attempt(address, now)

    def succeeded(self, attempt: Attempt) -> None:
        """The passphrase was right: the address (or the device) is cleared and the global slot given back."""
        if attempt.device is not None:
            self._devices.pop(attempt.device, None)  # the operator's device: its count (and any lock) cleared
            return
        self._addresses.pop(attempt.address, None)
        try:
            self._recent.remove(attempt.started)
        except ValueError:
            pass  # already aged out of the window

    def failed(self, attempt: Attempt) -> None:
        """The passphrase was wrong: the counts taken by :meth:`begin` stand."""

    def _device(self, device: str, now: float) -> _Device:
        """The device's state with its failures inside the window (created, the table bounded)."""
        state = self._devices.get(device)
        if state is None:
            if len(self._devices) >= self.max_devices:  # forget the longest-quiet half
                quiet = sorted(self._devices, key=lambda k: self._devices[k].last_seen())
                for key in quiet[: self.max_devices // 2]:
                    del self._devices[key]
            state = self._devices[device] = _Device(deque(), 0.0)
        while state.failures and state.failures[0] <= now - self.device_window_s:
            state.failures.popleft()
        return state

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
