"""Market streams: connections, subscriptions, and pushing kline updates to them.

Each connection has a send queue drained by its own writer task, so a slow client never
blocks the exchange.  The writer also sends ping frames, enforces the maximum connection
age, and goes silent while a stall fault is active (nothing at all is sent, as with a
stuck TCP path).  Kline keys are ``(SYMBOL, interval)``; stream names are Binance's
lowercase ``<symbol>@kline_<interval>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from brokers.simulator.faults import Faults

MAX_STREAMS_PER_CONNECTION = 1024


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
    streams: dict[str, int] = field(default_factory=dict)  # name → open time last pushed
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

    def state(self) -> dict[str, Any]:
        subs = sorted({name for c in self.connections for name in c.streams})
        return {"connections": len(self.connections), "subscriptions": subs}

    async def close(self) -> None:
        for conn in list(self.connections):
            conn.queue.put_nowait(None)
            with contextlib.suppress(Exception):
                await conn.ws.close()
