"""Our websocket frame reader (engine/feed/ws_frame_reader.py): frames cut anywhere, fragments, pings,
7/16/64-bit lengths, where it stops; and the hand-over of a live aiohttp connection to it
(engine/feed/ws_frames.py)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from aiohttp import WSMsgType
from aiohttp._websocket.reader import WebSocketDataQueue, WebSocketReader
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.feed import ws_frames
from engine.feed.ws_frame_reader import Close, FrameReader, Ping, Violation
from engine.feed.ws_frames import AIOHTTP_TURN, FrameFeed


# --- encoding (server-to-client frames, as a server writes them) ---------------------------
def frame(opcode: int, payload: bytes, *, fin: bool = True, width: int = 0, rsv: int = 0, mask: bool = False) -> bytes:
    """One frame; ``width`` forces a 16- or 64-bit length field (0: the smallest that fits)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | rsv | opcode
    m = 0x80 if mask else 0
    if width == 64 or n >= 1 << 16:
        head = struct.pack("!BBQ", b0, m | 127, n)
    elif width == 16 or n >= 126:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BB", b0, m | n)
    if mask:
        key = b"\x01\x02\x03\x04"
        return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))
    return head + payload


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` bytes that are not all alike (large payloads without drawing every byte)."""
    block = bytes((seed + i) % 251 for i in range(251))
    return (block * (n // 251 + 1))[:n]


def split(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({p for p in points if 0 < p < len(data)})
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


Expected = list[bytes | Ping]

payloads = st.one_of(
    st.binary(max_size=140),
    st.integers(126, 70_000).map(pattern),  # 16-bit lengths, and 64-bit past 65,535
)


@st.composite
def streams(draw: Any) -> tuple[bytes, Expected]:
    """A server's stream: messages, some fragmented (a ping may sit between fragments), pings,
    lengths encoded in 7, 16 or 64 bits; and what a reader must emit for it."""
    wire = bytearray()
    expected: Expected = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.integers(0, 4)) == 0:
            ping = draw(st.binary(max_size=125))
            wire += frame(0x9, ping)
            expected.append(Ping(ping))
            continue
        payload = draw(payloads)
        opcode = draw(st.sampled_from([0x1, 0x2]))
        pieces = split(payload, draw(st.lists(st.integers(0, len(payload)), max_size=3)))
        if not pieces or draw(st.booleans()):
            pieces = [payload, b""] if draw(st.booleans()) else [payload]
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            wire += frame(0x0 if k else opcode, piece, fin=last, width=draw(st.sampled_from([0, 0, 16, 64])))
            if not last and draw(st.booleans()):
                ping = draw(st.binary(max_size=20))
                wire += frame(0x9, ping)
                expected.append(Ping(ping))
        if draw(st.booleans()):
            wire += frame(0xA, b"pong")
        expected.append(payload)
    return bytes(wire), expected


def read_all(pieces: list[bytes]) -> FrameReader:
    reader = FrameReader()
    for piece in pieces:
        reader.feed(piece)
    return reader


# --- the reader ---------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(stream=streams(), data=st.data())
def test_a_stream_cut_anywhere_gives_the_same_messages_in_order(stream: tuple[bytes, Expected], data: Any) -> None:
    wire, expected = stream
    points = data.draw(st.lists(st.integers(0, len(wire)), max_size=40))
    reader = read_all(split(wire, points))
    assert reader.out == expected
    assert not reader.done
    assert reader.buffered == 0


@settings(max_examples=100, deadline=None)
@given(stream=streams())
def test_a_stream_fed_one_byte_at_a_time_gives_the_same_messages(stream: tuple[bytes, Expected]) -> None:
    wire, expected = stream
    if len(wire) > 20_000:
        wire, expected = frame(0x1, b"short"), [b"short"]
    assert read_all([wire[i : i + 1] for i in range(len(wire))]).out == expected


@settings(max_examples=150, deadline=None)
@given(stream=streams(), tail=st.binary(max_size=50), data=st.data())
def test_the_reader_stops_at_a_close_frame_and_hands_back_the_rest(
    stream: tuple[bytes, Expected], tail: bytes, data: Any
) -> None:
    """Everything before the close frame is emitted; ``Close.rest`` plus whatever is fed later is
    exactly the stream from the close frame on (what aiohttp's parser is given)."""
    wire, expected = stream
    close = frame(0x8, struct.pack("!H", 4001) + b"bye")
    full = wire + close + tail
    pieces = split(full, data.draw(st.lists(st.integers(0, len(full)), max_size=20)))
    reader = FrameReader()
    later: list[bytes] = []
    for piece in pieces:
        if reader.done:
            later.append(piece)
        reader.feed(piece)
    assert reader.done
    *messages, stop = reader.out
    assert messages == expected
    assert isinstance(stop, Close)
    assert stop.rest + b"".join(later) == close + tail


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (frame(0x1, b"x", mask=True), "masked frame"),
        (frame(0x1, b"x", rsv=0x40), "reserved bits"),
        (frame(0x3, b"x"), "unexpected opcode 0x3"),
        (frame(0xB, b"x"), "unexpected opcode 0xb"),
        (frame(0x0, b"x"), "continuation frame without a message"),
        (frame(0x1, b"a", fin=False) + frame(0x1, b"b"), "a new message began"),
        (frame(0x9, b"x", fin=False), "fragmented or oversized control frame"),
        (frame(0x9, bytes(126)), "fragmented or oversized control frame"),
        (b"\x81\x7f" + struct.pack("!Q", 1 << 63), "most significant bit"),
    ],
)
def test_protocol_violations_stop_the_reader_with_a_protocol_error(wire: bytes, reason: str) -> None:
    reader = read_all([frame(0x1, b"before"), wire, frame(0x1, b"after")])
    assert reader.done
    assert reader.out[0] == b"before"
    assert isinstance(reader.out[1], Violation)
    assert reader.out[1].code == 1002
    assert reason in reader.out[1].reason
    assert len(reader.out) == 2


def test_a_large_frame_arriving_in_small_reads_is_held_then_emitted_once() -> None:
    payload = pattern(300_000, seed=3)
    wire = frame(0x2, payload)
    pieces = [wire[i : i + 1000] for i in range(0, len(wire), 1000)]
    reader = FrameReader()
    for piece in pieces[:-1]:
        reader.feed(piece)
    assert reader.out == []
    assert reader.buffered == len(wire) - len(pieces[-1])
    reader.feed(pieces[-1])
    assert reader.out == [payload]
    assert reader.buffered == 0


# --- the hand-over from aiohttp's parser ----------------------------------------------------
class _Protocol:
    """What aiohttp's queue and our feed call on the connection's protocol."""

    def __init__(self) -> None:
        self._reading_paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self._reading_paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self._reading_paused = False


class _Ws:
    closed = False


def _aiohttp_event(msg: Any) -> bytes | Ping | None:
    """A message from aiohttp's queue as our reader would emit it (None: a pong, dropped)."""
    if msg.type is WSMsgType.PING:
        return Ping(msg.data)
    if msg.type is WSMsgType.PONG:
        return None
    assert msg.type in (WSMsgType.TEXT, WSMsgType.BINARY), msg
    return bytes(msg.data)


async def _hand_over(wire: bytes, before: int, points: list[int]) -> tuple[list[bytes | Ping], FrameFeed]:
    """aiohttp's parser got ``wire[:before]`` (what followed the 101 in ws_connect's reads), then
    our feed takes over and gets the rest cut at ``points``; every message in the order read."""
    loop = asyncio.get_running_loop()
    protocol = _Protocol()
    queue = WebSocketDataQueue(protocol, 1 << 20, loop=loop)  # type: ignore[arg-type]
    parser = WebSocketReader(queue, 0, compress=False, decode_text=False)
    parser.feed_data(wire[:before])
    feed = FrameFeed(_Ws(), protocol, parser, queue)  # type: ignore[arg-type]
    got: list[bytes | Ping] = []

    async def drain() -> None:
        """What the reading task does: take until there is nothing left."""
        while items := feed.take():
            for item in items:
                if item is AIOHTTP_TURN:
                    if (event := _aiohttp_event(await queue.read())) is not None:
                        got.append(event)
                else:
                    assert isinstance(item, bytes | Ping)
                    got.append(item)

    await drain()
    for piece in split(wire[before:], points):
        feed.feed_data(piece)
        await drain()
    return got, feed


@settings(max_examples=200, deadline=None)
@given(stream=streams(), data=st.data())
def test_the_hand_over_loses_and_repeats_nothing_wherever_aiohttp_stopped(
    stream: tuple[bytes, Expected], data: Any
) -> None:
    wire, expected = stream
    wire += frame(0x1, b"one more")  # a data message after the cut, so that a boundary shows
    before = data.draw(st.integers(0, len(wire)))
    points = data.draw(st.lists(st.integers(0, len(wire)), max_size=10))
    got, feed = asyncio.run(_hand_over(wire, before, points))
    assert got == [*expected, b"one more"]
    assert feed.handover_bytes <= len(wire) - before


def test_the_hand_over_needs_at_most_one_frame_of_bytes_fed_one_at_a_time() -> None:
    messages = [pattern(300, seed=i) for i in range(20)]
    wire = b"".join(frame(0x1, m) for m in messages)
    got, feed = asyncio.run(_hand_over(wire, 1000, [1500, 3000]))  # aiohttp stopped inside the 4th frame
    assert got == messages
    assert feed.taken_over
    assert 0 < feed.handover_bytes <= 304


def test_without_a_boundary_within_the_limit_aiohttp_keeps_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ws_frames, "HANDOVER_LIMIT", 100)
    messages = [pattern(1000, seed=i) for i in range(5)]
    wire = b"".join(frame(0x1, m) for m in messages)
    got, feed = asyncio.run(_hand_over(wire, 10, [2000]))
    assert got == messages
    assert not feed.taken_over
    assert feed.handover_bytes == 100


def test_bytes_held_while_aiohttp_drains_pause_the_socket_until_the_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ws_frames, "HIGH_WATER", 1000)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        queue = WebSocketDataQueue(protocol, 1 << 20, loop=loop)  # type: ignore[arg-type]
        parser = WebSocketReader(queue, 0, compress=False, decode_text=False)
        parser.feed_data(frame(0x1, b"first"))  # aiohttp holds a message when the feed attaches
        feed = FrameFeed(_Ws(), protocol, parser, queue)  # type: ignore[arg-type]
        feed.feed_data(frame(0x1, pattern(600, seed=1)))
        assert not protocol._reading_paused
        feed.feed_data(frame(0x1, pattern(600, seed=2)))
        assert protocol._reading_paused
        assert feed.take() == [AIOHTTP_TURN]  # aiohttp's message first; the held bytes wait
        assert protocol._reading_paused
        assert (await queue.read()).data == b"first"
        # the hand-over: aiohttp's parser completes the first held frame, ours parses the second
        assert feed.take() == [AIOHTTP_TURN, pattern(600, seed=2)]
        assert feed.taken_over
        assert not protocol._reading_paused
        assert (await queue.read()).data == pattern(600, seed=1)
        assert feed.take() == []

    asyncio.run(run())
