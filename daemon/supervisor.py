"""Supervised background tasks: a crash is logged and the task restarted with backoff.

:class:`Supervisor` is an async context manager owning named tasks; leaving it cancels
them all and waits for them.  A task that returns normally is not restarted (it chose to
stop); one that raises is restarted after a delay that doubles up to ``max_delay_s`` and
resets once the task has run for a while without failing.

A clean stop logs no error: the owner of a task whose resources close before the supervisor
does (the user-data stream on the daemon's HTTP session) stops it first with :meth:`Supervisor.stop`,
so the end of its connection is not taken for a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from types import TracebackType

import structlog

log = structlog.get_logger(__name__)

Factory = Callable[[], Awaitable[None]]


class Supervisor:
    """Named background tasks, each restarted with exponential backoff after a crash."""

    def __init__(
        self, *, initial_delay_s: float = 0.5, max_delay_s: float = 30.0, healthy_after_s: float = 60.0
    ) -> None:
        self._initial = initial_delay_s
        self._max = max_delay_s
        self._healthy_after = healthy_after_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.restarts: dict[str, int] = {}

    def start(self, name: str, factory: Factory) -> None:
        if name in self._tasks:
            raise ValueError(f"task {name!r} is already supervised")
        self.restarts[name] = 0
        self._tasks[name] = asyncio.create_task(self._keep(name, factory), name=f"supervised-{name}")

    async def _keep(self, name: str, factory: Factory) -> None:
        delay = self._initial
        while True:
            started = time.monotonic()
            try:
                await factory()
                log.info("task_finished", task=name)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.restarts[name] += 1
                if time.monotonic() - started > self._healthy_after:
                    delay = self._initial
                log.exception("task_crashed", task=name, restart_in_s=round(delay, 2), restarts=self.restarts[name])
                await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))  # backoff with jitter
                delay = min(self._max, delay * 2)

    async def stop(self, name: str) -> None:
        """Cancel the task ``name`` and wait for it (its owner is closing); unknown names are ignored."""
        task = self._tasks.pop(name, None)
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.debug("task_stopped", task=name)

    def running(self) -> dict[str, bool]:
        return {name: not task.done() for name, task in self._tasks.items()}

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
