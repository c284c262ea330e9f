"""A stream connection reading through our frame reader, against a server that writes raw bytes:
frames already sent with the 101, pings, fragments, close codes, violations, the fallback."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest

from engine.feed.binance_streams import StreamConnection
from engine.feed.messages import KlineUpdate, parse_kline
from engine.feed.stream_settings import StreamSettings
from engine.feed.ws_frames import FrameFeed
from tests.engine.test_ws_frames import frame

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STREAM = "s0usdt@kline_1m"


def kline(i: int) -> bytes:
    k = {"t": 60_000, "s": "S0USDT", "i": "1m", "o": "1", "h": "2", "l": "0.5", "c": f"1.{i}", "v": "3", "x": False}
    return orjson.dumps({"stream": STREAM, "data": {"e": "kline", "E": i, "s": "S0USDT", "k": k}})


class Peer:
    """One accepted connection: the 101 answer (not yet sent) and the raw socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes) -> None:
        self.reader = reader
        self.writer = writer
        self.answer = answer

    async def client_frame(self) -> tuple[int, bytes]:
        """The client's next frame (opcode, unmasked payload); client frames must be masked."""
        b0, b1 = await self.reader.readexactly(2)
        assert b1 & 0x80, "client frames are masked"
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
        key = await self.reader.readexactly(4)
        data = await self.reader.readexactly(n)
        return b0 & 0x0F, bytes(c ^ key[i % 4] for i, c in enumerate(data))

    async def until_closed(self) -> int:
        """Read the client's frames until its close frame, answer it; returns the client's close code."""
        while True:
            opcode, data = await self.client_frame()
            if opcode == 0x8:
                self.writer.write(frame(0x8, data[:2]))
                await self.writer.drain()
                return int(struct.unpack("!H", data[:2])[0]) if len(data) >= 2 else 0


Script = Callable[[Peer], Awaitable[None]]


@asynccontextmanager
async def raw_server(*scripts: Script) -> AsyncIterator[str]:
    """A websocket server playing ``scripts[k]`` on its k-th connection (the last one after that)."""
    accepted = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        script = scripts[min(accepted, len(scripts) - 1)]
        accepted += 1
        head = await reader.readuntil(b"\r\n\r\n")
        found = re.search(rb"(?im)^sec-websocket-key:[ \t]*(\S+)", head)
        assert found is not None
        accept = base64.b64encode(hashlib.sha1(found.group(1) + GUID).digest())
        answer = (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        try:
            await script(Peer(reader, writer, answer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


class Sink:
    """Records what the connection delivers; ``wait_for`` waits (bounded) until a condition on it holds.

    A session's end is seen as ``downs`` (the connection's ``last_error`` is set by the time a
    waiter runs: right after the streams went down, before the connection's task yields)."""

    def __init__(self) -> None:
        self.updates: list[KlineUpdate] = []
        self.live: list[str] = []
        self.downs = 0
        self.probe: Callable[[], Any] = lambda: None
        self.probed: list[Any] = []
        """``probe()`` at each update."""
        self._changed = asyncio.Event()

    def on_kline(self, update: KlineUpdate) -> None:
        self.updates.append(update)
        self.probed.append(self.probe())
        self._changed.set()

    def on_streams_live(self, streams: Collection[str]) -> None:
        self.live.extend(streams)
        self._changed.set()

    def on_streams_down(self, streams: Collection[str]) -> None:
        self.downs += 1
        self._changed.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


@asynccontextmanager
async def connection(url: str, sink: Any, **settings: Any) -> AsyncIterator[StreamConnection]:
    opts: dict[str, Any] = {"stall_timeout_s": None, "rotate_after_s": None, "backoff_initial_s": 0.01}
    opts.update(settings)
    async with aiohttp.ClientSession() as session:
        conn = StreamConnection(1, session, url, sink, StreamSettings(**opts), random.Random(1))
        conn.add([STREAM])
        task = asyncio.create_task(conn.run())
        try:
            yield conn
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_frames_sent_with_the_101_and_a_frame_cut_there_arrive_once_in_order() -> None:
    """The server writes its 101 answer, 50 frames and half a frame in one write: aiohttp's parser
    has them when ws_connect returns; the rest follows once those were delivered."""
    wire = b"".join(frame(0x1, kline(i)) for i in range(100))
    cut = len(b"".join(frame(0x1, kline(i)) for i in range(50))) + 40
    sink = Sink()
    first_half = asyncio.Event()

    async def script(peer: Peer) -> None:
        peer.writer.write(peer.answer + wire[:cut])
        await first_half.wait()
        peer.writer.write(wire[cut:])
        await peer.until_closed()

    async with raw_server(script) as url, connection(url, sink) as conn:
        await sink.wait_for(lambda: len(sink.updates) >= 50)
        first_half.set()
        await sink.wait_for(lambda: len(sink.updates) >= 100)
        assert sink.updates == [parse_kline(orjson.loads(kline(i))["data"]) for i in range(100)]
        frames = conn._frames
        assert frames is not None and frames.taken_over
        assert conn.stats.messages == 100 and conn.stats.bad_messages == 0


async def test_a_burst_larger_than_aiohttps_queue_arrives_whole() -> None:
    """Half a megabyte at once: aiohttp's queue holds back part of it (over its limit) when the
    hand-over starts; nothing is lost or repeated."""
    n = 3000
    wire = b"".join(frame(0x1, kline(i)) for i in range(n))
    sink = Sink()

    async def script(peer: Peer) -> None:
        peer.writer.write(peer.answer + wire)
        await peer.until_closed()

    async with raw_server(script) as url, connection(url, sink) as conn:
        await sink.wait_for(lambda: len(sink.updates) >= n)
        assert [u.event_time_ms for u in sink.updates] == list(range(n))
        assert conn.stats.messages == n


async def test_pings_are_answered_with_pongs_and_fragments_joined() -> None:
    sink = Sink()
    pong: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def script(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)))
        msg = kline(1)
        peer.writer.write(frame(0x1, msg[:10], fin=False) + frame(0x9, b"are you there"))
        peer.writer.write(frame(0x0, msg[10:100], fin=False) + frame(0x0, msg[100:], width=64))
        opcode, data = await peer.client_frame()
        pong.set_result(data if opcode == 0xA else b"opcode %d" % opcode)
        await peer.until_closed()

    async with raw_server(script) as url, connection(url, sink):
        async with asyncio.timeout(10):
            assert await pong == b"are you there"
        await sink.wait_for(lambda: len(sink.updates) >= 2)
        assert [u.event_time_ms for u in sink.updates] == [0, 1]


async def test_a_close_from_the_server_reports_its_code_and_reconnects() -> None:
    """The close frame comes after the hand-over: our reader gives it to aiohttp, which answers it
    and reports its code."""
    sink = Sink()

    async def closing(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)))
        await sink.wait_for(lambda: len(sink.updates) >= 1)
        peer.writer.write(frame(0x1, kline(1)) + frame(0x1, kline(2)) + frame(0x8, struct.pack("!H", 4001) + b"bye"))
        opcode, _ = await peer.client_frame()  # aiohttp answers the close
        assert opcode == 0x8

    async def serving(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(3)))
        await peer.until_closed()

    async with raw_server(closing, serving) as url, connection(url, sink) as conn:
        sink.probe = lambda: conn._frames is not None and conn._frames.taken_over
        await sink.wait_for(lambda: len(sink.updates) >= 4)
        assert [u.event_time_ms for u in sink.updates] == [0, 1, 2, 3]
        assert sink.probed[1:3] == [True, True]  # our reader had the stream when the close came
        assert conn.stats.closes == 1 and conn.stats.connects == 2
        assert sink.live == [STREAM, STREAM]
        assert conn.connected and conn.last_error is None


async def test_the_close_code_reaches_the_last_error() -> None:
    sink = Sink()

    async def closing(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)))
        await sink.wait_for(lambda: len(sink.updates) >= 1)
        peer.writer.write(frame(0x1, kline(1)) + frame(0x1, kline(2)) + frame(0x8, struct.pack("!H", 4001)))
        await peer.client_frame()

    async with raw_server(closing) as url, connection(url, sink, backoff_initial_s=300.0) as conn:
        await sink.wait_for(lambda: sink.downs >= 1)
        assert conn.last_error is not None
        assert "closed the connection (code 4001)" in conn.last_error.message
        assert [u.event_time_ms for u in sink.updates] == [0, 1, 2]
        assert conn.stats.closes == 1


async def test_a_protocol_violation_fails_the_connection_with_an_error() -> None:
    sink = Sink()
    code: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def violating(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)))
        await sink.wait_for(lambda: len(sink.updates) >= 1)
        peer.writer.write(
            frame(0x1, kline(1)) + frame(0x1, kline(2)) + frame(0x1, b"x", mask=True) + frame(0x1, kline(9))
        )
        opcode, data = await peer.client_frame()
        code.set_result(struct.unpack("!H", data[:2])[0] if opcode == 0x8 else -opcode)
        await asyncio.Event().wait()

    async with raw_server(violating) as url, connection(url, sink, backoff_initial_s=300.0) as conn:
        await sink.wait_for(lambda: sink.downs >= 1)
        assert conn.last_error is not None
        assert conn.last_error.message.startswith("websocket error from 127.0.0.1")
        assert conn.last_error.message.endswith(": masked frame from the server")
        async with asyncio.timeout(10):
            assert await code == 1002  # the close frame aiohttp sends for a protocol error
        assert [u.event_time_ms for u in sink.updates] == [0, 1, 2]
        assert conn.stats.closes == 1


async def test_a_server_shutdown_ends_the_session_and_the_close_handshake_completes() -> None:
    """After ``serverShutdown`` the connection closes (our frame reader hands the server's close
    reply to aiohttp, so ws.close() does not wait out its timeout) and reconnects at once."""
    sink = Sink()
    client_codes: list[int] = []
    shutdown = orjson.dumps({"stream": "!serverShutdown", "data": {"e": "serverShutdown", "E": 1}})

    async def first(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)) + frame(0x1, shutdown) + frame(0x1, kline(5)))
        client_codes.append(await peer.until_closed())

    async def second(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(1)))
        await peer.until_closed()

    loop = asyncio.get_running_loop()
    async with raw_server(first, second) as url, connection(url, sink) as conn:
        await sink.wait_for(lambda: len(sink.updates) >= 1)
        started = loop.time()
        await sink.wait_for(lambda: len(sink.updates) >= 2)
        assert loop.time() - started < 1.5  # ws.close() did not wait for its 2 s timeout
        assert [u.event_time_ms for u in sink.updates] == [0, 1]
        assert conn.stats.shutdowns == 1 and conn.stats.connects == 2
        assert client_codes == [1000]


async def test_bad_messages_are_counted_and_skipped() -> None:
    sink = Sink()

    async def script(peer: Peer) -> None:
        bad = [b"not json", b"[1, 2]", orjson.dumps({"data": {"e": "kline", "k": {"s": "S0USDT"}}})]
        peer.writer.write(peer.answer + b"".join(frame(0x1, m) for m in [kline(0), *bad, kline(1)]))
        await peer.until_closed()

    async with raw_server(script) as url, connection(url, sink) as conn:
        await sink.wait_for(lambda: len(sink.updates) >= 2)
        assert conn.stats.bad_messages == 3
        assert conn.stats.messages == 5


async def test_subscribe_acknowledgements_make_streams_live() -> None:
    sink = Sink()

    async def script(peer: Peer) -> None:
        peer.writer.write(peer.answer + frame(0x1, kline(0)))
        while True:
            opcode, data = await peer.client_frame()
            if opcode == 0x1:
                request = orjson.loads(data)
                assert request["method"] == "SUBSCRIBE"
                peer.writer.write(frame(0x1, orjson.dumps({"result": None, "id": request["id"]})))
                peer.writer.write(frame(0x1, kline(1)))
            elif opcode == 0x8:
                return

    async with raw_server(script) as url, connection(url, sink, max_url_streams=1, control_interval_s=0.0) as conn:
        conn.add(["s1usdt@kline_1m"])  # after the URL's one: subscribed by message
        await sink.wait_for(lambda: len(sink.updates) >= 2 and "s1usdt@kline_1m" in sink.live)
        assert "s1usdt@kline_1m" in conn.live


async def test_when_aiohttps_internals_differ_the_messages_come_through_ws_receive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(FrameFeed, "attach", classmethod(lambda cls, ws: None))
    sink = Sink()

    async def script(peer: Peer) -> None:
        peer.writer.write(peer.answer + b"".join(frame(0x1, kline(i)) for i in range(20)) + frame(0x9, b"hi"))
        opcode, data = await peer.client_frame()
        assert (opcode, data) == (0xA, b"hi")
        peer.writer.write(frame(0x8, struct.pack("!H", 4002)))
        await peer.client_frame()
        await asyncio.Event().wait()

    async with raw_server(script) as url, connection(url, sink, backoff_initial_s=300.0) as conn:
        await sink.wait_for(lambda: sink.downs >= 1)
        assert conn.last_error is not None
        assert conn._frames is None
        assert [u.event_time_ms for u in sink.updates] == list(range(20))
        assert "(code 4002)" in conn.last_error.message
