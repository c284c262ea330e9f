"""Keeping each followed window in step with the exchange: stream updates plus REST backfill.

:class:`WindowSync` is the stream sink.  A window is *synced* when its stream is live and a
backfill has completed since the stream (re)connected.  While unsynced, closed bars from
the stream are held back and applied after the backfill, in order, so the window only ever
grows contiguously.  A gap seen on the stream triggers another backfill.  Open klines and
ticks flow at all times.  A failing backfill's last error stays in
``scheduler.errors[key]`` until one succeeds (readiness names it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import structlog

from engine.events import BarClosed, EventBus, Tick
from engine.feed.backfill import BackfillScheduler, KlineRest, ServerClock, fetch_closed
from engine.feed.health import DEFAULT_REFUSED_BACKOFF_S
from engine.feed.messages import KlineUpdate, stream_name
from engine.market_data.intervals import to_binance
from engine.windows import Applied, OpenKline, RollingWindow

log = structlog.get_logger(__name__)

Key = tuple[str, str]
MAX_BACKFILL_EVENTS = 50


def window_key(symbol: str, interval: str) -> Key:
    """The engine's key for a market: upper-case symbol, Binance interval spelling."""
    return symbol.upper(), to_binance(interval)


@dataclass(slots=True)
class WindowState:
    """A window and what the feed knows about it."""

    key: Key
    stream: str
    window: RollingWindow
    synced: bool = False
    warm: bool = False
    live_since: float | None = None
    clock_after: float = 0.0
    generation: int = 0
    pending: list[KlineUpdate] = field(default_factory=list)
    last_update_ms: int = 0
    gaps: int = 0
    backfills: int = 0

    @property
    def stale(self) -> bool:
        return not self.synced or self.live_since is None


class WindowSync:
    """Stream sink + backfill job for every followed window."""

    def __init__(
        self,
        rest: KlineRest,
        bus: EventBus,
        *,
        capacity: int = 1000,
        on_closed: Callable[[Key], None] | None = None,
        rest_max_wait_s: float = 120.0,
        backfill_concurrency: int = 8,
        retry_initial_s: float = 1.0,
        refused_retry_s: float = DEFAULT_REFUSED_BACKOFF_S,
    ) -> None:
        self._rest = rest
        self._bus = bus
        self.capacity = capacity
        self._on_closed = on_closed or (lambda _key: None)
        self._max_wait_s = rest_max_wait_s
        self.clock = ServerClock(rest, max_wait_s=rest_max_wait_s)
        self.priority: dict[Key, int] = {}
        """Markets warmed (and backfilled) before the others — those with armed alerts — with how
        many references asked for it (:meth:`prioritize` / :meth:`deprioritize`)."""
        self.scheduler = BackfillScheduler(
            self._sync,
            concurrency=backfill_concurrency,
            retry_initial_s=retry_initial_s,
            refused_retry_s=refused_retry_s,
            rank=lambda key: 0 if key in self.priority else 1,
        )
        self.windows: dict[Key, WindowState] = {}
        self._by_stream: dict[str, WindowState] = {}
        self.last_prices: dict[str, tuple[float, int]] = {}
        self._changed = asyncio.Event()

    @property
    def request_weight_used(self) -> int | None:
        """REQUEST_WEIGHT used this minute by the REST client the backfills read (None: one without a
        rate gate, as a ccxt adapter)."""
        gate = getattr(self._rest, "gate", None)
        return None if gate is None else int(gate.used_weight)

    # --- membership ----------------------------------------------------------------
    def add(self, symbol: str, interval: str) -> WindowState:
        key = window_key(symbol, interval)
        st = self.windows.get(key)
        if st is None:
            st = WindowState(key, stream_name(*key), RollingWindow(key[0], key[1], self.capacity))
            self.windows[key] = st
            self._by_stream[st.stream] = st
        return st

    def prioritize(self, key: Key) -> None:
        self.priority[key] = self.priority.get(key, 0) + 1

    def deprioritize(self, key: Key) -> None:
        left = self.priority.pop(key, 0) - 1
        if left > 0:
            self.priority[key] = left

    def remove(self, key: Key) -> WindowState | None:
        self.priority.pop(key, None)
        st = self.windows.pop(key, None)
        if st is not None:
            self._by_stream.pop(st.stream, None)
            self.scheduler.cancel(key)
        return st

    def warming(self) -> tuple[int, int]:
        """(warm windows, followed windows)."""
        return sum(1 for st in self.windows.values() if st.warm), len(self.windows)

    # --- waiting (tests, readiness) --------------------------------------------------
    def _pulse(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self) -> None:
        """Return at the next change of any window (bar appended, sync state changed)."""
        await self._changed.wait()

    # --- stream sink -----------------------------------------------------------------
    def on_kline(self, u: KlineUpdate) -> None:
        self.apply_kline(
            u.symbol, u.interval, u.time, u.open, u.high, u.low, u.close, u.volume, u.closed, u.event_time_ms
        )

    def apply_kline(
        self,
        symbol: str,
        interval: str,
        time: int,
        open_: float,
        high: float,
        low: float,
        close: float,
        volume: float,
        closed: bool,
        event_time_ms: int,
    ) -> None:
        """:meth:`on_kline` with the update's fields as arguments (:class:`KlineUpdate`'s order).

        The Binance stream calls this for every message: an open kline (nearly all of them) then
        builds only what it stores and publishes, no :class:`KlineUpdate`."""
        st = self.windows.get((symbol, interval))
        if st is None:
            return
        st.last_update_ms = event_time_ms
        self.last_prices[symbol] = (close, event_time_ms)
        self._bus.publish(Tick(symbol, interval, close, event_time_ms, time))
        if not closed:
            st.window.update_open(OpenKline(time, open_, high, low, close, volume))
            return
        u = KlineUpdate(symbol, interval, time, open_, high, low, close, volume, closed, event_time_ms)
        if not st.synced:
            st.pending.append(u)
            return
        self._apply_stream_bar(st, u)

    def _apply_stream_bar(self, st: WindowState, u: KlineUpdate) -> None:
        res = st.window.apply_closed(u.time, u.open, u.high, u.low, u.close, u.volume)
        if res is Applied.APPENDED:
            self._bus.publish(BarClosed(u.symbol, u.interval, u.time, u.open, u.high, u.low, u.close, u.volume))
            self._on_closed(st.key)
            self._pulse()
        elif res is Applied.GAP:
            st.gaps += 1
            log.warning("stream_gap", symbol=u.symbol, interval=u.interval, last=st.window.last_time, got=u.time)
            self._unsync(st, fresh_clock=True)
            st.pending.append(u)
            self.scheduler.request(st.key)

    def _unsync(self, st: WindowState, *, fresh_clock: bool = False) -> None:
        st.synced = False
        st.generation += 1
        if fresh_clock:
            st.clock_after = asyncio.get_running_loop().time()
        self._pulse()

    def on_streams_live(self, streams: Collection[str]) -> None:
        now = asyncio.get_running_loop().time()
        for name in streams:
            st = self._by_stream.get(name)
            if st is None:
                continue
            st.live_since = now
            self._unsync(st)
            self.scheduler.request(st.key)

    def on_streams_down(self, streams: Collection[str]) -> None:
        for name in streams:
            st = self._by_stream.get(name)
            if st is not None:
                st.live_since = None
                self._unsync(st)

    # --- backfill job ----------------------------------------------------------------
    async def _sync(self, key: Key) -> bool | None:
        st = self.windows.get(key)
        if st is None or st.live_since is None:
            return False  # not followed, or the stream is down: the next "live" requests a sync
        generation = st.generation
        not_before = max(st.live_since, st.clock_after)
        now_ms = await self.clock.now_ms(not_before)
        w = st.window
        after = w.last_time
        kl = await fetch_closed(
            self._rest,
            key[0],
            key[1],
            after=after,
            count=self.capacity,
            server_now_ms=now_ms,
            max_wait_s=self._max_wait_s,
        )
        if self.windows.get(st.key) is not st:
            return None
        st.backfills += 1
        after = w.last_time
        if after is not None and not kl.contiguous and len(kl) and int(kl.times[0]) - after > w.max_step_s:
            log.info("backfill_reset_window", symbol=key[0], interval=key[1], hole_from=after, to=int(kl.times[0]))
            w.clear()
            after = None
        added = w.merge_closed(kl.times, kl.values)
        if added and after is not None and st.warm:
            for i in range(max(0, len(kl) - min(added, MAX_BACKFILL_EVENTS)), len(kl)):
                t = int(kl.times[i])
                if t > after:
                    o, h, lo, c, v = (float(x) for x in kl.values[:, i])
                    self._bus.publish(BarClosed(st.key[0], st.key[1], t, o, h, lo, c, v, backfilled=True))
        applied_pending = self._drain_pending(st)
        if applied_pending is None:
            return None  # a gap remains: another sync was requested with a fresh clock
        if st.generation == generation and st.live_since is not None:
            st.synced = True
            st.warm = True
        if added or applied_pending:
            self._on_closed(st.key)
        self._pulse()
        return None

    def _drain_pending(self, st: WindowState) -> int | None:
        """Apply held-back stream bars in order; None if a gap means another backfill is needed."""
        if not st.pending:
            return 0
        st.pending.sort(key=lambda u: u.time)
        applied = 0
        w = st.window
        for i, u in enumerate(st.pending):
            res = w.apply_closed(u.time, u.open, u.high, u.low, u.close, u.volume)
            if res is Applied.APPENDED:
                applied += 1
                self._bus.publish(BarClosed(u.symbol, u.interval, u.time, u.open, u.high, u.low, u.close, u.volume))
            elif res is Applied.GAP:
                del st.pending[:i]
                st.gaps += 1
                st.clock_after = asyncio.get_running_loop().time()
                self.scheduler.request(st.key)
                if applied:
                    self._on_closed(st.key)
                return None
        st.pending.clear()
        return applied
