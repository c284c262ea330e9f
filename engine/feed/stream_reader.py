"""The reading side of one Binance combined-stream session, and the connection's counters.

This module owns what happens on a :class:`~engine.feed.binance_streams.StreamConnection`'s
websocket between the handshake and the session's end: the read loop, applying every data message
(a kline decoded straight into the sink's ``apply_kline``, anything else by orjson), answering
pings, and why the session ended — a ``serverShutdown`` event, a restart the connection asked for,
a close or error from the server, a stall (no data message within ``stall_timeout_s``; ping frames
do not count as data) or rotation at the connection's age (``rotate_after_s``).

There are two read loops over the same :class:`SessionReader`: over our frame reader
(:meth:`~SessionReader.read_frames`, every message that arrived applied in one pass; see
:mod:`engine.feed.ws_frames`) and, when aiohttp's internals differ, over ``ws.receive()`` one
message at a time (:meth:`~SessionReader.read_messages`).  The connection owns connecting,
subscribing and reconnecting; it hands the reader its counters, the sink's kline callable, its
acknowledgement handler and its pending restart reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson
import structlog
from aiohttp.http_websocket import WSMessageTextBytes

from engine.feed.health import LastError
from engine.feed.messages import decode_kline, decode_stream_kline
from engine.feed.stream_settings import StreamSettings
from engine.feed.ws_frame_reader import Ping
from engine.feed.ws_frames import FrameFeed

log = structlog.get_logger("engine.feed.binance_streams")
"""The connection's logger: a session's events are the connection's (same logger name as before)."""

_DATA = (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY)


@dataclass(slots=True)
class ConnectionStats:
    """A stream connection's counters over all its sessions."""

    connects: int = 0
    connect_failures: int = 0
    messages: int = 0
    stalls: int = 0
    shutdowns: int = 0
    rotations: int = 0
    closes: int = 0
    bad_messages: int = 0
    refusals: int = 0


@dataclass(frozen=True, slots=True)
class SessionDeadlines:
    """When a session's read stops waiting (loop time): at the rotation age, or ``stall_s`` after the
    last data message."""

    connected_at: float
    rotate_at: float
    """``inf`` when the connection is not rotated."""
    stall_s: float | None

    @classmethod
    def of(cls, settings: StreamSettings, connected_at: float) -> SessionDeadlines:
        rotate = settings.rotate_after_s
        rotate_at = float("inf") if rotate is None else connected_at + rotate
        return cls(connected_at, rotate_at, settings.stall_timeout_s)

    def next(self, last_data: float) -> float | None:
        """The loop time the read waits until, given when the last data message came; None: no deadline."""
        stall = self.stall_s
        deadline = self.rotate_at if stall is None else min(self.rotate_at, last_data + stall)
        return None if deadline == float("inf") else deadline


def _buffered(ws: aiohttp.ClientWebSocketResponse[Literal[False]]) -> Callable[[], bool]:
    """Whether ``ws`` holds a frame already read off the socket (the ``ws.receive()`` read loop).

    A receive with a timeout costs an asyncio timeout context per frame — measured 27 % of the
    ingest path (and aiohttp's own comment says "almost 50 %" of its receive loop), while during
    a burst most frames are already buffered.  aiohttp has no public "frames pending" call, so this
    reads its reader's buffer; when that attribute is missing (another aiohttp), every receive
    keeps its timeout and nothing but speed changes.
    """
    buffer = getattr(getattr(ws, "_reader", None), "_buffer", None)
    if buffer is None or not hasattr(buffer, "__len__"):
        return lambda: False
    return lambda: len(buffer) > 0


def _raw(data: str | bytes) -> bytes:
    """A data message's payload as ``_apply`` takes it (aiohttp hands bytes with ``decode_text=False``)."""
    return data if type(data) is bytes else str(data).encode()


class SessionReader:
    """Reads one session's messages until it ends; :attr:`end` says why it failed, if it did."""

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse[Literal[False]],
        deadlines: SessionDeadlines,
        *,
        conn_id: int,
        host: str,
        stats: ConnectionStats,
        kline: Callable[..., None],
        on_ack: Callable[[dict[str, Any]], None],
        restart_reason: Callable[[], str | None],
    ) -> None:
        self._ws = ws
        self._deadlines = deadlines
        self._conn_id = conn_id
        self._host = host
        self._stats = stats
        self._kline = kline
        """Where a decoded kline goes (the sink's ``apply_kline`` or an adapter to ``on_kline``)."""
        self._on_ack = on_ack
        """Called with a SUBSCRIBE/UNSUBSCRIBE acknowledgement or rejection."""
        self._restart_reason = restart_reason
        """The restart the connection asked for during this session (None: none)."""
        self.end: LastError | None = None
        """Why the session failed (a stall, a close, an error); None when it ended otherwise."""

    async def read_frames(self, frames: FrameFeed) -> str:
        """The read loop over our frame reader: every message that arrived is applied in one pass.
        Returns why the session ended."""
        ws = self._ws
        loop = asyncio.get_running_loop()
        last_data = loop.time()
        while True:
            batch = frames.take()
            if not batch:
                if self._restart_reason() is not None:
                    return self._restarted()
                try:
                    await frames.wait(self._deadlines.next(last_data))
                except TimeoutError:
                    ended = self._timed_out(loop.time(), last_data)
                    if ended is not None:
                        return ended
                continue
            i, n = 0, len(batch)
            while i < n:
                j = self._apply(batch, i)
                if j < 0:
                    return self._server_shutdown()
                if j > i:
                    last_data = loop.time()
                if j == n:
                    break
                item = batch[j]
                i = j + 1
                if type(item) is Ping:
                    await ws.pong(item.payload)
                    continue
                msg = await frames.receive()
                if msg is None:
                    continue
                if msg.type in _DATA:
                    last_data = loop.time()
                    if self._apply([_raw(msg.data)], 0) < 0:
                        return self._server_shutdown()
                    continue
                return self._ended(msg)
            if self._restart_reason() is not None:
                return self._restarted()

    async def read_messages(self) -> str:
        """The read loop over aiohttp's ``ws.receive()`` (when :class:`FrameFeed` cannot attach).
        Returns why the session ended."""
        ws = self._ws
        loop = asyncio.get_running_loop()
        last_data = loop.time()
        waiting = _buffered(ws)
        while True:
            try:
                if waiting():  # a frame is already read: no deadline can pass before it is handed over
                    msg = await ws.receive()
                else:
                    deadline = self._deadlines.next(last_data)
                    timeout = None if deadline is None else max(0.001, deadline - loop.time())
                    msg = await ws.receive(timeout=timeout)
            except TimeoutError:
                ended = self._timed_out(loop.time(), last_data)
                if ended is not None:
                    return ended
                continue
            if msg.type in _DATA:
                last_data = loop.time()
                if self._apply([_raw(msg.data)], 0) < 0:
                    return self._server_shutdown()
                continue
            if self._restart_reason() is not None:
                return self._restarted()
            return self._ended(msg)

    def _timed_out(self, now: float, last_data: float) -> str | None:
        """Why the session ends at a read deadline (rotation or stall), None if it goes on."""
        deadlines = self._deadlines
        if now >= deadlines.rotate_at:
            self._stats.rotations += 1
            log.info("stream_rotate", conn=self._conn_id, age_s=round(now - deadlines.connected_at, 1))
            return "rotate"
        stall = deadlines.stall_s
        if stall is not None and now >= last_data + stall:
            self._stats.stalls += 1
            self.end = LastError(f"no data from {self._host} for {now - last_data:.0f} s (stalled)")
            log.warning("stream_stalled", conn=self._conn_id, silent_s=round(now - last_data, 1))
            return "stall"
        return None

    def _server_shutdown(self) -> str:
        self._stats.shutdowns += 1
        log.info("stream_server_shutdown", conn=self._conn_id)
        return "shutdown"

    def _restarted(self) -> str:
        reason = self._restart_reason()
        assert reason is not None
        if reason == "rotate":
            self._stats.rotations += 1
        return reason

    def _ended(self, msg: aiohttp.WSMessage | WSMessageTextBytes) -> str:
        """The session ends with a close, an error or the end of the connection."""
        if self._restart_reason() is not None:
            return self._restarted()
        ws = self._ws
        self._stats.closes += 1
        if msg.type is aiohttp.WSMsgType.ERROR:
            error = ws.exception() or msg.data  # a protocol error is the message's, not the socket's
            self.end = LastError(f"websocket error from {self._host}: {error}")
            log.warning("stream_error", conn=self._conn_id, error=str(error))
        else:
            self.end = LastError(f"{self._host} closed the connection (code {ws.close_code})")
            log.info("stream_closed", conn=self._conn_id, code=ws.close_code)
        return "closed"

    def _apply(self, batch: list[Any], i: int) -> int:
        """Apply the data messages of ``batch`` from index ``i`` on, up to the first item that is not
        one (``bytes``); returns that item's index (``len(batch)`` if none), or -1 right after a
        ``serverShutdown`` event.  Malformed messages are counted and skipped."""
        loads = orjson.loads
        kline = self._kline
        n = len(batch)
        start = i
        try:
            while i < n:
                raw = batch[i]
                if type(raw) is not bytes:
                    break
                i += 1
                try:
                    if decode_stream_kline(raw, kline):
                        continue
                    data = loads(raw)
                    payload = data.get("data", data)
                    kind = payload.get("e") if type(payload) is dict else None
                    if kind == "kline":
                        decode_kline(payload, kline)
                    elif kind == "serverShutdown":
                        return -1
                    elif "id" in data and ("result" in data or "code" in data):
                        self._on_ack(data)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                    self._stats.bad_messages += 1
                    log.warning("stream_bad_message", conn=self._conn_id, error=str(exc))
            return i
        finally:
            self._stats.messages += i - start
