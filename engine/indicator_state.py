"""Indicator state per window: which indicators the engine keeps, their newest bar, and the caches.

Every followed window keeps the engine's configured indicators (``-p``) plus any instance
(name + params) registered at runtime.  When a bar closes the window is marked dirty; one
worker task serves dirty windows off the ingest path and publishes
:class:`~engine.events.IndicatorsUpdated` with the signals confirmed on the newest bar.

Per closed bar only what alerts need is computed: each indicator's newest line values and
signals — advanced from an O(1) state where the indicator has one (engine.indicators.incremental),
else read off its arrays over the window (engine.indicators.newest, bit-identical to the full
computation); an indicator with neither is computed in full and its result kept.  Full results, summaries and
payload text are built when a client asks, then cached per window until its next bar closes:
results per (indicator, params, bar count), payload text per request
(:meth:`WindowIndicators.payload_text`), so repeated identical reads within a bar cost a lookup.

The worker yields to the event loop every :data:`YIELD_EVERY_S` of work rather than after every
indicator: a yield costs a loop turn (~10 µs here), as much as a whole per-bar indicator.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from engine.bars import Bars
from engine.events import EventBus, IndicatorsUpdated, SignalHit
from engine.indicators.base import ComputeContext
from engine.indicators.incremental import Incremental
from engine.indicators.model import Fill, Histogram, Line, PanelResult
from engine.indicators.newest import Newest, from_result
from engine.indicators.registry import IndicatorRequest
from engine.indicators.runner import compute_requests, compute_sync

log = structlog.get_logger(__name__)

Key = tuple[str, str]
RequestId = tuple[str, Hashable]
ComputeFn = Callable[[IndicatorRequest, Bars, ComputeContext], PanelResult]

YIELD_EVERY_S = 0.002
"""The longest the indicator worker runs between two yields to the event loop (ticks keep flowing)."""

CATCH_UP_BARS = 64
"""Most new bars an incremental state steps through; a longer jump re-seeds it from the window."""

PAYLOADS_PER_WINDOW = 64
"""Distinct payload texts kept per window within one bar (a client varying its request can't grow it)."""


def _freeze(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def request_id(req: IndicatorRequest) -> RequestId:
    """Identity of an indicator instance: canonical name plus validated params (not the alias)."""
    return req.definition.name, _freeze(req.params)


def _tail(y: np.ndarray) -> np.ndarray:
    """The array from its last finite value on (what a summary's ``last_value`` reads)."""
    finite = np.flatnonzero(np.isfinite(y))
    return y[int(finite[-1]) :].copy() if len(finite) else y[:0].copy()


def summary_view(result: PanelResult) -> PanelResult:
    """The part of a result that summaries read: last values, signals, levels, counts.

    The engine cache holds thousands of results; keeping every per-bar array of every
    indicator of every window would cost several hundred MB for 2,000 windows.  Lines and
    histograms keep only their tail from the last finite value, fills only their count;
    dots, levels, profile bars, divergences and the y range are kept as they are.
    Charts and series never read the cache: they compute over the window.
    """
    empty = np.zeros(0)
    return PanelResult(
        label=result.label,
        is_overlay=result.is_overlay,
        lines=[Line(_tail(ln.y), ln.color, ln.width, ln.label, ln.dashed) for ln in result.lines],
        fills=[Fill(empty, empty, f.color, f.alpha) for f in result.fills],
        histograms=[Histogram(_tail(h.y), [], h.bottom) for h in result.histograms],
        dots=list(result.dots),
        hlines=list(result.hlines),
        hbars=list(result.hbars),
        divlines=list(result.divlines),
        y_range=result.y_range,
    )


@dataclass(frozen=True, slots=True)
class CachedResult:
    """An indicator result (its summary view) over the newest ``n`` closed bars ending at ``last_time``.

    The bars themselves are not kept (the window can reproduce them while ``last_time``
    is its newest bar), which keeps memory per window small.
    """

    result: PanelResult
    n: int
    last_time: int | None


def _first_new(times: np.ndarray, consumed: int | None) -> int | None:
    """Index of the first bar after ``consumed`` when that bar is among the newest
    :data:`CATCH_UP_BARS` + 1 of ``times``; None when it is not (the state must be re-seeded)."""
    if consumed is None:
        return None
    n = len(times)
    for j in range(n - 2, max(-1, n - 2 - CATCH_UP_BARS), -1):
        t = int(times[j])
        if t == consumed:
            return j + 1
        if t < consumed:
            return None
    return None


class WindowIndicators:
    """Registered indicator instances, their newest bar, and cached results and payloads of one window."""

    __slots__ = ("_last_time", "_payloads", "_results", "newest", "requests", "states")

    def __init__(self, defaults: Sequence[IndicatorRequest] = ()) -> None:
        self.requests: dict[RequestId, IndicatorRequest] = {}
        self._results: dict[tuple[RequestId, int], CachedResult] = {}
        self._payloads: dict[Hashable, str] = {}
        self._last_time: int | None = None
        self.newest: dict[RequestId, Newest] = {}
        """Each registered instance's newest line values and signals, as of the last closed bar served."""
        self.states: dict[RequestId, tuple[Incremental, int | None]] = {}
        """Incremental states and the open time of the bar each last consumed."""
        for req in defaults:
            self.register(req)

    def _at(self, last_time: int | None) -> None:
        if last_time != self._last_time:
            self._results.clear()  # results and payloads of older bars are worthless
            self._payloads.clear()
            self._last_time = last_time

    def payload_text(self, key: Hashable, last_time: int | None) -> str | None:
        """The payload text cached under ``key`` for the bar ending at ``last_time``."""
        return self._payloads.get(key) if last_time == self._last_time else None

    def store_payload(self, key: Hashable, last_time: int | None, text: str) -> None:
        self._at(last_time)
        if len(self._payloads) >= PAYLOADS_PER_WINDOW:
            self._payloads.pop(next(iter(self._payloads)))
        self._payloads[key] = text

    def register(self, req: IndicatorRequest) -> RequestId:
        rid = request_id(req)
        self.requests.setdefault(rid, req)
        return rid

    def unregister(self, rid: RequestId) -> None:
        self.requests.pop(rid, None)
        self.newest.pop(rid, None)
        self.states.pop(rid, None)

    def lookup(self, req: IndicatorRequest, n: int, last_time: int | None) -> CachedResult | None:
        if last_time != self._last_time:
            return None
        return self._results.get((request_id(req), n))

    def store(self, req: IndicatorRequest, cached: CachedResult) -> None:
        self._at(cached.last_time)
        self._results[(request_id(req), cached.n)] = cached


class IndicatorEngine:
    """Recomputes indicators of windows whose bars closed, in one background worker."""

    def __init__(
        self,
        bars_of: Callable[[Key], Bars | None],
        bus: EventBus,
        *,
        defaults: Sequence[IndicatorRequest] = (),
        compute: ComputeFn | None = None,
        external_sources: Any = None,
    ) -> None:
        self._bars_of = bars_of
        self._bus = bus
        self.defaults = list(defaults)
        self._compute_fn: ComputeFn = compute or compute_sync
        self._sources = external_sources
        self.windows: dict[Key, WindowIndicators] = {}
        self._dirty: dict[Key, None] = {}
        self._wake = asyncio.Event()
        self.updates = 0
        self.errors = 0

    def add_window(self, key: Key) -> WindowIndicators:
        wi = self.windows.get(key)
        if wi is None:
            wi = self.windows[key] = WindowIndicators(self.defaults)
        return wi

    def remove_window(self, key: Key) -> None:
        self.windows.pop(key, None)
        self._dirty.pop(key, None)

    def register(self, key: Key, req: IndicatorRequest) -> RequestId:
        """Keep ``req`` up to date for window ``key`` from now on (computed at the next close)."""
        rid = self.add_window(key).register(req)
        self.mark_dirty(key)
        return rid

    def mark_dirty(self, key: Key) -> None:
        """A bar closed in ``key`` (cheap; the worker does the work)."""
        if key in self.windows:
            self._dirty[key] = None
            self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._dirty)

    async def compute_one(self, key: Key, req: IndicatorRequest, bars: Bars) -> PanelResult:
        """One indicator over ``bars`` (external ones fetch their data first)."""
        if req.definition.fetch is not None:
            pairs = await compute_requests([req], bars, symbol=key[0], interval=key[1], sources=self._sources)
            return pairs[0][1]
        return self._compute_fn(req, bars, ComputeContext(symbol=key[0], interval=key[1]))

    async def run(self) -> None:
        """Serve dirty windows until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            since_yield = time.perf_counter()
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                await self._update(key)
                now = time.perf_counter()
                if now - since_yield >= YIELD_EVERY_S:
                    await asyncio.sleep(0)
                    since_yield = time.perf_counter()

    async def _newest(
        self, key: Key, wi: WindowIndicators, rid: RequestId, req: IndicatorRequest, bars: Bars
    ) -> tuple[Newest, PanelResult | None]:
        """The newest bar of one indicator, and its full result when that had to be computed.

        An incremental state steps through the bars the window gained after the one it last
        consumed (several when closes of a window arrived together, up to :data:`CATCH_UP_BARS`);
        otherwise (first use, a longer backfill, a cleared window) it is seeded again from the
        window."""
        d = req.definition
        if d.incremental is not None and bars.times is not None:
            times = bars.times
            newest_time = int(times[-1])
            held = wi.states.get(rid)
            if held is not None and held[1] == newest_time and rid in wi.newest:
                return wi.newest[rid], None  # this bar was consumed already (a re-registration woke the window)
            first = _first_new(times, held[1]) if held is not None and held[0].ready else None
            if first is not None and held is not None:  # (first is None without held)
                state = held[0]
                o, h, lo, c, v = bars.open, bars.high, bars.low, bars.close, bars.volume
                for i in range(first, len(bars)):
                    newest = state.step(float(o[i]), float(h[i]), float(lo[i]), float(c[i]), float(v[i]))
            else:
                state = d.incremental(req.params)
                newest = state.seed(bars)
            wi.states[rid] = (state, newest_time)
            return newest, None
        if d.newest is not None and d.fetch is None:
            return d.newest(bars, req.params), None
        result = await self.compute_one(key, req, bars)
        return from_result(result, bars), result

    async def _update(self, key: Key) -> None:
        wi = self.windows.get(key)
        bars = self._bars_of(key)
        if wi is None or bars is None or len(bars) == 0:
            return
        last = bars.time_of(len(bars) - 1)
        names: list[str] = []
        signals: list[tuple[str, str]] = []
        hits: list[SignalHit] = []
        for rid, req in list(wi.requests.items()):
            try:
                newest, result = await self._newest(key, wi, rid, req, bars)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one broken indicator must not stop the others
                self.errors += 1
                log.error("engine_indicator_failed", symbol=key[0], interval=key[1], indicator=req.key, error=str(exc))
                continue
            if self.windows.get(key) is not wi:
                return
            if result is not None:
                wi.store(req, CachedResult(summary_view(result), len(bars), last))
            wi.newest[rid] = newest
            names.append(req.key)
            for label, value in newest.signals:
                signals.append((req.key, label))
                hits.append(SignalHit(rid, label, value))
        self.updates += 1
        if last is not None:
            self._bus.publish(IndicatorsUpdated(key[0], key[1], last, tuple(names), tuple(signals), tuple(hits)))

    async def results_for(
        self, key: Key, requests: Sequence[IndicatorRequest], bars: Bars
    ) -> list[tuple[IndicatorRequest, PanelResult]]:
        """Summary views of results over ``bars`` from the cache, computing (and caching) what is missing."""
        wi = self.windows.get(key)
        last = bars.time_of(len(bars) - 1) if len(bars) else None
        out: list[tuple[IndicatorRequest, PanelResult]] = []
        for req in requests:
            cached = None if wi is None else wi.lookup(req, len(bars), last)
            if cached is None:
                cached = CachedResult(summary_view(await self.compute_one(key, req, bars)), len(bars), last)
                if wi is not None and self.windows.get(key) is wi:
                    wi.store(req, cached)
            out.append((req, cached.result))
        return out
