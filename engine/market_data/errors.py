"""Errors of the market-data layer; their text is shown to the user after "Failed to fetch data: ".

An error carries the HTTP status when the exchange answered with one.  A status in
:data:`REFUSED_STATUSES` (451: "restricted location", 403: the exchange's firewall) means
the exchange refuses this location or IP address: retrying soon will not help, so the live
feed backs off for minutes (engine.feed.health).
"""

from __future__ import annotations

REFUSED_STATUSES = frozenset({403, 451})


def is_refusal(status: int | None) -> bool:
    """Whether an HTTP status means the exchange refuses this location or IP (451, 403)."""
    return status in REFUSED_STATUSES


class MarketDataError(Exception):
    """A fetch failed; the message names the cause (HTTP status, exchange message, timeout...).

    ``status`` is the exchange's HTTP status, if it answered with one.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        return is_refusal(self.status)


class RateLimited(MarketDataError):
    """The exchange asked us to wait (429/418 with Retry-After) longer than the caller can wait."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
