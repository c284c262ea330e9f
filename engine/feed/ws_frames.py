"""The hand-over of a websocket connection's incoming bytes from aiohttp to our frame reader.

This module owns the *receive* side of a client websocket after aiohttp's handshake: taking a
connection's incoming bytes over from aiohttp (:class:`FrameFeed`) and handing our frame reader
(:class:`~engine.feed.ws_frame_reader.FrameReader`, which splits them into messages, no I/O) every
socket read at once.  aiohttp keeps everything else: the handshake, proxies, TLS, handshake errors,
every frame we send (masked, by its writer), and the closing handshake with its close code.

Why not aiohttp's receive loop: it hands over one message per ``await ws.receive()``, and a
market stream is many small messages (a Binance kline update is about 230–400 bytes).  Measured
with ``bench/engine.py``'s blast server (200,000 kline frames of 226 bytes on loopback; the
2-core AMD EPYC dev machine, Python 3.11.7, aiohttp 3.14.5, orjson 3.13), per message:

* aiohttp ``ws.receive()`` doing nothing else: 1.6–2.1 µs (480k–630k msg/s), more than the
  ``orjson.loads`` of the message (1.5 µs); with the loads 195k–270k msg/s;
* our reader, every frame of a socket read split in one pass, one ``await`` per read instead of
  per message: 0.55–0.87 µs including the socket reads (1.15M–1.8M msg/s; 0.54 µs for the split
  alone); with the loads 315k–370k msg/s;
* the whole stream path (split, JSON, decode, apply to 1,000 windows), steady state: 8.3–9.3 µs
  per message, of which the split is the 0.54 µs.  On the ingest bench, in interleaved runs
  on the same server: 50k–69k msg/s through ``ws.receive()`` with a
  :class:`~engine.feed.messages.KlineUpdate` per message (the code before our reader),
  82k–124k msg/s now.

Hand-over.  ``ws_connect`` returns with aiohttp's reader already fed whatever followed the
``101`` in the same reads — complete messages in its queue and possibly the first part of a
frame inside its (compiled) parser, which we cannot see.  So :class:`FrameFeed` replaces the
parser on the connection's protocol at once and holds new bytes back; the caller drains
aiohttp's queue as usual; then the held bytes are given to aiohttp's parser *one byte at a time*
until it completes a data message, which is a frame boundary with no fragments pending (at most
one frame of bytes goes this slow way, once per connection).  From there on our reader parses.
If no boundary shows within :data:`HANDOVER_LIMIT` bytes, aiohttp simply keeps the connection
(every message through ``ws.receive()``, as before).

What our reader does not handle it gives back, in order: at a close frame it stops and the rest
of the stream (from that frame on) goes to aiohttp's parser, so ``ws.receive()`` and
``ws.close()`` see the close exactly as they would have; a protocol violation is put on aiohttp's
queue as its own ``WebSocketError`` (code 1002, as aiohttp's parser does), so ``ws.receive()``
fails the connection the way it fails it for aiohttp's own parse errors.  One violation is ours
only: a masked frame from the server, which RFC 6455 §5.1 says a client must fail on and aiohttp
accepts.  The caller answers pings (``ws.pong``).

Everything here that touches aiohttp's internals (the protocol's ``_payload_parser``, the
queue's ``_buffer``) is checked in :meth:`FrameFeed.attach`, which returns None when they differ
(another aiohttp version): the caller then keeps receiving through ``ws.receive()``.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Final, Literal, cast

import aiohttp
from aiohttp.http_websocket import WSMessageTextBytes

from engine.feed.ws_frame_reader import Close, FrameReader, Ping, Violation

HANDOVER_LIMIT = 16 * 1024
"""Bytes given to aiohttp's parser one at a time while looking for a frame boundary before it keeps
the connection (one Binance kline frame is a few hundred bytes; a byte costs about 0.15 µs)."""

HIGH_WATER = 1 << 20
"""Bytes of parsed-but-unread messages at which the socket stops being read until the reader
takes them (about four socket reads)."""


class AiohttpTurn:
    """Marks where, in stream order, the next message is to be taken from aiohttp (``ws.receive()``)."""

    __slots__ = ()


AIOHTTP_TURN: Final = AiohttpTurn()

Item = bytes | Ping | AiohttpTurn
"""What :meth:`FrameFeed.take` returns: a data message's payload, a ping to answer, or aiohttp's turn."""

_HANDOVER, _OURS, _AIOHTTP, _FAILED = 0, 1, 2, 3
_DATA_TYPES = (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY)
_CLOSED = aiohttp.WSMessage(aiohttp.WSMsgType.CLOSED, None, None)


class FrameFeed:
    """A connection's incoming bytes, taken over from aiohttp's per-message receive path.

    Installed as the payload parser of the connection's aiohttp protocol (which calls
    :meth:`feed_data` for every socket read and :meth:`feed_eof` when the connection is lost);
    the reading task calls :meth:`take` for everything that arrived, in stream order, and
    :meth:`wait` when there was nothing.  For an :data:`AIOHTTP_TURN` it calls :meth:`receive`,
    which is ``ws.receive()`` that never waits for the network.

    States: *hand-over* (new bytes are held back while aiohttp's queue drains, then handed over
    at a frame boundary), *ours* (our reader parses every read at once), *aiohttp* (aiohttp's
    parser has the stream again: after a close frame, the end of the stream, or a hand-over that
    found no boundary) and *failed* (a protocol violation was reported; later bytes are ignored).
    """

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse[Literal[False]], protocol: Any, parser: Any, queue: Any
    ) -> None:
        self._ws = ws
        self._protocol = protocol
        self._parser = parser
        self._queue = queue
        self._buffer: collections.deque[Any] = queue._buffer
        self._reader: FrameReader[AiohttpTurn] = FrameReader()
        self._state = _HANDOVER
        self._held: list[bytes] = []
        self._held_len = 0
        self._eof = False
        self._unread = 0
        self._paused = False
        self._detached = False
        self._waiter: asyncio.Future[None] | None = None
        self.handover_bytes = 0
        """Bytes given to aiohttp's parser one at a time during the hand-over."""
        self.taken_over = False
        """Whether the hand-over happened (our reader parsed the stream from then on, up to its end
        or a close frame)."""

    @classmethod
    def attach(cls, ws: aiohttp.ClientWebSocketResponse[Literal[False]]) -> FrameFeed | None:
        """Take ``ws``'s incoming bytes over; None (and nothing changed) when aiohttp's internals differ."""
        response = getattr(ws, "_response", None)
        connection = getattr(response, "connection", None)
        protocol = getattr(connection, "protocol", None)
        parser = getattr(protocol, "_payload_parser", None)
        queue = getattr(ws, "_reader", None)
        buffer = getattr(queue, "_buffer", None)
        if (
            parser is None
            or protocol is None
            or parser is not getattr(ws, "_parser", None)
            or not callable(getattr(parser, "feed_data", None))
            or not callable(getattr(parser, "feed_eof", None))
            or not isinstance(buffer, collections.deque)
            or not callable(getattr(queue, "is_eof", None))
            or not callable(getattr(queue, "read", None))
            or not callable(getattr(queue, "set_exception", None))
            or not callable(getattr(protocol, "pause_reading", None))
            or not callable(getattr(protocol, "resume_reading", None))
            or ws.compress
            or ws.closed
        ):
            return None
        feed = cls(ws, protocol, parser, queue)
        protocol._payload_parser = feed
        return feed

    # --- called by aiohttp's protocol ----------------------------------------------
    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if type(data) is not bytes:  # a transport may hand a bytearray or memoryview
            data = bytes(data)
        state = self._state
        if state == _OURS:
            reader = self._reader
            reader.feed(data)
            if reader.done:
                self._stopped()
            if self._detached:
                reader.out.clear()
            else:
                self._unread += len(data)
                if self._unread > HIGH_WATER:
                    self._pause()
        elif state == _HANDOVER:
            self._held.append(data)
            self._held_len += len(data)
            if self._held_len > HIGH_WATER:
                self._pause()
        elif state == _AIOHTTP:
            self._parser.feed_data(data)
        self._wake()
        return False, b""

    def feed_eof(self) -> None:
        if self._state == _HANDOVER:
            self._eof = True
        elif self._state == _OURS:
            self._state = _AIOHTTP
            self._reader.out.append(AIOHTTP_TURN)
            self._parser.feed_eof()
        elif self._state == _AIOHTTP:
            self._parser.feed_eof()
        self._wake()

    # --- called by the reading task ------------------------------------------------
    def take(self) -> list[Item]:
        """Everything that arrived since the last call, in stream order (maybe nothing)."""
        if self._state == _HANDOVER:
            self._hand_over()
        reader = self._reader
        items = reader.out
        if not items:
            return [AIOHTTP_TURN] if self._state != _OURS and self._aiohttp_ready() else []
        reader.out = []
        self._unread = 0
        if self._paused:
            self._resume()
        # a Close or Violation never stays in ``out``: _stopped swaps it for AIOHTTP_TURN as it comes
        return cast(list[Item], items)

    async def wait(self, deadline: float | None) -> None:
        """Return when :meth:`take` may have something, or :meth:`wake` was called; TimeoutError at
        ``deadline`` (loop time; None: no deadline)."""
        if self._reader.out or (self._state != _OURS and self._aiohttp_ready()):
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            if deadline is None:
                await waiter
            else:
                async with asyncio.timeout_at(deadline):
                    await waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        """Make a pending :meth:`wait` return now."""
        self._wake()

    async def receive(self) -> aiohttp.WSMessage | WSMessageTextBytes | None:
        """The next message from aiohttp (through ``ws.receive()``); None after a ping (answered) or a pong.

        Called for an :data:`AIOHTTP_TURN`, when aiohttp holds the message already or the
        connection ended, so it never waits for the network.
        """
        ws = self._ws
        if ws.closed:
            return _CLOSED
        if self._buffer:
            head = self._buffer[0][0].type
            if head is aiohttp.WSMsgType.PING:
                msg = await self._queue.read()
                await ws.pong(msg.data)
                return None
            if head is aiohttp.WSMsgType.PONG:
                await self._queue.read()
                return None
        elif not self._queue.is_eof():
            return None  # a close in another task took it: nothing to hand over
        return await ws.receive()

    def detach(self) -> None:
        """The reading task is done: data messages are dropped from now on, and the socket is read
        on, so that the server's reply to our close frame reaches ``ws.close()``."""
        self._detached = True
        self._reader.out.clear()
        if self._state == _HANDOVER:
            self._give_back(b"".join(self._held))
        self._held.clear()
        if self._paused:
            self._resume()

    # --- internals -------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self) -> None:
        self._paused = True
        self._protocol.pause_reading()

    def _resume(self) -> None:
        self._paused = False
        self._protocol.resume_reading()

    def _aiohttp_ready(self) -> bool:
        return bool(self._buffer) or bool(self._queue.is_eof())

    def _hand_over(self) -> None:
        """Give our reader the held bytes once aiohttp's parser is at a frame boundary."""
        if self._aiohttp_ready():
            return  # aiohttp's messages come first; its parser may still have a backlog to parse
        data = b"".join(self._held)
        self._held.clear()
        self._held_len = 0
        parser, buffer, queue = self._parser, self._buffer, self._queue
        for i in range(len(data)):
            if self.handover_bytes >= HANDOVER_LIMIT or queue.is_eof():
                self._give_back(data[i:])  # no boundary found, or aiohttp's parser failed the stream
                return
            self.handover_bytes += 1
            parser.feed_data(data[i : i + 1])
            if buffer and buffer[-1][0].type in _DATA_TYPES:
                # a data message just ended: a frame boundary, no fragments pending
                self._state = _OURS
                self.taken_over = True
                reader = self._reader
                reader.out.extend([AIOHTTP_TURN] * len(buffer))
                reader.feed(data[i + 1 :])
                if reader.done:
                    self._stopped()
                if self._eof:
                    self.feed_eof()
                if self._paused:
                    self._resume()
                return
        if self._eof or self.handover_bytes >= HANDOVER_LIMIT:
            self._give_back(b"")

    def _give_back(self, data: bytes) -> None:
        """aiohttp's parser keeps the stream from here (the hand-over did not happen)."""
        self._state = _AIOHTTP
        if data:
            self._parser.feed_data(data)
        if self._eof:
            self._parser.feed_eof()
        if self._paused:
            self._resume()

    def _stopped(self) -> None:
        """Our reader met a close frame or a violation: aiohttp takes it from there."""
        out = self._reader.out
        event = out.pop()
        if isinstance(event, Close):
            self._state = _AIOHTTP
            self._parser.feed_data(event.rest)
        elif isinstance(event, Violation):
            self._state = _FAILED
            self._queue.set_exception(aiohttp.WebSocketError(event.code, event.reason))
        out.append(AIOHTTP_TURN)
