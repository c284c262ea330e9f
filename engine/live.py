"""The live market engine: followed windows, the stream feed, indicator state and the event bus.

:class:`LiveEngine` is the one object other packages use.  It runs inside
:meth:`LiveEngine.running` (an async context manager owning a TaskGroup with the stream
connections, the backfill workers and the indicator worker).  Markets can be followed
and unfollowed at any time; following is reference-counted so an alert's temporary
interest never removes a market the configuration asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from engine.bars import Bars
from engine.charts.jsonout import pretty
from engine.charts.summary import indicators_payload
from engine.events import EventBus, Subscription
from engine.feed.backfill import KlineRest
from engine.feed.health import LastError
from engine.feed.protocol import MarketFeed, StreamSink, SymbolCatalogue
from engine.feed.stream_manager import StreamManager
from engine.feed.stream_settings import StreamSettings
from engine.feed.sync import Key, WindowState, WindowSync, window_key
from engine.indicator_state import ComputeFn, IndicatorEngine, RequestId, request_id
from engine.indicators.registry import IndicatorRequest
from engine.indicators.warmup import shown_part, warmup_of

log = structlog.get_logger(__name__)

READINESS_MARKETS = 20
"""Markets named one by one in the readiness reasons; the rest are counted."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Tuning of the live engine (the daemon builds it from settings)."""

    window_bars: int = 1000
    streams: StreamSettings = field(default_factory=StreamSettings)
    backfill_concurrency: int = 32
    rest_max_wait_s: float = 120.0
    retry_initial_s: float = 1.0
    summary_signals: int = 20
    bus_queue_size: int = 10_000

    def __post_init__(self) -> None:
        if not 1 <= self.window_bars <= 100_000:
            raise ValueError("window_bars must be between 1 and 100000 (e.g. 1000)")


class LiveEngine:
    """Rolling windows of many (symbol, interval) markets, kept live from the exchange."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        rest: KlineRest,
        stream_url: str,
        indicators: Sequence[IndicatorRequest] = (),
        config: EngineConfig | None = None,
        compute: ComputeFn | None = None,
        external_sources: Any = None,
        rng: random.Random | None = None,
        feed: Callable[[StreamSink], MarketFeed] | None = None,
        catalogue: SymbolCatalogue | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.bus = EventBus(self.config.bus_queue_size)
        self.indicators = IndicatorEngine(
            self._closed_bars, self.bus, defaults=indicators, compute=compute, external_sources=external_sources
        )
        self.sync = WindowSync(
            rest,
            self.bus,
            capacity=self.config.window_bars,
            on_closed=self.indicators.mark_dirty,
            rest_max_wait_s=self.config.rest_max_wait_s,
            backfill_concurrency=self.config.backfill_concurrency,
            retry_initial_s=self.config.retry_initial_s,
            refused_retry_s=self.config.streams.refused_backoff_s,
        )
        self.streams: MarketFeed = (
            feed(self.sync)
            if feed is not None
            else StreamManager(session, stream_url, self.sync, self.config.streams, rng=rng)
        )
        self.catalogue = catalogue
        """The feed's own symbol list when it is not Binance's (None: use Binance exchangeInfo)."""
        self._refs: dict[Key, int] = {}
        self._running = False

    # --- lifecycle -------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LiveEngine]:
        """Connect, warm up and keep every followed window live until the block exits."""
        if self._running:
            raise RuntimeError("LiveEngine is already running")
        self._running = True
        log.info("engine_start", windows=len(self._refs), window_bars=self.config.window_bars)
        try:
            async with asyncio.TaskGroup() as tg:
                backfill = tg.create_task(self.sync.scheduler.run(), name="engine-backfill")
                worker = tg.create_task(self.indicators.run(), name="engine-indicators")
                try:
                    async with self.streams.running():
                        yield self
                finally:
                    backfill.cancel()
                    worker.cancel()
        finally:
            self._running = False
            self.bus.close()
            log.info("engine_stopped")

    # --- markets ---------------------------------------------------------------------
    def follow(self, symbol: str, interval: str, *, priority: bool = False) -> Key:
        """Follow a market (idempotent, reference-counted); warm-up starts once its stream is live.

        ``priority`` (an armed alert needs the market): its warm-up and backfills go before
        those of markets followed only for charts; counted apart, released by ``unfollow(priority=True)``.
        """
        key = window_key(symbol, interval)
        n = self._refs.get(key, 0)
        self._refs[key] = n + 1
        if priority:
            self.sync.prioritize(key)
        if n == 0:
            st = self.sync.add(*key)
            self.indicators.add_window(key)
            self.streams.add([st.stream])
            log.debug("engine_follow", symbol=key[0], interval=key[1])
        return key

    def unfollow(self, symbol: str, interval: str, *, priority: bool = False) -> None:
        """Drop one reference; the market is removed when none is left."""
        key = window_key(symbol, interval)
        if priority:
            self.sync.deprioritize(key)
        n = self._refs.get(key, 0)
        if n <= 1:
            self._refs.pop(key, None)
            st = self.sync.remove(key)
            self.indicators.remove_window(key)
            if st is not None:
                self.streams.remove([st.stream])
                log.info("engine_unfollow", symbol=key[0], interval=key[1])
        else:
            self._refs[key] = n - 1

    def follows(self, symbol: str, interval: str) -> bool:
        try:
            return window_key(symbol, interval) in self._refs
        except Exception:  # noqa: BLE001 - an unknown interval is simply not followed
            return False

    @property
    def markets(self) -> list[Key]:
        return list(self._refs)

    def register_indicator(self, symbol: str, interval: str, request: IndicatorRequest) -> RequestId:
        """Keep ``request`` (name + params) updated on every close of a followed market."""
        key = window_key(symbol, interval)
        if key not in self._refs:
            raise KeyError(f"{key[0]} {key[1]} is not followed; call follow() first")
        return self.indicators.register(key, request)

    # --- reads -----------------------------------------------------------------------
    def _state(self, symbol: str, interval: str) -> WindowState | None:
        try:
            return self.sync.windows.get(window_key(symbol, interval))
        except Exception:  # noqa: BLE001 - an interval Binance does not have is never followed
            return None

    def _closed_bars(self, key: Key) -> Bars | None:
        st = self.sync.windows.get(key)
        return None if st is None else st.window.bars()

    def window_bars(
        self, symbol: str, interval: str, n: int | None = None, *, include_open: bool = False
    ) -> Bars | None:
        """The newest ``n`` closed bars (plus the forming one if asked), or None if not followed."""
        st = self._state(symbol, interval)
        return None if st is None else st.window.bars(n, include_open=include_open)

    def last_price(self, symbol: str) -> float | None:
        """The latest price seen on any followed stream of ``symbol``."""
        p = self.sync.last_prices.get(symbol.upper())
        return None if p is None else p[0]

    def exchange_time_ms(self, symbol: str) -> int | None:
        """The exchange's event time of the latest update seen for ``symbol`` (its clock, not ours)."""
        p = self.sync.last_prices.get(symbol.upper())
        return None if p is None else p[1]

    def _filled(self, symbol: str, interval: str) -> WindowState | None:
        """The market's window state when it is followed and holds at least one closed bar."""
        st = self._state(symbol, interval)
        return None if st is None or len(st.window) == 0 else st

    def is_stale(self, symbol: str, interval: str) -> bool:
        st = self._state(symbol, interval)
        return st is None or st.stale

    async def indicator_payload(
        self,
        symbol: str,
        interval: str,
        requests: Sequence[IndicatorRequest],
        *,
        bars: int | None = None,
        all_signals: bool = False,
    ) -> dict[str, Any] | None:
        """The get_indicators payload from the engine, or None if the market is not followed or empty.

        Cached results are used where the engine keeps them; anything else is computed now
        over the window (no REST call).  With ``bars`` each indicator is computed over its
        warm-up (engine.indicators.warmup) plus those bars, as far as the window reaches, and
        cut to the newest ``bars``; without, over the whole window.
        """
        st = self._filled(symbol, interval)
        if st is None:
            return None
        return await self._indicator_payload(st, symbol, interval, requests, bars, all_signals)

    async def indicator_text(
        self,
        symbol: str,
        interval: str,
        requests: Sequence[IndicatorRequest],
        *,
        bars: int | None = None,
        all_signals: bool = False,
    ) -> str | None:
        """:meth:`indicator_payload` as the tool's JSON text, cached per request until the window's next bar.

        The key holds everything the text depends on: the names as asked, the instances
        (params), ``bars``, ``all_signals``, the newest closed bar and whether the window is stale.
        """
        st = self._filled(symbol, interval)
        if st is None:
            return None
        wi = self.indicators.windows.get(st.key)
        last = st.window.last_time
        key = (symbol, interval, tuple((r.key, request_id(r)) for r in requests), bars, all_signals, st.stale)
        if wi is not None:
            cached = wi.payload_text(key, last)
            if cached is not None:
                return cached
        text = pretty(await self._indicator_payload(st, symbol, interval, requests, bars, all_signals))
        if wi is not None and self.indicators.windows.get(st.key) is wi and st.window.last_time == last:
            wi.store_payload(key, last, text)
        return text

    async def _indicator_payload(
        self,
        st: WindowState,
        symbol: str,
        interval: str,
        requests: Sequence[IndicatorRequest],
        bars: int | None,
        all_signals: bool,
    ) -> dict[str, Any]:
        data = st.window.bars(bars)
        inputs: dict[int | None, Bars] = {}
        results = []
        for req in requests:
            n = None if bars is None else bars + warmup_of(req, interval)
            inp = inputs.get(n)
            if inp is None:
                inp = inputs[n] = st.window.bars(n)
            [(_, result)] = await self.indicators.results_for(st.key, [req], inp)
            results.append((req, shown_part(result, len(inp), len(data))))
        return indicators_payload(
            data,
            [(req.key, result) for req, result in results],
            symbol=symbol,
            interval=interval,
            source="engine_cache",
            max_signals=self.config.summary_signals,
            all_signals=all_signals,
            warmup_bars=max((len(b) - len(data) for b in inputs.values()), default=0),
            extra={"last_bar_time": data.time_of(len(data) - 1), "stale": st.stale},
        )

    def subscribe(
        self, kinds: Iterable[type] | None = None, *, symbols: Iterable[str] | None = None, maxsize: int | None = None
    ) -> Subscription:
        """A bounded subscription to engine events (see engine.events)."""
        return self.bus.subscribe(kinds, symbols=symbols, maxsize=maxsize)

    # --- health ----------------------------------------------------------------------
    def _errors(self, st: WindowState) -> tuple[LastError | None, LastError | None]:
        """(stream error, backfill error) of a window: why it is not live or not filled, if known."""
        stream = None if st.live_since is not None else self.streams.stream_error(st.stream)
        return stream, self.sync.scheduler.errors.get(st.key)

    def _reason(self, st: WindowState) -> str | None:
        """Why one window is not ready, naming the last errors (None when it is ready)."""
        stream_err, backfill_err = self._errors(st)
        parts: list[str] = []
        if backfill_err is not None:
            parts.append(f"{'backfill' if st.warm else 'warm-up'} failed: {backfill_err.message}")
        if st.live_since is None:
            down = "stream not connected" if stream_err is None else f"stream: {stream_err.message}"
            parts.append(down)
        elif not parts and not st.warm:
            parts.append("warming up")
        elif not parts and not st.synced:
            parts.append("backfilling after reconnect")
        if not parts:
            return None
        refused = next((e for e in (backfill_err, stream_err) if e is not None and e.refused), None)
        advice = "" if refused is None else refused.advice()
        return f"{st.key[0]} {st.key[1]}: {'; '.join(parts)}{advice}"

    def readiness(self) -> tuple[bool, list[str]]:
        """(ready, reasons): ready when every followed market is live, warm and in sync.

        With more than one market, the first reason while some are not warm is the warm-up's
        progress (``warming 730/1000``).  Then a reason per market (the first
        :data:`READINESS_MARKETS`, then how many more) names the market, what is missing and
        the last error of its warm-up or backfill and of its stream connection (HTTP status,
        the exchange's message), e.g. ``BTCUSDT 1h: warm-up failed: HTTP 451 from
        api.binance.com: Service unavailable from a restricted location …; stream: HTTP 451 on
        websocket handshake to stream.binance.com:9443 — the exchange refuses this location or
        IP address: …``.  Errors clear on recovery.
        """
        reasons: list[str] = []
        behind = 0
        for st in self.sync.windows.values():
            if st.live_since is None or not st.warm or not st.synced:
                if len(reasons) >= READINESS_MARKETS:
                    behind += 1
                    continue
                reason = self._reason(st)
                if reason is not None:
                    reasons.append(reason)
        if behind:
            reasons.append(f"… and {behind} more markets not ready")
        warm, total = self.sync.warming()
        if total > 1 and warm < total:
            reasons.insert(0, f"warming {warm}/{total}")
        if not self._running:
            reasons.insert(0, "engine not running")
        return not reasons, reasons

    def status(self) -> dict[str, Any]:
        ready, reasons = self.readiness()
        return {
            "ready": ready,
            "reasons": reasons,
            "markets": [
                {
                    "symbol": key[0],
                    "interval": key[1],
                    "bars": len(st.window),
                    "last_bar_time": st.window.last_time,
                    "live": st.live_since is not None,
                    "synced": st.synced,
                    "warm": st.warm,
                    "gaps": st.gaps,
                    "backfills": st.backfills,
                    "stream_error": None if stream_err is None else stream_err.as_dict(),
                    "backfill_error": None if backfill_err is None else backfill_err.as_dict(),
                }
                for key, st in self.sync.windows.items()
                for stream_err, backfill_err in [self._errors(st)]
            ],
            "connections": self.streams.status(),
            "backfill_pending": self.sync.scheduler.pending(),
            "indicator_backlog": self.indicators.backlog,
            "subscribers": self.bus.subscriber_count,
        }

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds, re-checking whenever a window changes (wrap in a timeout)."""
        while not predicate():
            await self.sync.wait_changed()

    async def wait_ready(self) -> None:
        """Wait until :meth:`readiness` is true (wrap in a timeout)."""
        await self.wait_until(lambda: self.readiness()[0])
