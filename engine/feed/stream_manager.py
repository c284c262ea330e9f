"""The Binance stream manager: spreads streams over combined-stream connections and supervises them.

Each :class:`~engine.feed.binance_streams.StreamConnection` holds at most
``max_streams_per_connection`` streams; the manager adds and removes streams at any time,
starts a connection task per connection, and answers which streams are live and what the
last error of a stream's connection was.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any

import aiohttp

from engine.feed.binance_streams import StreamConnection
from engine.feed.health import LastError
from engine.feed.protocol import StreamSink
from engine.feed.stream_settings import StreamSettings


class StreamManager:
    """Owns the stream connections; add and remove streams at any time."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        sink: StreamSink,
        settings: StreamSettings | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._session = session
        self._base_url = base_url
        self._sink = sink
        self.settings = settings or StreamSettings()
        self._rng = rng or random.Random()
        self.connections: list[StreamConnection] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._next_conn = 1

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[StreamManager]:
        """Run every connection until the block exits."""
        if self._tg is not None:
            raise RuntimeError("StreamManager is already running")
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for conn in self.connections:
                    self._start(conn)
                try:
                    yield self
                finally:
                    for task in list(self._tasks.values()):
                        task.cancel()
        finally:
            self._tg = None
            self._tasks.clear()

    def _start(self, conn: StreamConnection) -> None:
        if self._tg is None or conn.conn_id in self._tasks:
            return
        conn_id = conn.conn_id
        task = self._tg.create_task(conn.run(), name=f"stream-conn-{conn_id}")
        self._tasks[conn_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(conn_id, None))

    def owner(self, stream: str) -> StreamConnection | None:
        for conn in self.connections:
            if stream in conn.streams:
                return conn
        return None

    def add(self, streams: Iterable[str]) -> None:
        """Follow ``streams`` (already followed ones are ignored)."""
        cap = self.settings.max_streams_per_connection
        todo = [s for s in dict.fromkeys(streams) if self.owner(s) is None]
        for conn in self.connections:
            if not todo:
                break
            room = cap - len(conn.streams)
            if room > 0:
                conn.add(todo[:room])
                del todo[:room]
        while todo:
            conn = StreamConnection(
                self._next_conn, self._session, self._base_url, self._sink, self.settings, self._rng
            )
            self._next_conn += 1
            conn.add(todo[:cap])
            del todo[:cap]
            self.connections.append(conn)
            self._start(conn)

    def remove(self, streams: Iterable[str]) -> None:
        """Stop following ``streams``; an emptied connection is closed."""
        for s in streams:
            conn = self.owner(s)
            if conn is None:
                continue
            conn.remove([s])
            if not conn.streams:
                self.connections.remove(conn)
                task = self._tasks.pop(conn.conn_id, None)
                if task is not None:
                    task.cancel()

    def is_live(self, stream: str) -> bool:
        conn = self.owner(stream)
        return conn is not None and stream in conn.live

    def stream_error(self, stream: str) -> LastError | None:
        """Why the connection carrying ``stream`` is down (None when it is up or has not failed)."""
        conn = self.owner(stream)
        return None if conn is None or conn.connected else conn.last_error

    def restart_all(self, reason: str = "requested") -> None:
        """Reconnect every connection now (no backoff)."""
        for conn in self.connections:
            conn.request_restart(reason)

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "id": c.conn_id,
                "connected": c.connected,
                "streams": len(c.streams),
                "live": len(c.live),
                "connects": c.stats.connects,
                "stalls": c.stats.stalls,
                "shutdowns": c.stats.shutdowns,
                "rotations": c.stats.rotations,
                "messages": c.stats.messages,
                "refusals": c.stats.refusals,
                "last_error": None if c.last_error is None else c.last_error.as_dict(),
            }
            for c in self.connections
        ]
