"""Market streams: stream names, connections and their subscriptions.

Each connection has a send queue drained by its own writer task, so a slow client never
blocks the exchange.  The writer also sends ping frames, enforces the maximum connection
age, and goes silent while a stall fault is active (nothing at all is sent, as with a
stuck TCP path).  Stream names are Binance's (web-socket-streams.md), parsed once into a
:class:`StreamSpec`; kline keys are ``(SYMBOL, interval)``.  What is pushed on the
streams other than klines is market_streams.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from aiohttp import web

from simulator.faults import Faults

MAX_STREAMS_PER_CONNECTION = 1024
REAL_TIME = 0
"""A stream's update speed for "Real-time" streams: pushed whenever anything happened."""
KLINE_PERIOD_MS = 2_000

StreamKind = Literal[
    "kline",
    "trade",
    "aggTrade",
    "blockTrade",
    "depth",
    "partialDepth",
    "bookTicker",
    "ticker",
    "miniTicker",
    "windowTicker",
    "avgPrice",
]
WINDOWS_MS: dict[str, int] = {"1h": 3_600_000, "4h": 14_400_000, "1d": 86_400_000}
"""The rolling-window ticker sizes of ``<symbol>@ticker_<window>`` and ``!ticker_<window>@arr``."""
PARTIAL_LEVELS = ("5", "10", "20")
_SYMBOL_STREAMS: dict[str, tuple[StreamKind, int]] = {
    "trade": ("trade", REAL_TIME),
    "aggTrade": ("aggTrade", REAL_TIME),
    "blockTrade": ("blockTrade", REAL_TIME),
    "depth": ("depth", 1_000),
    "depth@100ms": ("depth", 100),
    "bookTicker": ("bookTicker", REAL_TIME),
    "ticker": ("ticker", 1_000),
    "miniTicker": ("miniTicker", 1_000),
    "avgPrice": ("avgPrice", 1_000),
    **{f"depth{n}": ("partialDepth", 1_000) for n in PARTIAL_LEVELS},
    **{f"depth{n}@100ms": ("partialDepth", 100) for n in PARTIAL_LEVELS},
    **{f"ticker_{w}": ("windowTicker", 1_000) for w in WINDOWS_MS},
}
_MARKET_STREAMS: dict[str, tuple[StreamKind, str]] = {
    "!miniTicker@arr": ("miniTicker", ""),
    **{f"!ticker_{w}@arr": ("windowTicker", w) for w in WINDOWS_MS},
}


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A parsed stream name: what it carries, for which market, and how often it is pushed.

    ``symbol`` is upper case, or None for the all-market ``!…@arr`` streams; ``arg`` is the
    kline interval, the rolling window, or the partial book's levels; ``period_ms`` is the
    documented update speed (``REAL_TIME`` for the real-time streams).
    """

    name: str
    kind: StreamKind
    symbol: str | None
    arg: str = ""
    period_ms: int = REAL_TIME


def parse_spec(name: str) -> StreamSpec | None:
    """The spec of a Binance market stream name, or None when the name is no stream Binance documents.

    The symbol's case is kept as it came (``upper()`` only in ``symbol``): callers check
    that it was lower case, as Binance requires.
    """
    if name in _MARKET_STREAMS:
        kind, window = _MARKET_STREAMS[name]
        return StreamSpec(name, kind, None, window, 1_000)
    sym, sep, rest = name.partition("@")
    if not sep or not sym or sym.startswith("!"):
        return None
    if rest.startswith("kline_"):
        return StreamSpec(name, "kline", sym.upper(), rest[len("kline_") :], KLINE_PERIOD_MS)
    if rest not in _SYMBOL_STREAMS:
        return None
    kind, period = _SYMBOL_STREAMS[rest]
    arg = rest.removeprefix("ticker_") if kind == "windowTicker" else ""
    if kind == "partialDepth":
        arg = rest.removeprefix("depth").removesuffix("@100ms")
    return StreamSpec(name, kind, sym.upper(), arg, period)


def parse_stream(name: str) -> tuple[str, str] | None:
    """``btcusdt@kline_1m`` → ("BTCUSDT", "1m"), else None."""
    sym, sep, kind = name.partition("@")
    if not sep or not kind.startswith("kline_") or not sym:
        return None
    return sym.upper(), kind[len("kline_") :]


@dataclass(eq=False)
class StreamConnection:
    """One websocket client."""

    ws: web.WebSocketResponse
    transport: Any
    combined: bool
    opened: float = field(default_factory=time.monotonic)
    streams: dict[str, int] = field(default_factory=dict)  # name → kline open time last pushed (0: not a kline)
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def send_json(self, obj: Any) -> None:
        self.queue.put_nowait(orjson.dumps(obj))

    def push(self, stream: str, data: Any) -> None:
        self.send_json({"stream": stream, "data": data} if self.combined else data)


class StreamHub:
    """All open stream connections of the simulator."""

    def __init__(self, faults: Faults, *, ping_interval_s: float = 20.0, max_age_s: float = 86_400.0) -> None:
        self.faults = faults
        self.ping_interval_s = ping_interval_s
        self.max_age_s = max_age_s
        self.connections: set[StreamConnection] = set()

    def subscribers(self) -> dict[tuple[str, str], list[tuple[StreamConnection, str]]]:
        """Kline key → the connections (and stream names) subscribed to it."""
        out: dict[tuple[str, str], list[tuple[StreamConnection, str]]] = {}
        for conn in self.connections:
            for name in conn.streams:
                key = parse_stream(name)
                if key is not None:
                    out.setdefault(key, []).append((conn, name))
        return out

    async def writer(self, conn: StreamConnection) -> None:
        """Send queued frames and pings; close at the age limit."""
        next_ping = time.monotonic() + self.ping_interval_s
        while True:
            now = time.monotonic()
            deadline = min(next_ping, conn.opened + self.max_age_s)
            try:
                async with asyncio.timeout(max(0.0, deadline - now)):
                    item = await conn.queue.get()
            except TimeoutError:
                item = b""
            if item is None:
                return
            now = time.monotonic()
            if now >= conn.opened + self.max_age_s:
                await conn.ws.close(code=1000, message=b"connection age limit")
                return
            if self.faults.stalled(conn.opened):
                continue  # a stalled path delivers nothing
            if item:
                await conn.ws.send_str(item.decode())
            if now >= next_ping:
                await conn.ws.ping()
                next_ping = now + self.ping_interval_s

    def drop_all(self) -> int:
        """Abort every connection's transport (the client sees an abnormal close)."""
        conns = list(self.connections)
        for conn in conns:
            if conn.transport is not None:
                conn.transport.abort()
            conn.queue.put_nowait(None)
        return len(conns)

    def shutdown_all(self, event_ms: int) -> int:
        """Send serverShutdown on every connection, then close it."""
        conns = list(self.connections)
        for conn in conns:
            conn.send_json({"e": "serverShutdown", "E": event_ms})
            conn.queue.put_nowait(b"")
            conn.queue.put_nowait(None)
        return len(conns)

    def by_stream(self) -> dict[str, list[StreamConnection]]:
        """Stream name → the connections subscribed to it."""
        out: dict[str, list[StreamConnection]] = {}
        for conn in self.connections:
            for name in conn.streams:
                out.setdefault(name, []).append(conn)
        return out

    def subscribed(self, name: str) -> bool:
        return any(name in conn.streams for conn in self.connections)

    def state(self) -> dict[str, Any]:
        subs = sorted({name for c in self.connections for name in c.streams})
        return {"connections": len(self.connections), "subscriptions": subs}

    async def close(self) -> None:
        for conn in list(self.connections):
            conn.queue.put_nowait(None)
            with contextlib.suppress(Exception):
                await conn.ws.close()
