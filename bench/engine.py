"""Live-engine benchmarks (issue 3): ingest rate, closed-bar storm, memory, warm-up time.

The simulator and the blasting websocket server run in child processes, so the engine's
figures are its own (one core for the engine, the other for the exchange).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import multiprocessing
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from engine.events import BarClosed, IndicatorsUpdated
from engine.feed.stream_manager import StreamManager
from engine.feed.stream_settings import StreamSettings
from engine.feed.sync import WindowSync
from engine.indicators.registry import parse_requests
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate

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


class _NullBus:
    def publish(self, event: Any) -> None:
        pass


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


# --- engine against the simulator (simulator in a child process) --------------------------
@asynccontextmanager
async def simulator_process(symbols: list[str], *, weight_limit: int = 6000) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "sim-exchange",
        "--port",
        "0",
        "--clock",
        "manual",
        "--weight-limit",
        str(weight_limit),
        "--symbols",
        ",".join(symbols),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            url = (await proc.stdout.readline()).decode().strip()
        yield url
    finally:
        proc.terminate()
        await proc.wait()


@asynccontextmanager
async def engine_on(
    url: str, markets: list[tuple[str, str]], window: int, *, weight_limit: int = 6000
) -> AsyncIterator[LiveEngine]:
    async with aiohttp.ClientSession() as session:
        engine = LiveEngine(
            session=session,
            rest=BinanceRest(session, url, gate=RateGate(weight_limit)),
            stream_url=url.replace("http", "ws", 1),
            indicators=parse_requests(["cipher_b", "macd", "rsi"]),
            config=EngineConfig(window_bars=window, streams=StreamSettings(stall_timeout_s=None)),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


async def bench_warm_up(symbols: int = 100, window: int = 1000) -> float:
    """Seconds from start until ``symbols`` × 1000 bars (1m) are warm."""
    return (await warm_up_run(symbols, window))["seconds"]


async def _rate_limited(ctl: aiohttp.ClientSession, url: str) -> int:
    async with ctl.get(f"{url}/sim/v1/state") as resp:
        state = await resp.json()
    return sum(n for k, n in state["requests"].items() if k.startswith("429 "))


async def warm_up_run(symbols: int, window: int = 1000) -> dict[str, Any]:
    """One warm-up against the simulator at Binance's REQUEST_WEIGHT 6000/min: seconds until every
    window is warm, 429 answers seen by the simulator (must be 0), and the floor the weight budget
    sets (klines weight 2 per market, 80 % of 6000 = 4,800 over any rolling minute: 5,000 markets
    are 10,000 weight, three budgets' worth, so the last third cannot start before 120 s)."""
    names = [f"W{i:04d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url, aiohttp.ClientSession() as ctl:
        t0 = time.perf_counter()
        async with engine_on(url, [(s, "1m") for s in names], window) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            seconds = time.perf_counter() - t0
        limited = await _rate_limited(ctl, url)
    # within any rolling minute at most `budget` weight goes out, so the k-th budget's worth
    # of requests cannot start before (k - 1) minutes have passed
    budget = RateGate(6000).budget
    floor = 60.0 * (math.ceil(2 * symbols / budget) - 1)
    return {"markets": symbols, "seconds": seconds, "rate_limited": limited, "budget_floor_s": floor}


def bench_warm_up_scaling(sizes: tuple[int, ...] = (1000, 2000, 5000)) -> list[dict[str, Any]]:
    """Warm-up of 1,000 / 2,000 / 5,000 markets × 1,000 bars, each in a fresh engine and simulator."""
    return [asyncio.run(warm_up_run(n)) for n in sizes]


async def bench_closed_bar_storm(
    symbols: int = 1000, window: int = 1000, intervals: tuple[str, ...] = ("1m",)
) -> dict[str, float]:
    """Every window closes a bar on the same advance: latency of each window's indicator update
    (default set) after the simulator pushed the closes.  The simulator's weight limit is raised for
    this bench only, so that warming 10,000 windows does not take minutes (warm-up is benched apart)."""
    names = [f"C{i:04d}USDT" for i in range(symbols)]
    markets = [(s, i) for s in names for i in intervals]
    limit = max(6000, 4 * len(markets))
    async with simulator_process(names, weight_limit=limit) as url, aiohttp.ClientSession() as ctl:
        async with engine_on(url, markets, window, weight_limit=limit) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            sub = engine.subscribe([BarClosed, IndicatorsUpdated], maxsize=len(markets) * 8)
            await asyncio.sleep(3)  # let warm-up recomputation settle before measuring
            while sub.qsize():
                sub.get_nowait()
            # 5m and 1m both close at a five-minute boundary: advance to the next one
            now_ms = int((await (await ctl.get(f"{url}/sim/v1/state")).json())["clock_ms"])
            step = 300_000 if "5m" in intervals else 60_000
            advance = (now_ms // step + 1) * step - now_ms
            async with ctl.post(f"{url}/sim/v1/advance", json={"seconds": advance / 1000}) as resp:
                await resp.read()
            t0 = time.perf_counter()
            closed: dict[tuple[str, str], float] = {}
            updated: dict[tuple[str, str], float] = {}
            async with asyncio.timeout(300):
                while len(updated) < len(markets):
                    ev = await sub.get()
                    now = time.perf_counter() - t0
                    if isinstance(ev, BarClosed) and not ev.backfilled:
                        closed.setdefault((ev.symbol, ev.interval), now)
                    elif isinstance(ev, IndicatorsUpdated):
                        updated.setdefault((ev.symbol, ev.interval), now)
            lat = sorted(updated.values())
            own = sorted(updated[k] - closed[k] for k in updated if k in closed)
            last_close = max(closed.values()) if closed else 0.0
            after = [max(0.0, t - last_close) for t in lat]
            return {
                "windows": len(markets),
                "p50_s": lat[len(lat) // 2],
                "p99_s": lat[int(len(lat) * 0.99) - 1],
                "max_s": lat[-1],
                "last_close_s": last_close,
                "after_last_close_p99_s": after[int(len(after) * 0.99) - 1],
                "after_last_close_max_s": after[-1],
                "own_close_p50_s": own[len(own) // 2] if own else float("nan"),
                "own_close_p99_s": own[int(len(own) * 0.99) - 1] if own else float("nan"),
            }


def _rss_mb() -> float:
    text = open(f"/proc/{os.getpid()}/status").read()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]


async def _memory_run(symbols: int, window: int) -> float:
    names = [f"M{i:04d}USDT" for i in range(symbols)]
    async with simulator_process(names) as url:
        async with engine_on(url, [(s, i) for s in names for i in ("1m", "5m")], window) as engine:
            async with asyncio.timeout(900):
                await engine.wait_ready()
            await asyncio.sleep(5)  # indicator results for every window
            return _rss_mb()


def bench_memory(symbols: int = 1000, window: int = 1000) -> float:
    """RSS (MB) of a fresh process holding 1000 symbols × 2 intervals × 1000 bars with indicators."""
    code = f"import asyncio; from bench.engine import _memory_run; print(asyncio.run(_memory_run({symbols}, {window})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200, check=True)
    return float(out.stdout.strip().splitlines()[-1])


async def run_all() -> dict[str, Any]:
    ours = await bench_ingest_ours()
    theirs = await bench_ingest_python_binance()
    return {
        "ingest_msgs_per_s": ours,
        "ingest_python_binance_msgs_per_s": theirs,
        "ingest_server_ceiling_msgs_per_s": await bench_ingest_ceiling(),
        "warm_up_100x1000_s": await bench_warm_up(),
        "closed_bar_storm": await bench_closed_bar_storm(),
    }


def main() -> None:
    """`python -m bench.engine`: ingest, warm-up, closed-bar storm and engine RSS rows
    (`python -m bench.engine scale`: the engine-scale rows — warm-up 1,000/2,000/5,000 markets and
    the 10,000-window storm)."""
    if sys.argv[1:] == ["scale"]:
        print_scale(run_scale())
        return
    r = asyncio.run(run_all())
    print(
        f"ingest: {r['ingest_msgs_per_s']:,.0f} msgs/s (python-binance {r['ingest_python_binance_msgs_per_s']:,.0f};"
        f" the blast server's ceiling {r['ingest_server_ceiling_msgs_per_s']:,.0f})"
    )
    print(f"warm-up 100 symbols x 1000 bars: {r['warm_up_100x1000_s']:.2f} s")
    storm = r["closed_bar_storm"]
    print(f"closed-bar storm, 1000 symbols: p50 {storm['p50_s']:.3f} s, p99 {storm['p99_s']:.3f} s")
    print(f"RSS 1000 symbols x 2 intervals x 1000 bars: {bench_memory():.0f} MB")


def bench_memory_per_window() -> dict[str, float]:
    """What one more 1000-bar window with the default indicators costs: RSS of a process holding
    2,000 windows minus one holding 1,000 (each a fresh process), over the 1,000 added."""
    small, large = bench_memory(500), bench_memory(1000)
    return {"rss_1000_windows_mb": small, "rss_2000_windows_mb": large, "per_window_mb": (large - small) / 1000}


def run_scale() -> dict[str, Any]:
    return {
        "memory": bench_memory_per_window(),
        "warm_up": bench_warm_up_scaling(),
        "storm_10000": asyncio.run(bench_closed_bar_storm(5000, 1000, ("1m", "5m"))),
    }


def print_scale(r: dict[str, Any]) -> None:
    m = r["memory"]
    print(
        f"RSS per 1000-bar window with the default indicators: {m['per_window_mb']:.3f} MB"
        f" (1,000 windows {m['rss_1000_windows_mb']:.0f} MB, 2,000 windows {m['rss_2000_windows_mb']:.0f} MB)"
    )
    for w in r["warm_up"]:
        print(
            f"warm-up {w['markets']:>5} markets x 1000 bars: {w['seconds']:6.1f} s, 429 answers {w['rate_limited']}, "
            f"weight-budget floor {w['budget_floor_s']:.0f} s"
        )
    s = r["storm_10000"]
    print(
        f"closed-bar storm, {s['windows']} windows, from the advance: p50 {s['p50_s']:.3f} s, p99 {s['p99_s']:.3f} s;"
        f" the last close message arrived at {s['last_close_s']:.3f} s;"
        f" after it: p99 {s['after_last_close_p99_s']:.3f} s,"
        f" all {s['after_last_close_max_s']:.3f} s; each window from its own close: p50 {s['own_close_p50_s']:.3f} s,"
        f" p99 {s['own_close_p99_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
