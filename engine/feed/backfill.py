"""REST backfill: the closed klines a window is missing, and a scheduler that fetches them.

A kline is taken as closed only when its close time lies before the exchange's clock as
read *after* the stream was (re)connected: anything that closes later is delivered by the
live stream, so nothing falls between the two sources and no open candle is stored.
Requests go through the shared :class:`~engine.market_data.rate_gate.RateGate`, so the
weight budget and Retry-After bans hold for every caller; failures are retried with
backoff until the job succeeds or the window is no longer followed.  The last failure of
each key is kept (:attr:`BackfillScheduler.errors`) until the key's job succeeds; after an
HTTP 451/403 refusal the retry waits minutes, unless the key is requested again meanwhile
(its stream reconnected), which retries at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
import structlog

from engine.feed.health import DEFAULT_REFUSED_BACKOFF_S, LastError, from_exception, log_refusal, retry_delay
from engine.market_data.binance_rest import KLINES_MAX_LIMIT, KlineRow
from engine.market_data.errors import MarketDataError, RateLimited
from engine.market_data.intervals import interval_seconds, to_binance

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ClosedKlines:
    """Closed klines, ascending: open times (unix seconds) and a ``(5, n)`` OHLCV array."""

    times: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    contiguous: bool = True
    """False when only the newest bars were fetched because more were missing than wanted."""

    def __len__(self) -> int:
        return len(self.times)


def rows_to_closed(rows: list[KlineRow], server_now_ms: int) -> ClosedKlines:
    """Keep the rows whose close time is before ``server_now_ms``; sort and de-duplicate by open time."""
    try:
        kept = [r for r in rows if int(r[6]) < server_now_ms]
        if not kept:
            return ClosedKlines(np.zeros(0, dtype=np.int64), np.zeros((5, 0), dtype=np.float64))
        times = np.fromiter((int(r[0]) // 1000 for r in kept), dtype=np.int64, count=len(kept))
        values = np.array([[r[1], r[2], r[3], r[4], r[5]] for r in kept], dtype=np.float64).T
    except (TypeError, ValueError, IndexError) as exc:
        raise MarketDataError(f"Binance kline rows are malformed: {exc}") from exc
    _, first = np.unique(times, return_index=True)  # sorted unique open times
    if len(first) != len(times) or not (np.diff(times) > 0).all():
        times, values = times[first], values[:, first]
    return ClosedKlines(np.ascontiguousarray(times), np.ascontiguousarray(values))


class KlineRest(Protocol):
    """Where backfills read the exchange's clock and klines (Binance REST, or a ccxt adapter).

    ``klines`` follows Binance's semantics: open times from ``start_ms`` to ``end_ms``
    inclusive, at most ``limit`` rows, the newest ones when only ``end_ms`` is given; rows
    are Binance's 12-element kline rows (at least the first seven elements).
    """

    async def server_time_ms(self, *, max_wait_s: float | None = None) -> int: ...

    async def klines(
        self,
        symbol: str,
        interval: str,
        *,
        limit: int = 500,
        start_ms: int | None = None,
        end_ms: int | None = None,
        max_wait_s: float | None = None,
    ) -> list[KlineRow]: ...


class ServerClock:
    """The exchange's clock read over REST, shared by concurrent backfills.

    :meth:`now_ms` returns a reading taken no earlier than ``not_before`` (a loop time);
    callers that need a reading after the same reconnect share one request.
    """

    def __init__(self, rest: KlineRest, *, max_wait_s: float = 120.0) -> None:
        self._rest = rest
        self._max_wait_s = max_wait_s
        self._reading: tuple[float, int] | None = None  # (loop time the request started, server ms)
        self._lock = asyncio.Lock()

    async def now_ms(self, not_before: float) -> int:
        async with self._lock:
            r = self._reading
            if r is not None and r[0] >= not_before:
                return r[1]
            started = asyncio.get_running_loop().time()
            server_ms = await self._rest.server_time_ms(max_wait_s=self._max_wait_s)
            self._reading = (started, server_ms)
            return server_ms


async def fetch_closed(
    rest: KlineRest,
    symbol: str,
    interval: str,
    *,
    after: int | None,
    count: int,
    server_now_ms: int,
    max_wait_s: float = 120.0,
) -> ClosedKlines:
    """Closed klines of ``symbol``/``interval`` known to the exchange at ``server_now_ms``.

    ``after`` is the open time (unix seconds) of the newest bar already held: only newer
    bars are fetched (paging forward).  With ``after=None``, or when more than ``count``
    bars are missing, the newest ``count`` closed bars are fetched instead (paging back).
    """
    name = to_binance(interval)
    step_ms = interval_seconds(name) * 1000
    # open times up to end_ms belong to klines that closed before server_now_ms
    end_ms = server_now_ms - 1 if name == "1M" else server_now_ms - step_ms
    if after is not None and (end_ms - after * 1000) // step_ms <= count:
        rows: list[KlineRow] = []
        start_ms = after * 1000 + (1 if name == "1M" else step_ms)
        while start_ms <= end_ms:
            page = await rest.klines(
                symbol, name, limit=KLINES_MAX_LIMIT, start_ms=start_ms, end_ms=end_ms, max_wait_s=max_wait_s
            )
            rows.extend(page)
            if len(page) < KLINES_MAX_LIMIT:
                break
            start_ms = int(page[-1][0]) + 1
        return rows_to_closed(rows, server_now_ms)
    rows = []
    before_ms = end_ms
    while len(rows) < count:
        need = min(count - len(rows), KLINES_MAX_LIMIT)
        page = await rest.klines(symbol, name, limit=need, end_ms=before_ms, max_wait_s=max_wait_s)
        page = [r for r in page if int(r[0]) <= before_ms]
        rows = page + rows
        if len(page) < need:
            break
        before_ms = int(page[0][0]) - 1
    out = rows_to_closed(rows, server_now_ms)
    times, values = (out.times[-count:], out.values[:, -count:]) if len(out) > count else (out.times, out.values)
    return ClosedKlines(times, values, contiguous=after is None)


K = TypeVar("K", bound=Hashable)
"""The scheduler's key type (the engine's ``(symbol, interval)``)."""

SyncJob = Callable[[K], Awaitable[bool | None]]
"""A key's job; it returns False when it had nothing to do yet (the key's last error then stays)."""


class BackfillScheduler(Generic[K]):
    """Runs one sync job per key at a time, ``concurrency`` at once, retrying failures with backoff.

    :meth:`request` is synchronous and idempotent: a key already queued is not queued
    twice; a key requested while its job runs is run once more afterwards.  Queued keys are
    served by ``rank`` (lower first: the engine ranks markets with armed alerts 0), then in
    the order they were requested.  How many run at once is ``concurrency``; how fast they
    reach the exchange is the shared weight gate's decision, so a high concurrency never
    spends more than the budget.
    """

    def __init__(
        self,
        job: SyncJob[K],
        *,
        concurrency: int = 8,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
        refused_retry_s: float = DEFAULT_REFUSED_BACKOFF_S,
        rng: random.Random | None = None,
        rank: Callable[[K], int] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("backfill concurrency must be at least 1")
        self._job = job
        self._rank = rank or (lambda _key: 1)
        self._seq = 0
        self._concurrency = concurrency
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._refused_retry_s = refused_retry_s
        self._rng = rng or random.Random()
        self.errors: dict[K, LastError] = {}
        """The last failure of each key whose job has not succeeded since."""
        self._waiting: dict[K, asyncio.Event] = {}
        self._queue: asyncio.PriorityQueue[tuple[int, int, K]] = asyncio.PriorityQueue()
        self._queued: set[K] = set()
        self._running: set[K] = set()
        self._again: set[K] = set()
        self._cancelled: set[K] = set()
        self.failures = 0
        self.completed = 0

    def request(self, key: K) -> None:
        self._cancelled.discard(key)
        if key in self._running:
            self._again.add(key)
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.set()  # asked again while waiting to retry: retry now
        elif key not in self._queued:
            self._queued.add(key)
            self._seq += 1
            self._queue.put_nowait((self._rank(key), self._seq, key))

    def cancel(self, key: K) -> None:
        """Forget ``key`` (it is no longer followed); a running job finishes its current attempt."""
        self._cancelled.add(key)
        self._again.discard(key)
        self.errors.pop(key, None)
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.set()

    def pending(self) -> int:
        return len(self._queued) + len(self._running)

    async def run(self) -> None:
        """Serve jobs until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for i in range(self._concurrency):
                tg.create_task(self._worker(), name=f"backfill-{i}")

    async def _worker(self) -> None:
        while True:
            _, _, key = await self._queue.get()
            self._queued.discard(key)
            if key in self._cancelled:
                continue
            self._running.add(key)
            try:
                await self._run_with_retry(key)
            finally:
                self._running.discard(key)
            if key in self._again and key not in self._cancelled:
                self._again.discard(key)
                self.request(key)

    async def _run_with_retry(self, key: K) -> None:
        attempt = 0
        while key not in self._cancelled:
            try:
                if await self._job(key) is not False:
                    self.errors.pop(key, None)
                self.completed += 1
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                error = from_exception(exc)
                delay = retry_delay(
                    attempt,
                    initial_s=self._retry_initial_s,
                    max_s=self._retry_max_s,
                    rng=self._rng,
                    refused=error.refused,
                    refused_s=self._refused_retry_s,
                )
                if isinstance(exc, RateLimited):
                    delay = max(delay, exc.retry_after_s)
                attempt = min(attempt + 1, 30)
                if key not in self._cancelled:
                    self.errors[key] = error.scheduled(delay)
                if error.refused:
                    log_refusal("backfill_refused", error, delay, key=str(key))
                elif isinstance(exc, MarketDataError):
                    log.warning("backfill_failed", key=str(key), error=str(exc), retry_in_s=round(delay, 2))
                else:
                    log.exception("backfill_crashed", key=str(key), retry_in_s=round(delay, 2))
                if isinstance(exc, RateLimited):
                    await asyncio.sleep(delay)  # never sooner than the exchange's Retry-After
                else:
                    await self._wait_retry(key, delay)

    async def _wait_retry(self, key: K, delay: float) -> None:
        """Sleep ``delay`` s before retrying ``key``, or less if it is requested (or cancelled) meanwhile."""
        waiting = self._waiting[key] = asyncio.Event()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting.wait(), delay)
        finally:
            self._waiting.pop(key, None)
        if waiting.is_set():
            self._again.discard(key)  # the retry starting now serves that request
