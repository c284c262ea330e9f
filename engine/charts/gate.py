"""Fair admission to the render pool: per-client limits, bounded queues, round-robin between clients.

Every PNG render and series payload runs on one of the pool's ``slots`` worker processes.
Handing jobs straight to a ``ProcessPoolExecutor`` queues them first-in first-out over all
clients, so one client sending many large charts delays every other client's chart by the
whole backlog.  :class:`RenderGate` is the only queue in front of the pool instead:

- a client (a *key*: the principal, ``None`` for unauthenticated callers) holds at most
  ``per_key`` slots at once, and at most ``slots - 1`` when the pool has several workers
  (``reserve``), so another client always finds a worker free or freed by the next job;
- the rest of its jobs wait in its own FIFO, at most ``max_queued`` of them; one more is
  refused at once with :class:`RenderBusy` (which carries a retry hint);
- a freed slot goes to the waiting client served least recently (round-robin over clients;
  a client new to the gate goes first), not to the oldest waiting job, so a client's wait
  does not grow with another client's backlog.

The gate does no I/O and never blocks the loop; it is pure asyncio bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass

DEFAULT_MAX_QUEUED = 16
"""Jobs one client may have waiting (beyond those rendering) before the next is refused."""


class RenderBusy(Exception):
    """A client's render queue is full: the job was refused and nothing was done."""

    def __init__(self, key: Hashable, running: int, queued: int, limit: int, retry_after_s: int) -> None:
        self.key = key
        self.running = running
        self.queued = queued
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(
            f"too many charts in progress for this client: {running} rendering and {queued} waiting, the most "
            f"allowed (a client renders at most {limit} at a time, set by max_renders_per_principal and "
            f"render_workers); retry in about {retry_after_s} s, once your earlier charts are answered"
        )


@dataclass(frozen=True, slots=True)
class GateStats:
    """A snapshot of the gate (for metrics and tests)."""

    busy: int
    running: dict[Hashable, int]
    queued: dict[Hashable, int]


class RenderGate:
    """Admits jobs to ``slots`` workers: per-client limits, bounded per-client queues, round-robin."""

    def __init__(
        self, slots: int, *, per_key: int = 2, max_queued: int = DEFAULT_MAX_QUEUED, reserve: bool = True
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if per_key < 1:
            raise ValueError(f"per_key must be at least 1, got {per_key}")
        if max_queued < 0:
            raise ValueError(f"max_queued must be 0 or more, got {max_queued}")
        self.slots = slots
        self.per_key = per_key
        self.cap = min(per_key, slots - 1 if reserve and slots > 1 else slots)
        """Slots one client may hold at once."""
        self.max_queued = max_queued
        self._busy = 0
        self._running: dict[Hashable, int] = {}
        self._waiters: dict[Hashable, deque[asyncio.Future[None]]] = {}
        """Clients with waiting jobs (in arrival order) and their jobs (FIFO)."""
        self._served: dict[Hashable, int] = {}
        """When each active client was last granted a slot (a counter; forgotten once it is idle)."""
        self._tick = 0
        self._job_s = 1.0
        """Moving average of a job's duration (the retry hint's unit)."""

    @contextlib.asynccontextmanager
    async def slot(self, key: Hashable) -> AsyncIterator[None]:
        """Hold one worker slot for ``key`` for the duration of the block (waiting for its turn first).

        Raises :class:`RenderBusy` at once when ``key`` already has ``max_queued`` jobs waiting.
        """
        await self.acquire(key)
        started = time.monotonic()
        try:
            yield
        finally:
            self.release(key, time.monotonic() - started)

    async def acquire(self, key: Hashable) -> None:
        """Wait for a slot for ``key``; pair with :meth:`release`."""
        queue = self._waiters.get(key)
        if not queue and self._busy < self.slots and self._running.get(key, 0) < self.cap:
            self._grant(key)
            return
        if len(queue or ()) >= self.max_queued:
            raise RenderBusy(key, self._running.get(key, 0), len(queue or ()), self.cap, self.retry_after_s(key))
        if queue is None:
            queue = self._waiters[key] = deque()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(key)  # granted just as the caller gave up: hand the slot on
            else:
                self._forget(key, waiter)
            raise

    def release(self, key: Hashable, job_s: float | None = None) -> None:
        """Give back a slot ``key`` held (after a job of ``job_s`` seconds); the next client in turn gets it."""
        if job_s is not None:
            self._job_s = 0.8 * self._job_s + 0.2 * job_s
        held = self._running.get(key, 0)
        if held <= 0:
            raise RuntimeError(f"release without a slot held by {key!r}")
        if held == 1:
            del self._running[key]
            if key not in self._waiters:
                self._served.pop(key, None)  # idle again: next time it comes first
        else:
            self._running[key] = held - 1
        self._busy -= 1
        self._dispatch()

    def crowded(self, key: Hashable) -> bool:
        """Whether ``key`` has more than one job in progress or any waiting (a backlog: bulk work)."""
        return self._running.get(key, 0) > 1 or key in self._waiters

    def retry_after_s(self, key: Hashable) -> int:
        """Seconds until ``key``'s waiting jobs have likely all started (at least 1)."""
        ahead = len(self._waiters.get(key, ())) + self._running.get(key, 0)
        return max(1, math.ceil(self._job_s * ahead / self.cap))

    def stats(self) -> GateStats:
        return GateStats(
            busy=self._busy,
            running=dict(self._running),
            queued={k: len(q) for k, q in self._waiters.items()},
        )

    def _grant(self, key: Hashable) -> None:
        self._busy += 1
        self._running[key] = self._running.get(key, 0) + 1
        self._tick += 1
        self._served[key] = self._tick

    def _dispatch(self) -> None:
        """Hand free slots to waiting clients: the one served least recently first, one job at a time."""
        while self._busy < self.slots:
            eligible = [k for k in self._waiters if self._running.get(k, 0) < self.cap]
            if not eligible:
                return
            key = min(eligible, key=lambda k: self._served.get(k, 0))
            queue = self._waiters[key]
            waiter = queue.popleft()
            if not queue:
                del self._waiters[key]
            if waiter.done():
                continue  # its caller was cancelled and has not run its clean-up yet
            self._grant(key)
            waiter.set_result(None)

    def _forget(self, key: Hashable, waiter: asyncio.Future[None]) -> None:
        """A waiting job was cancelled: drop it from its client's queue."""
        queue = self._waiters.get(key)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(waiter)
        if not queue:
            del self._waiters[key]
            if key not in self._running:
                self._served.pop(key, None)
