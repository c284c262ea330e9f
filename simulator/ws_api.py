"""The WebSocket API at ``/ws-api/v3``: the signed user-data subscription and a few utility methods.

This is how spot user data reaches a client today: Binance removed the listenKey streams
(REST ``/api/v3/userDataStream``, WS-API ``userDataStream.start``) on 2026-02-20, and
ccxt.pro's binance subscribes spot accounts this way only.
``userDataStream.subscribe.signature`` (HMAC over the sorted parameters) subscribes the
connection to the account's ``executionReport``, ``outboundAccountPosition`` and
``listStatus`` events, wrapped as Binance does (``{"subscriptionId": N, "event": {...}}``);
``userDataStream.unsubscribe`` ends one or all with ``eventStreamTerminated``;
``session.subscriptions`` lists the active ones; ``ping`` and ``time`` answer.  The
subscriptions' rules are ws_api_hub.py's.  Faults: every connection can be dropped, or every
subscription terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from simulator.accounts import OrderError
from simulator.rest import EXCHANGE_KEY
from simulator.signing import check_time
from simulator.ws_api_hub import WsApiConnection


def _error(req_id: Any, code: int, msg: str, status: int = 400) -> dict[str, Any]:
    return {"id": req_id, "status": status, "error": {"code": code, "msg": msg}}


def _verify(params: dict[str, Any], api_key: str, secret: str, server_ms: int) -> None:
    for name in ("apiKey", "signature"):
        if not params.get(name):
            raise OrderError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")
    if params["apiKey"] != api_key:
        raise OrderError(-2015, "Invalid API-key, IP, or permissions for action.", status=401)
    signature = str(params["signature"])
    payload = "&".join(f"{k}={params[k]}" for k in sorted(params) if k != "signature")
    expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.lower()):
        raise OrderError(-1022, "Signature for this request is not valid.")
    check_time({k: str(v) for k, v in params.items()}, server_ms)


def _optional_int(params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise OrderError(-1100, f"Illegal characters found in parameter '{name}'.") from None


async def ws_api(request: web.Request) -> web.WebSocketResponse:
    ex = request.app[EXCHANGE_KEY]
    ws = web.WebSocketResponse(heartbeat=None)
    await ws.prepare(request)
    conn = WsApiConnection(ws)
    ex.ws_api.connections.add(conn)

    async def writer() -> None:
        while True:
            data = await conn.queue.get()
            if data is None:
                await ws.close()
                return
            await ws.send_str(data.decode())

    writing = asyncio.create_task(writer())
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                req = orjson.loads(msg.data)
            except orjson.JSONDecodeError:
                conn.send(_error(None, -1100, "Malformed request."))
                continue
            req_id, method, params = req.get("id"), req.get("method"), req.get("params") or {}
            ex.requests[f"WS {method}"] += 1
            if method == "ping":
                conn.send({"id": req_id, "status": 200, "result": {}})
            elif method == "time":
                conn.send({"id": req_id, "status": 200, "result": {"serverTime": ex.server_time()}})
            elif method == "userDataStream.subscribe.signature":
                try:
                    _verify(params, ex.config.api_key, ex.config.api_secret, ex.server_time())
                    sub_id = conn.subscribe(ex.account)
                except OrderError as exc:
                    conn.send(_error(req_id, exc.code, exc.msg, exc.status))
                    continue
                conn.send({"id": req_id, "status": 200, "result": {"subscriptionId": sub_id}})
            elif method == "userDataStream.unsubscribe":
                try:
                    gone_id = _optional_int(params, "subscriptionId")
                except OrderError as exc:
                    conn.send(_error(req_id, exc.code, exc.msg, exc.status))
                    continue
                conn.unsubscribe(ex.account, ex.now_ms(), gone_id)
                conn.send({"id": req_id, "status": 200, "result": {}})
            elif method == "session.subscriptions":
                result = [{"subscriptionId": sub_id} for sub_id in sorted(conn.subscriptions)]
                conn.send({"id": req_id, "status": 200, "result": result})
            else:
                conn.send(_error(req_id, -1102, f"Unknown method {method!r}"))
    finally:
        conn.detach(ex.account)
        ex.ws_api.connections.discard(conn)
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
    return ws


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ws-api/v3", ws_api)
