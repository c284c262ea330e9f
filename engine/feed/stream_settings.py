"""How the market-stream feeds (our Binance stream manager and the ccxt.pro feed) connect:
streams per connection, subscription pacing, stall and rotation timeouts, reconnect backoff."""

from __future__ import annotations

from dataclasses import dataclass

from engine.feed.health import DEFAULT_REFUSED_BACKOFF_S


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Tuning of the stream manager; defaults fit Binance spot."""

    max_streams_per_connection: int = 1024
    max_url_streams: int = 64
    """Streams named in the connect URL (keeps the request line short); the rest are SUBSCRIBEd."""
    subscribe_batch: int = 100
    control_interval_s: float = 0.25
    """Pause between control messages (Binance allows 5 incoming messages per second)."""
    stall_timeout_s: float | None = 9.0
    """No data message for this long → reconnect (2 × the 2 s kline cadence + 5 s margin)."""
    rotate_after_s: float | None = 23.5 * 3600
    """Reconnect proactively at this connection age (Binance cuts connections at 24 h)."""
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    refused_backoff_s: float = DEFAULT_REFUSED_BACKOFF_S
    """Wait after the exchange refused this location or IP (HTTP 451/403): minutes, not seconds."""
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_streams_per_connection <= 1024:
            raise ValueError("max_streams_per_connection must be between 1 and 1024")
        if self.max_url_streams < 1 or self.subscribe_batch < 1:
            raise ValueError("max_url_streams and subscribe_batch must be at least 1")
