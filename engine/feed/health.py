"""What went wrong last on a stream connection or a backfill, and how long to wait after it.

A :class:`LastError` is kept per stream connection and per backfilled window until the
next success, so readiness can say *why* a market is not live ("HTTP 451 from
api.binance.com: Service unavailable from a restricted location …") instead of only that
it is not.  :func:`retry_delay` is the one backoff rule of the feed: exponential with
jitter, but minutes after the exchange refused this location or IP (HTTP 451 or 403),
when retrying every few seconds only repeats the refusal.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import structlog

from engine.market_data.errors import MarketDataError, is_refusal

REFUSED_HINT = (
    "the exchange refuses this location or IP address: use another exchange with --exchange "
    "(e.g. --exchange binanceus) or run chartgen from another host"
)
"""What to do after a 451/403, shown in readiness reasons and logged with the refusal."""
DEFAULT_REFUSED_BACKOFF_S = 300.0
"""How long to wait after an HTTP 451/403 refusal (jittered down to 80 %)."""


@dataclass(frozen=True, slots=True)
class LastError:
    """The last failure of a connection or backfill; cleared by the next success."""

    message: str
    """What happened, naming the host, the HTTP status and the exchange's own message when known."""
    status: int | None = None
    retry_in_s: float | None = None
    """The delay chosen before the next attempt."""
    at: float = 0.0
    """When it happened (``time.monotonic()``)."""

    @property
    def refused(self) -> bool:
        """The exchange refuses this location or IP (HTTP 451 or 403)."""
        return is_refusal(self.status)

    def scheduled(self, delay_s: float) -> LastError:
        """This error with the chosen retry delay, stamped now."""
        return replace(self, retry_in_s=delay_s, at=time.monotonic())

    def retry_left_s(self, now: float | None = None) -> float | None:
        if self.retry_in_s is None:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self.at + self.retry_in_s - now)

    def advice(self) -> str:
        """After a refusal: `` — <what to do> (next attempt in …)``; otherwise empty."""
        if not self.refused:
            return ""
        left = self.retry_left_s()
        when = "" if left is None else f" (next attempt in {_duration(left)})"
        return f" — {REFUSED_HINT}{when}"

    def describe(self) -> str:
        """The message, plus what to do and when the next attempt is after a refusal."""
        return self.message + self.advice()

    def as_dict(self) -> dict[str, Any]:
        left = self.retry_left_s()
        return {
            "message": self.message,
            "status": self.status,
            "refused": self.refused,
            "retry_in_s": None if left is None else round(left, 1),
        }


def log_refusal(event: str, error: LastError, delay_s: float, **where: Any) -> None:
    """Log a refused connection (HTTP 451/403) as an error with the hint and the next attempt."""
    structlog.get_logger(__name__).error(
        event, **where, status=error.status, error=error.message, hint=REFUSED_HINT, retry_in_s=round(delay_s, 1)
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def from_exception(exc: BaseException) -> LastError:
    """A LastError for a failed REST call or connection attempt."""
    if isinstance(exc, MarketDataError):
        return LastError(str(exc), exc.status)
    if isinstance(exc, aiohttp.ClientResponseError):
        return LastError(f"HTTP {exc.status}: {exc.message}", exc.status)
    if isinstance(exc, TimeoutError):
        return LastError("timed out")
    return LastError(str(exc) or type(exc).__name__)


def retry_delay(
    attempt: int,
    *,
    initial_s: float,
    max_s: float,
    rng: random.Random,
    refused: bool = False,
    refused_s: float = DEFAULT_REFUSED_BACKOFF_S,
) -> float:
    """Exponential backoff with jitter; after a refusal, at least ~``refused_s`` (minutes)."""
    delay = min(max_s, initial_s * (2 ** min(attempt, 30))) * rng.uniform(0.5, 1.0)
    if refused:
        delay = max(delay, refused_s * rng.uniform(0.8, 1.0))
    return delay
