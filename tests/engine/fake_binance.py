"""A tiny Binance stand-in for the feed's unit tests: klines, server time and combined streams.

Bars are a pure function of (symbol, interval, open time), the clock is manual, and the
forming kline deliberately differs from its final values so an open candle stored as
closed is caught.  Faults: dropping connections, stalling (keep the socket, send
nothing), serverShutdown, and 429 answers with Retry-After.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from engine.market_data.intervals import interval_seconds


def bar_values(symbol: str, interval: str, open_s: int) -> tuple[float, float, float, float, float]:
    """Final OHLCV of the bar opening at ``open_s``."""
    seed = sum(map(ord, symbol)) + interval_seconds(interval)
    x = open_s / interval_seconds(interval)
    o = 100.0 + 10.0 * math.sin(x / 7.0 + seed)
    c = 100.0 + 10.0 * math.sin((x + 1) / 7.0 + seed)
    return o, max(o, c) + 0.5, min(o, c) - 0.5, c, 1.0 + (x % 13)


@dataclass
class FakeBinance:
    now_s: int = 1_700_000_040
    weight_used: int = 0
    requests: list[tuple[float, str, dict[str, str]]] = field(default_factory=list)
    http_errors: list[tuple[int, int]] = field(default_factory=list)  # (status, retry_after)
    ban_until: float = 0.0
    early_requests: int = 0
    sockets: list[tuple[web.WebSocketResponse, set[str]]] = field(default_factory=list)
    stalled: bool = False
    subscribe_acks: int = 0
    url: str = ""

    # --- market model --------------------------------------------------------------
    def kline_row(self, symbol: str, interval: str, open_s: int) -> list[Any]:
        step = interval_seconds(interval)
        o, h, low, c, v = bar_values(symbol, interval, open_s)
        if open_s + step > self.now_s:  # still forming: not the final values
            c, v = c + 0.25, v / 2
            h = max(h, c)
        return [
            open_s * 1000,
            f"{o}",
            f"{h}",
            f"{low}",
            f"{c}",
            f"{v}",
            (open_s + step) * 1000 - 1,
            "0",
            1,
            "0",
            "0",
            "0",
        ]

    def closed_times(self, interval: str, count: int) -> list[int]:
        step = interval_seconds(interval)
        current = self.now_s // step * step
        return [current - step * i for i in range(count, 0, -1)]

    # --- HTTP ----------------------------------------------------------------------
    def _check(self, request: web.Request) -> web.Response | None:
        now = time.monotonic()
        self.requests.append((now, request.path, dict(request.query)))
        if now < self.ban_until:
            self.early_requests += 1
        if self.http_errors:
            status, retry = self.http_errors.pop(0)
            self.ban_until = now + retry
            return web.json_response(
                {"code": -1003, "msg": "Too many requests"}, status=status, headers={"Retry-After": str(retry)}
            )
        return None

    async def time_handler(self, request: web.Request) -> web.Response:
        err = self._check(request)
        if err is not None:
            return err
        self.weight_used += 1
        return web.json_response(
            {"serverTime": self.now_s * 1000}, headers={"X-MBX-USED-WEIGHT-1M": str(self.weight_used)}
        )

    async def klines_handler(self, request: web.Request) -> web.Response:
        err = self._check(request)
        if err is not None:
            return err
        q = request.query
        symbol, interval = q["symbol"], q["interval"]
        limit = min(int(q.get("limit", 500)), 1000)
        step_ms = interval_seconds(interval) * 1000
        current_ms = self.now_s // interval_seconds(interval) * step_ms
        end_ms = min(int(q.get("endTime", current_ms)), current_ms)
        end_open = end_ms // step_ms * step_ms
        if "startTime" in q:
            start = -(-int(q["startTime"]) // step_ms) * step_ms
            opens = list(range(start, min(end_open, start + (limit - 1) * step_ms) + 1, step_ms))
        else:
            opens = list(range(end_open - (limit - 1) * step_ms, end_open + 1, step_ms))
        self.weight_used += 2
        rows = [self.kline_row(symbol, interval, t // 1000) for t in opens]
        return web.Response(
            body=orjson.dumps(rows),
            content_type="application/json",
            headers={"X-MBX-USED-WEIGHT-1M": str(self.weight_used)},
        )

    async def stream_handler(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        streams = set(filter(None, request.query.get("streams", "").split("/")))
        entry = (ws, streams)
        self.sockets.append(entry)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = orjson.loads(msg.data)
                    if data.get("method") == "SUBSCRIBE":
                        streams.update(data["params"])
                        self.subscribe_acks += 1
                        await ws.send_bytes(orjson.dumps({"result": None, "id": data["id"]}))
                    elif data.get("method") == "UNSUBSCRIBE":
                        streams.difference_update(data["params"])
                        await ws.send_bytes(orjson.dumps({"result": None, "id": data["id"]}))
        finally:
            if entry in self.sockets:
                self.sockets.remove(entry)
        return ws

    # --- control -------------------------------------------------------------------
    async def _push(self, stream: str, payload: dict[str, Any]) -> None:
        if self.stalled:
            return
        frame = orjson.dumps({"stream": stream, "data": payload})
        for ws, streams in list(self.sockets):
            if stream in streams and not ws.closed:
                await ws.send_bytes(frame)

    def _kline_payload(self, symbol: str, interval: str, open_s: int, closed: bool) -> dict[str, Any]:
        r = self.kline_row(symbol, interval, open_s)
        k = {
            "t": r[0],
            "T": r[6],
            "s": symbol,
            "i": interval,
            "o": r[1],
            "h": r[2],
            "l": r[3],
            "c": r[4],
            "v": r[5],
            "x": closed,
        }
        return {"e": "kline", "E": self.now_s * 1000, "s": symbol, "k": k}

    async def advance(self, seconds: int, markets: list[tuple[str, str]]) -> None:
        """Move the clock; push x=true for every bar that closed and an update of the new one."""
        before = self.now_s
        self.now_s += seconds
        for symbol, interval in markets:
            step = interval_seconds(interval)
            stream = f"{symbol.lower()}@kline_{interval}"
            t = before // step * step
            while t + step <= self.now_s:
                await self._push(stream, self._kline_payload(symbol, interval, t, True))
                t += step
            await self._push(stream, self._kline_payload(symbol, interval, self.now_s // step * step, False))

    async def drop_streams(self) -> None:
        for ws, _ in list(self.sockets):
            await ws.close()

    async def server_shutdown(self) -> None:
        for ws, _ in list(self.sockets):
            await ws.send_bytes(orjson.dumps({"stream": "!serverShutdown", "data": {"e": "serverShutdown", "E": 1}}))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v3/time", self.time_handler)
        app.router.add_get("/api/v3/klines", self.klines_handler)
        app.router.add_get("/stream", self.stream_handler)
        return app
