"""The two seams of the feed: what a market-data source drives, and what the engine drives.

A *feed* (our Binance stream manager, or the ccxt.pro one) keeps a set of kline streams
open and tells a *sink* (:class:`~engine.feed.sync.WindowSync`) about kline updates and
about which streams are live or down; the sink backfills over REST after every "live".
Stream names use Binance's spelling (``btcusdt@kline_1m``) whatever the exchange.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable
from typing import Any, Protocol

from engine.feed.health import LastError
from engine.feed.messages import KlineUpdate


class StreamSink(Protocol):
    """Receives decoded stream data and connection state (called on the event loop, must not block)."""

    def on_kline(self, update: KlineUpdate) -> None: ...

    def on_streams_live(self, streams: Collection[str]) -> None: ...

    def on_streams_down(self, streams: Collection[str]) -> None: ...


class MarketFeed(Protocol):
    """A source of kline streams the engine can grow and shrink at runtime."""

    def running(self) -> contextlib.AbstractAsyncContextManager[Any]: ...

    def add(self, streams: Iterable[str]) -> None: ...

    def remove(self, streams: Iterable[str]) -> None: ...

    def status(self) -> list[dict[str, Any]]: ...

    def stream_error(self, stream: str) -> LastError | None:
        """Why ``stream`` is not connected (HTTP status, the exchange's message), or None."""
        ...


class SymbolCatalogue(Protocol):
    """The markets a feed's exchange lists."""

    async def check(self, symbol: str) -> str | None:
        """None if ``symbol`` is listed, else a message saying so (naming close matches)."""
        ...
