"""Our websocket frame reader: a server's byte stream split into messages, no I/O.

This module owns the byte-level parsing of the *receive* side of a client websocket (RFC 6455):
:class:`FrameReader` takes the bytes as they arrive, cut anywhere, and emits every complete data
message's payload (fragments joined), every ping, and where it stopped — at a close frame or at a
protocol violation (a masked frame from the server, reserved bits, a malformed fragment sequence or
control frame, an unknown opcode).  It knows nothing of aiohttp: :mod:`engine.feed.ws_frames` hands
it a connection's bytes after aiohttp's handshake, gives back to aiohttp what it stopped at, and
says why we read frames ourselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Generic, TypeVar

OP_CONTINUATION: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA

PROTOCOL_ERROR: Final = 1002
MAX_CONTROL_PAYLOAD: Final = 125


@dataclass(frozen=True, slots=True)
class Ping:
    """A ping from the server: answer it with a pong carrying ``payload``."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """A close frame: ``rest`` is the stream from that frame on (the reader stopped there)."""

    rest: bytes


@dataclass(frozen=True, slots=True)
class Violation:
    """The server broke the protocol: fail the connection with ``code`` (the reader stopped)."""

    code: int
    reason: str


Event = bytes | Ping | Close | Violation
"""What :class:`FrameReader` emits: a complete data message's payload (text or binary), a ping,
or where it stopped."""

M = TypeVar("M")
"""Markers a user of the reader puts in :attr:`FrameReader.out` between the events (FrameFeed's
``AIOHTTP_TURN``)."""


class FrameReader(Generic[M]):
    """Splits a server-to-client websocket byte stream into messages; no I/O.

    :meth:`feed` takes bytes as they arrive, cut anywhere, and appends to :attr:`out`, in stream
    order: each complete data message's payload (``bytes``; text and binary alike, fragments
    joined), a :class:`Ping` per ping (pongs are dropped), and last a :class:`Close` or
    :class:`Violation` where it stopped (it ignores whatever is fed after that).  Server frames
    are unmasked (a masked one is a violation), and no extension is negotiated (reserved bits are
    a violation).  Lengths of 7, 16 and 64 bits are read whatever their size; a frame's bytes
    are joined once, when the frame is complete, so a large frame arriving in many reads costs
    no more than one that arrives at once.
    """

    __slots__ = ("_fragments", "_head", "_head_len", "_need", "done", "out")

    def __init__(self) -> None:
        self.out: list[Event | M] = []
        self.done = False
        """True once the reader stopped at a close frame or a violation."""
        self._head: list[bytes] = []
        """The unparsed bytes of an incomplete frame (one frame's worth at most)."""
        self._head_len = 0
        self._need = 2
        """How many bytes ``_head`` must hold before parsing can move on."""
        self._fragments: list[bytes] | None = None
        """Payloads of the fragmented data message in progress (None when none is)."""

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held until the rest of it arrives."""
        return self._head_len

    def feed(self, data: bytes) -> None:
        """Parse ``data`` (the next bytes of the stream) into :attr:`out`."""
        if self.done or not data:
            return
        if self._head_len:
            self._head.append(data)
            self._head_len += len(data)
            if self._head_len < self._need:
                return
            data = b"".join(self._head)
            self._head.clear()
            self._head_len = 0
        out = self.out.append
        fragments = self._fragments
        end = len(data)
        pos = 0
        need = 2
        while True:
            left = end - pos
            if left < 2:
                need = 2
                break
            b0 = data[pos]
            n = data[pos + 1]
            if n < 126:
                start = pos + 2
            elif n == 126:
                if left < 4:
                    need = 4
                    break
                n = data[pos + 2] << 8 | data[pos + 3]
                start = pos + 4
            elif n == 127:
                if left < 10:
                    need = 10
                    break
                n = int.from_bytes(data[pos + 2 : pos + 10], "big")
                start = pos + 10
                if n >> 63:
                    self._stop(Violation(PROTOCOL_ERROR, "frame length with the most significant bit set"))
                    return
            else:
                self._stop(Violation(PROTOCOL_ERROR, "masked frame from the server"))
                return
            stop = start + n
            if stop > end:
                need = stop - pos
                break
            if (b0 == 0x81 or b0 == 0x82) and fragments is None:  # a whole text or binary message
                out(data[start:stop])
            else:
                if not self._frame(b0, data[start:stop], data, pos):
                    return
                fragments = self._fragments
            pos = stop
        if pos < end:
            self._head.append(data[pos:] if pos else data)
            self._head_len = end - pos
        self._need = need

    def _frame(self, b0: int, payload: bytes, data: bytes, pos: int) -> bool:
        """Any frame but a whole text or binary message; False when the reader stopped."""
        opcode = b0 & 0x0F
        fin = b0 & 0x80
        if b0 & 0x70:
            return self._stop(Violation(PROTOCOL_ERROR, "frame with reserved bits set (no extension was negotiated)"))
        if opcode > 0x7:
            if not fin or len(payload) > MAX_CONTROL_PAYLOAD:
                return self._stop(Violation(PROTOCOL_ERROR, "fragmented or oversized control frame"))
            if opcode == OP_PING:
                self.out.append(Ping(payload))
            elif opcode == OP_CLOSE:
                return self._stop(Close(data[pos:]))
            elif opcode != OP_PONG:
                return self._stop(Violation(PROTOCOL_ERROR, f"unexpected opcode {opcode:#x}"))
            return True
        if opcode == OP_CONTINUATION:
            if self._fragments is None:
                return self._stop(Violation(PROTOCOL_ERROR, "continuation frame without a message to continue"))
            self._fragments.append(payload)
            if fin:
                self.out.append(b"".join(self._fragments))
                self._fragments = None
            return True
        if opcode != OP_TEXT and opcode != OP_BINARY:
            return self._stop(Violation(PROTOCOL_ERROR, f"unexpected opcode {opcode:#x}"))
        if self._fragments is not None:
            return self._stop(Violation(PROTOCOL_ERROR, "a new message began before the fragmented one ended"))
        self._fragments = [payload]  # the first fragment (a whole message took the fast path)
        return True

    def _stop(self, event: Close | Violation) -> bool:
        self.out.append(event)
        self.done = True
        self._head.clear()
        self._head_len = 0
        self._fragments = None
        return False
