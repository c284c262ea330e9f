"""Rendering off the event loop: a small process pool that runs the PNG renderer.

matplotlib holds the GIL for the whole render, so a thread would stall websocket reads and
every other request; a separate process does not.  Workers are started with ``spawn`` (no
forked copies of the daemon's threads and sockets) and warmed up once at start.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from engine.bars import Bars
from engine.charts import render
from engine.indicators.model import PanelResult


class ProcessPoolRenderer:
    """ChartRenderer backed by a ``ProcessPoolExecutor``; use as an async context manager."""

    def __init__(self, workers: int = 1) -> None:
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None

    async def __aenter__(self) -> ProcessPoolRenderer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the workers and import matplotlib in each (the first render is then fast)."""
        if self._pool is not None:
            return
        self._pool = ProcessPoolExecutor(
            max_workers=self._workers, mp_context=multiprocessing.get_context("spawn"), initializer=_die_with_parent
        )
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, render.warm_up) for _ in range(self._workers)))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: pool.shutdown(wait=True, cancel_futures=True)
            )

    async def render(
        self,
        bars: Bars,
        panels: list[tuple[str, PanelResult]],
        *,
        symbol: str | None,
        interval: str,
        width: int,
        height: int,
    ) -> bytes:
        if self._pool is None:
            await self.start()
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _render_job, bars, panels, symbol, interval, width, height)


def _render_job(
    bars: Bars, panels: list[tuple[str, PanelResult]], symbol: str | None, interval: str, width: int, height: int
) -> bytes:
    return render.render_png(bars, panels, symbol=symbol, interval=interval, width=width, height=height)


class InlineRenderer:
    """ChartRenderer that renders on the calling thread (one-shot CLI only: nothing else runs)."""

    async def render(
        self,
        bars: Bars,
        panels: list[tuple[str, PanelResult]],
        *,
        symbol: str | None,
        interval: str,
        width: int,
        height: int,
    ) -> bytes:
        return render.render_png(bars, panels, symbol=symbol, interval=interval, width=width, height=height)


def _die_with_parent() -> None:
    """Pool worker start-up: on Linux, ask the kernel to SIGTERM this worker when the daemon dies.

    A daemon killed with SIGKILL runs no clean-up; without this its render workers would be
    orphaned (holding memory and the daemon's stdout).  Elsewhere this is a no-op.
    """
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
