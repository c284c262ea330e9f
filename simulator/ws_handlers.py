"""The websocket endpoints: ``/ws``, ``/ws/<stream>`` and ``/stream?streams=a/b``.

Handles Binance's live methods SUBSCRIBE, UNSUBSCRIBE and LIST_SUBSCRIPTIONS with their
acknowledgements and error answers.  A stream name is accepted only if web-socket-streams.md
documents it (streams.py's ``parse_spec``) for a simulated symbol written in lower case;
anything else is refused at the handshake (HTTP 400, -1121) or answered with error 2 live.
While the ``refuse_streams`` fault is set, every handshake (and any plain GET of these paths)
is answered with its HTTP status and Binance's body, as Binance does for a region it refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from simulator.exchange import SimExchange
from simulator.market import INTERVAL_MS
from simulator.rest import EXCHANGE_KEY
from simulator.streams import MAX_STREAMS_PER_CONNECTION, StreamConnection, parse_spec


def _valid_stream(ex: SimExchange, name: str) -> bool:
    """A stream Binance documents (streams.py), of a simulated symbol written in lower case."""
    spec = parse_spec(name)
    if spec is None:
        return False
    if spec.kind == "kline" and spec.arg not in INTERVAL_MS:
        return False
    if spec.symbol is None:
        return True
    symbol_part = name.partition("@")[0]
    return symbol_part == symbol_part.lower() and spec.symbol in ex.markets


def _handle_method(ex: SimExchange, conn: StreamConnection, msg: Any) -> dict[str, Any]:
    if not isinstance(msg, dict) or "method" not in msg:
        return {"error": {"code": 3, "msg": "Invalid JSON: expected an object with 'method'"}, "id": None}
    req_id = msg.get("id")
    method = msg.get("method")
    params = msg.get("params", [])
    if method == "LIST_SUBSCRIPTIONS":
        return {"result": sorted(conn.streams), "id": req_id}
    if method not in ("SUBSCRIBE", "UNSUBSCRIBE"):
        return {"error": {"code": 2, "msg": f"Invalid request: unknown method {method!r}"}, "id": req_id}
    if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
        return {"error": {"code": 2, "msg": "Invalid request: 'params' must be an array of stream names"}, "id": req_id}
    if method == "SUBSCRIBE":
        bad = [p for p in params if not _valid_stream(ex, p)]
        if bad:
            return {"error": {"code": 2, "msg": f"Invalid request: unknown stream {bad[0]!r}"}, "id": req_id}
        if len(set(conn.streams) | set(params)) > MAX_STREAMS_PER_CONNECTION:
            return {"error": {"code": 2, "msg": "Invalid request: too many streams (1024 at most)"}, "id": req_id}
        for p in params:
            if p not in conn.streams:
                ex.subscribe(conn, p)
    else:
        for p in params:
            conn.streams.pop(p, None)
        ex.market_streams.release()
    return {"result": None, "id": req_id}


async def _serve(request: web.Request, names: list[str], combined: bool) -> web.StreamResponse:
    ex = request.app[EXCHANGE_KEY]
    refusal = ex.faults.refuse_streams
    if refusal is not None:
        return web.json_response(refusal.body(), status=refusal.status)
    bad = [n for n in names if not _valid_stream(ex, n)]
    if bad or len(names) > MAX_STREAMS_PER_CONNECTION:
        return web.json_response({"code": -1121, "msg": f"Invalid stream: {bad[0] if bad else 'too many'}"}, status=400)
    ws = web.WebSocketResponse(autoping=True, max_msg_size=1 << 20)
    await ws.prepare(request)
    conn = StreamConnection(ws=ws, transport=request.transport, combined=combined)
    for n in names:
        ex.subscribe(conn, n)
    ex.hub.connections.add(conn)
    writer = asyncio.create_task(ex.hub.writer(conn), name="sim-stream-writer")
    # when the writer ends (shutdown, age limit, reset) the connection ends too
    writer.add_done_callback(lambda _t: asyncio.ensure_future(ws.close()))
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                body = orjson.loads(msg.data)
            except orjson.JSONDecodeError:
                conn.send_json({"error": {"code": 3, "msg": "Invalid JSON"}, "id": None})
                continue
            conn.send_json(_handle_method(ex, conn, body))
    finally:
        ex.hub.connections.discard(conn)
        ex.market_streams.release()
        conn.queue.put_nowait(None)
        with contextlib.suppress(BaseException):
            await writer
        await ws.close()
    return ws


async def raw_stream(request: web.Request) -> web.StreamResponse:
    name = request.match_info.get("stream", "")
    # Like Binance, a path segment that names no stream at all (ccxt connects to ``/ws/0``)
    # opens an empty connection to be filled by SUBSCRIBE; a malformed stream name (an
    # all-market ``!name`` too) is refused.
    names = [n for n in name.split("/") if n and ("@" in n or n.startswith("!"))]
    return await _serve(request, names, combined=False)


async def bare_ws(request: web.Request) -> web.StreamResponse:
    return await _serve(request, [], combined=False)


async def combined_stream(request: web.Request) -> web.StreamResponse:
    names = [n for n in request.query.get("streams", "").split("/") if n]
    return await _serve(request, names, combined=True)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ws", bare_ws)
    app.router.add_get("/ws/{stream:.+}", raw_stream)
    app.router.add_get("/stream", combined_stream)
