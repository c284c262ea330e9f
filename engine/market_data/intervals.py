"""Bar intervals: chartgen's spellings, Binance's spellings, and their lengths in seconds."""

from __future__ import annotations

from engine.market_data.errors import MarketDataError

BINANCE_INTERVALS: dict[str, int] = {
    "1s": 1,
    "1m": 60,
    "3m": 180,
    "5m": 300,
    "15m": 900,
    "30m": 1800,
    "1h": 3600,
    "2h": 7200,
    "4h": 14400,
    "6h": 21600,
    "8h": 28800,
    "12h": 43200,
    "1d": 86400,
    "3d": 259200,
    "1w": 604800,
    "1M": 2592000,  # nominal 30 days; Binance months are calendar months
}

# chartgen / Yahoo spellings that Binance names differently
_ALIASES = {"1wk": "1w", "1mo": "1M", "60m": "1h", "1min": "1m", "1M": "1M"}


def to_binance(interval: str) -> str:
    """The Binance name of ``interval`` (``1wk`` → ``1w``); raises MarketDataError if Binance has none."""
    name = _ALIASES.get(interval, interval)
    if name not in BINANCE_INTERVALS:
        valid = ", ".join(BINANCE_INTERVALS)
        raise MarketDataError(f"interval {interval!r} is not a Binance interval; use one of {valid} (or 1wk)")
    return name


def interval_seconds(interval: str) -> int:
    """Nominal length of one bar in seconds (Binance or chartgen spelling)."""
    return BINANCE_INTERVALS[to_binance(interval)]
