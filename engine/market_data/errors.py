"""Errors of the market-data layer; their text is shown to the user after "Failed to fetch data: "."""

from __future__ import annotations


class MarketDataError(Exception):
    """A fetch failed; the message names the cause (HTTP status, exchange message, timeout...)."""


class RateLimited(MarketDataError):
    """The exchange asked us to wait (429/418 with Retry-After) longer than the caller can wait."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
