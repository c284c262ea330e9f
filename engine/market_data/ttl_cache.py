"""A small TTL cache for fetched bars that also merges concurrent identical fetches.

Two tool calls asking for the same symbol, interval and size at the same moment share one
HTTP request; a result is reused for ``ttl_s`` seconds.  Failures are not cached.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class TtlCache(Generic[T]):
    """Bounded LRU of ``key → (expiry, value)`` plus in-flight request sharing."""

    def __init__(self, ttl_s: float, max_entries: int = 256) -> None:
        self._ttl = ttl_s
        self._max = max_entries
        self._data: OrderedDict[Hashable, tuple[float, T]] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Future[T]] = {}

    async def get_or_fetch(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        now = time.monotonic()
        hit = self._data.get(key)
        if hit is not None and hit[0] > now:
            self._data.move_to_end(key)
            return hit[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            value = await fetch()
        except BaseException as exc:
            if not fut.done():
                if isinstance(exc, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(exc)
                    fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._inflight.pop(key, None)
        fut.set_result(value)
        if self._ttl > 0:
            self._data[key] = (time.monotonic() + self._ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return value
