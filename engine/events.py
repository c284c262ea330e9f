"""The engine's event bus and the facts it carries: ticks, closed bars, indicator updates.

Events are immutable records.  Each subscriber owns a bounded queue: publishing never
blocks and never waits for a consumer.  When a subscriber falls behind, its oldest events
are dropped and the next thing it reads is a :class:`Lagged` notice saying how many it
missed, so a slow consumer can resynchronise from engine state instead of stalling the feed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import NamedTuple


class Tick(NamedTuple):
    """Any kline update: the latest trade price of ``symbol`` as seen on ``interval``'s stream.

    ``time_ms`` is the exchange's event time; ``bar_time`` the open time (unix seconds) of
    the kline the price belongs to.  A named tuple rather than a frozen dataclass: one is made
    per kline message, and the tuple costs 0.37 µs against 1.0 µs (AMD EPYC), 7 % of the
    ingest path's per-message time; it is just as immutable.
    """

    symbol: str
    interval: str
    price: float
    time_ms: int
    bar_time: int


@dataclass(frozen=True, slots=True)
class BarClosed:
    """A bar that is final and now stored in the window (``time`` = open time, unix seconds).

    ``backfilled`` is true when the bar arrived through a REST backfill after a reconnect
    rather than from the stream.
    """

    symbol: str
    interval: str
    time: int
    open: float
    high: float
    low: float
    close: float
    volume: float
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class IndicatorsUpdated:
    """The engine recomputed the indicators of one window after the bar at ``bar_time`` closed.

    ``indicators`` lists the request keys that were recomputed; ``signals`` the
    ``(indicator key, label)`` pairs confirmed on that newest closed bar, and ``hits`` the
    same signals with the indicator instance's identity (canonical name and params, as
    returned by ``register_indicator``) and the signal's value.
    """

    symbol: str
    interval: str
    bar_time: int
    indicators: tuple[str, ...]
    signals: tuple[tuple[str, str], ...] = ()
    hits: tuple[SignalHit, ...] = ()


@dataclass(frozen=True, slots=True)
class SignalHit:
    """A signal confirmed on the newest closed bar: which indicator instance, which label, its value."""

    request: Hashable
    label: str
    value: float


@dataclass(frozen=True, slots=True)
class Lagged:
    """This subscriber fell behind and ``dropped`` events were discarded (oldest first)."""

    dropped: int


Event = Tick | BarClosed | IndicatorsUpdated | Lagged
EVENT_TYPES: tuple[type, ...] = (Tick, BarClosed, IndicatorsUpdated)


class SubscriptionClosed(Exception):
    """Raised by :meth:`Subscription.get` once the subscription (or the bus) is closed."""


class Subscription:
    """One consumer's bounded view of the bus; iterate it or call :meth:`get`.

    Use as a context manager (``with bus.subscribe(...) as sub:``) so it is removed from
    the bus when the consumer stops.
    """

    __slots__ = ("_closed", "_dropped", "_items", "_maxsize", "_on_close", "_waiter", "kinds", "symbols")

    def __init__(
        self,
        maxsize: int,
        kinds: frozenset[type],
        symbols: frozenset[str] | None,
        on_close: Callable[[Subscription], None] = lambda sub: None,
    ) -> None:
        self._on_close = on_close
        self._items: deque[Event] = deque()
        self._maxsize = maxsize
        self._dropped = 0
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self.kinds = kinds
        self.symbols = symbols

    def offer(self, event: Event) -> None:
        """Queue ``event`` for the reader (the bus's :meth:`EventBus.publish`); full: the oldest is dropped."""
        if len(self._items) >= self._maxsize:
            self._items.popleft()
            self._dropped += 1
        self._items.append(event)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def dropped_pending(self) -> int:
        """Events dropped since the last Lagged notice was read."""
        return self._dropped

    def qsize(self) -> int:
        return len(self._items)

    def get_nowait(self) -> Event | None:
        """The next event (a Lagged notice first if events were dropped), or None if empty."""
        if self._dropped:
            n, self._dropped = self._dropped, 0
            return Lagged(n)
        if self._items:
            return self._items.popleft()
        return None

    async def get(self) -> Event:
        """Wait for the next event; raises SubscriptionClosed after :meth:`close`."""
        while True:
            ev = self.get_nowait()
            if ev is not None:
                return ev
            if self._closed:
                raise SubscriptionClosed
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Stop receiving; a pending :meth:`get` raises SubscriptionClosed once drained."""
        if not self._closed:
            self._closed = True
            self._on_close(self)
            self._wake()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.get()
        except SubscriptionClosed:
            raise StopAsyncIteration from None


class EventBus:
    """Fan-out of engine events to subscribers; :meth:`publish` is synchronous and never blocks."""

    def __init__(self, default_queue_size: int = 10_000) -> None:
        if default_queue_size < 1:
            raise ValueError("default_queue_size must be at least 1")
        self._default_size = default_queue_size
        self._subs: list[Subscription] = []
        self._by_kind: dict[type, tuple[Subscription, ...]] = {k: () for k in EVENT_TYPES}

    def subscribe(
        self,
        kinds: Iterable[type] | None = None,
        *,
        symbols: Iterable[str] | None = None,
        maxsize: int | None = None,
    ) -> Subscription:
        """A new subscription to ``kinds`` (default: all) for ``symbols`` (default: all)."""
        wanted = frozenset(EVENT_TYPES if kinds is None else kinds)
        bad = [k for k in wanted if k not in EVENT_TYPES]
        if bad:
            raise ValueError(f"kinds must be among Tick, BarClosed, IndicatorsUpdated; got {bad}")
        size = self._default_size if maxsize is None else maxsize
        if size < 1:
            raise ValueError("maxsize must be at least 1")
        sym = None if symbols is None else frozenset(s.upper() for s in symbols)
        sub = Subscription(size, wanted, sym, on_close=self._remove)
        self._subs.append(sub)
        self._reindex()
        return sub

    def _remove(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)
            self._reindex()

    def _reindex(self) -> None:
        self._by_kind = {k: tuple(s for s in self._subs if k in s.kinds) for k in EVENT_TYPES}

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def publish(self, event: Tick | BarClosed | IndicatorsUpdated) -> None:
        """Offer ``event`` to every interested subscriber (drop-oldest when one is full)."""
        for sub in self._by_kind[type(event)]:
            if sub.symbols is None or event.symbol in sub.symbols:
                sub.offer(event)

    def close(self) -> None:
        """Close every subscription (their readers see the end of the stream)."""
        for sub in list(self._subs):
            sub.close()
