"""Rendering off the event loop: a small process pool that runs chart jobs, behind a fair gate.

matplotlib holds the GIL for the whole render, and building a 5000-bar series payload is
pure-Python list and dict work that holds it too (bench/render_flood.py, ``loop_lag``: two
such builds at a time on threads delay the event loop by 36-58 ms at p99, on worker
processes by 5-10 ms), so every chart job — indicators, PNG, series and large summaries,
JSON text included — runs in a separate process.  Workers
are started with ``spawn`` (no forked copies of the daemon's threads and sockets) and
warmed up once at start.  Jobs reach the pool only through a :class:`RenderGate` sized to
the pool, so the executor never holds a backlog: clients take turns (engine.charts.gate),
and the jobs of a client with a backlog run at a lower CPU priority than a client's only
chart, so on a busy machine the worker rendering a quiet client's chart gets the CPU first.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ProcessPoolExecutor

from engine.charts.gate import DEFAULT_MAX_QUEUED, RenderGate
from engine.charts.jobs import ChartJob, ChartJobOutput, run_chart_job, run_in_worker, warm_up
from engine.charts.worker import init_worker


def _nobody() -> Hashable:
    return None


class ProcessPoolRenderer:
    """ChartRenderer backed by a ``ProcessPoolExecutor``; use as an async context manager.

    ``principal`` names the client a job is for (read when the job arrives, e.g. from a
    context variable); each client may have ``per_principal`` jobs rendering (at most
    ``workers - 1`` when there are several workers) and ``max_queued`` waiting.  ``warm``: start
    the workers when entered and import matplotlib in each; otherwise they start with the first job
    (which then takes their start-up, about a second).
    """

    def __init__(
        self,
        workers: int = 1,
        *,
        per_principal: int = 2,
        max_queued: int = DEFAULT_MAX_QUEUED,
        principal: Callable[[], Hashable] = _nobody,
        warm: bool = True,
    ) -> None:
        self._workers = workers
        self._warm = warm
        self._pool: ProcessPoolExecutor | None = None
        self._principal = principal
        self.gate = RenderGate(workers, per_key=per_principal, max_queued=max_queued)

    async def __aenter__(self) -> ProcessPoolRenderer:
        if self._warm:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, *, warm: bool = True) -> None:
        """Start the workers; ``warm``: import matplotlib in each and wait for it (the first render is then fast).

        Without ``warm`` nothing is awaited: the executor spawns its processes with the first job."""
        if self._pool is not None:
            return
        self._pool = ProcessPoolExecutor(
            max_workers=self._workers, mp_context=multiprocessing.get_context("spawn"), initializer=init_worker
        )
        if warm:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(self._pool, warm_up) for _ in range(self._workers)))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: pool.shutdown(wait=True, cancel_futures=True)
            )

    async def run(self, job: ChartJob) -> ChartJobOutput:
        """Run ``job`` on a worker once it is this client's turn (raises RenderBusy when its queue is full).

        The slot is given back when the worker is done, not when the caller stops waiting: a
        caller that disconnects mid-render leaves its worker busy until the job ends, and the
        gate must not hand that worker to someone else meanwhile.
        """
        if self._pool is None:
            await self.start(warm=False)
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        key = self._principal()
        await self.gate.acquire(key)
        started = time.monotonic()

        def done(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed at shutdown: nobody is waiting
                loop.call_soon_threadsafe(self.gate.release, key, time.monotonic() - started)

        try:
            submitted = self._pool.submit(run_in_worker, job, self.gate.crowded(key))
        except BaseException:
            self.gate.release(key)
            raise
        submitted.add_done_callback(done)
        return await asyncio.wrap_future(submitted)


class InlineRenderer:
    """ChartRenderer that runs jobs on the calling thread (one-shot CLI only: nothing else runs)."""

    async def run(self, job: ChartJob) -> ChartJobOutput:
        return run_chart_job(job)
