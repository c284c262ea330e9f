"""Kline-ingest benchmarks: our stream manager against python-binance's socket manager.

Owns the websocket server that blasts pre-encoded kline frames (a child process, so the
client's figure is its own: one core for the client, the other for the server), the three
clients it measures — ours (frames split, JSON, decode, applied to 1,000 windows, counted as
the engine bus's ticks), python-binance's (receive + JSON only) and the server's own ceiling
(a client that discards the bytes) — and ``python -m bench.ingest``, which interleaves ours
and python-binance's over several runs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import multiprocessing
import os
import re
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from engine import BinanceRest, StreamManager, StreamSettings, WindowSync

INGEST_MESSAGES = 200_000
INGEST_SYMBOLS = 1000


# --- a websocket server that blasts kline frames (child process) ---------------------------
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_BLAST_CHUNK = 1 << 20


def kline_frames(n: int) -> list[bytes]:
    """The ``n`` combined-stream kline payloads every ingest bench consumes (JSON bytes)."""
    syms = [f"S{i}USDT" for i in range(INGEST_SYMBOLS)]
    frames = []
    for i in range(n):
        s = syms[i % INGEST_SYMBOLS]
        k = {
            "t": 60_000,
            "T": 119_999,
            "s": s,
            "i": "1m",
            "o": "1.0",
            "c": f"1.{i % 97}",
            "h": "1.9",
            "l": "0.9",
            "v": "10",
            "n": 5,
            "x": False,
            "q": "10",
            "V": "5",
            "Q": "5",
            "B": "0",
        }
        frames.append(orjson.dumps({"stream": f"{s.lower()}@kline_1m", "data": {"e": "kline", "E": i, "s": s, "k": k}}))
    return frames


def ws_wire(payloads: list[bytes], opcode: int = 0x1) -> bytes:
    """The payloads as unmasked server-to-client websocket frames (FIN set), back to back."""
    out = bytearray()
    for p in payloads:
        n = len(p)
        if n < 126:
            out += struct.pack("!BB", 0x80 | opcode, n)
        elif n < 1 << 16:
            out += struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            out += struct.pack("!BBQ", 0x80 | opcode, 127, n)
        out += p
    return bytes(out)


async def _client_frames(reader: asyncio.StreamReader) -> AsyncIterator[tuple[int, bytes]]:
    """(opcode, unmasked payload) of each frame the client sends, until it goes away."""
    while True:
        b0, b1 = await reader.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await reader.readexactly(8))
        mask = await reader.readexactly(4) if b1 & 0x80 else b"\0\0\0\0"
        data = await reader.readexactly(n)
        yield b0 & 0x0F, bytes(c ^ mask[i % 4] for i, c in enumerate(data))


def _blast_server(port_queue: Any, n: int) -> None:
    """Serve the ``n`` kline frames to every websocket client as fast as the socket takes them.

    The frames are encoded into wire bytes once and written in 1 MiB chunks, so the server costs
    a few syscalls per megabyte and is not what a client's rate measures (a client that only
    discards the bytes reads them several times faster than any client parses them).  Every
    client gets the identical byte stream.  The server answers pings and the closing handshake.
    """
    wire = ws_wire(kline_frames(n))

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            found = re.search(rb"(?im)^sec-websocket-key:[ \t]*(\S+)", head)
            if found is None:
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                return
            accept = base64.b64encode(hashlib.sha1(found.group(1) + _WS_GUID).digest())
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            view = memoryview(wire)
            for i in range(0, len(wire), _BLAST_CHUNK):
                writer.write(view[i : i + _BLAST_CHUNK])
                await writer.drain()
            async for opcode, data in _client_frames(reader):
                if opcode == 0x9:
                    writer.write(ws_wire([data], 0xA))
                elif opcode == 0x8:
                    writer.write(ws_wire([data[:2]], 0x8))
                    await writer.drain()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.sleep(3600)

    asyncio.run(main())


@asynccontextmanager
async def _blaster(n: int) -> AsyncIterator[int]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_blast_server, args=(q, n), daemon=True)
    proc.start()
    try:
        yield await asyncio.to_thread(q.get, True, 60)
    finally:
        proc.terminate()
        proc.join(5)


async def bench_ingest_ours(n: int = INGEST_MESSAGES) -> float:
    """Kline messages per second parsed and applied to windows by our stream manager.

    Counted where an applied update leaves the windows: the :class:`~engine.events.Tick` each one
    publishes on the bus (a bus with no subscribers but the count)."""
    async with _blaster(n) as port, aiohttp.ClientSession() as session:
        bus = _CountingBus(n)
        sync = WindowSync(BinanceRest(session, "http://127.0.0.1:9"), bus)
        for i in range(INGEST_SYMBOLS):
            sync.add(f"S{i}USDT", "1m")
        sync.on_streams_live = lambda streams: None  # type: ignore[method-assign]
        manager = StreamManager(session, f"ws://127.0.0.1:{port}", sync, StreamSettings(stall_timeout_s=None))
        manager.add(["s0usdt@kline_1m"])
        async with manager.running():
            t0 = time.perf_counter()
            async with asyncio.timeout(120):
                await bus.done.wait()
            return n / (time.perf_counter() - t0)


async def bench_ingest_python_binance(n: int = INGEST_MESSAGES) -> float:
    """The same stream consumed by python-binance's socket manager (receive + JSON only)."""
    from binance import AsyncClient, BinanceSocketManager

    async with _blaster(n) as port:
        client = AsyncClient()
        try:
            bm = BinanceSocketManager(client, max_queue_size=n + 10)
            bm.STREAM_URL = f"ws://127.0.0.1:{port}/"
            received = 0
            async with bm.multiplex_socket(["s0usdt@kline_1m"]) as sock:
                t0 = time.perf_counter()
                async with asyncio.timeout(120):
                    while received < n:
                        msg = await sock.recv()
                        if isinstance(msg, dict) and msg.get("data"):
                            received += 1
                return received / (time.perf_counter() - t0)
        finally:
            await client.close_connection()


async def bench_ingest_ceiling(n: int = INGEST_MESSAGES) -> float:
    """The blast server's own ceiling: messages per second to a client that discards the bytes."""
    async with _blaster(n) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        try:
            key = base64.b64encode(os.urandom(16))
            writer.write(
                b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n"
            )
            await reader.readuntil(b"\r\n\r\n")
            left = len(ws_wire(kline_frames(n)))
            t0 = time.perf_counter()
            async with asyncio.timeout(120):
                while left > 0:
                    chunk = await reader.read(1 << 20)
                    if not chunk:
                        raise ConnectionError("the blast server went away")
                    left -= len(chunk)
            return n / (time.perf_counter() - t0)
        finally:
            writer.close()


class _CountingBus:
    """Counts the events published; ``done`` is set at the ``n``-th."""

    def __init__(self, n: int) -> None:
        self.count = 0
        self.n = n
        self.done = asyncio.Event()

    def publish(self, event: Any) -> None:
        self.count += 1
        if self.count == self.n:
            self.done.set()


async def run_interleaved(runs: int = 3, n: int = INGEST_MESSAGES) -> dict[str, Any]:
    """``runs`` rounds of ours then python-binance's on the same stream, then the server's ceiling."""
    rounds = []
    for _ in range(runs):
        ours = await bench_ingest_ours(n)
        theirs = await bench_ingest_python_binance(n)
        rounds.append({"ours_msgs_per_s": ours, "python_binance_msgs_per_s": theirs})
    return {"runs": rounds, "server_ceiling_msgs_per_s": await bench_ingest_ceiling(n)}


def main() -> None:
    """`python -m bench.ingest`: the kline-ingest row — ours, python-binance and the blast server's ceiling."""
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=main.__doc__)
    parser.add_argument("--runs", type=int, default=3, help="rounds of ours then python-binance (default 3)")
    parser.add_argument("--messages", type=int, default=INGEST_MESSAGES, help="kline messages per client")
    args = parser.parse_args()
    r = asyncio.run(run_interleaved(args.runs, args.messages))
    for i, run in enumerate(r["runs"], 1):
        ours, theirs = run["ours_msgs_per_s"], run["python_binance_msgs_per_s"]
        print(f"run {i}: ingest {ours:,.0f} msgs/s, python-binance {theirs:,.0f} msgs/s (ours is {ours / theirs:.2f}x)")
    print(f"the blast server's ceiling: {r['server_ceiling_msgs_per_s']:,.0f} msgs/s")


if __name__ == "__main__":
    main()
