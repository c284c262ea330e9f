"""The WebSocket API at ``/ws-api/v3``: the signed user-data subscription and a few utility methods.

``userDataStream.subscribe.signature`` (HMAC over the sorted parameters) subscribes the
connection to the account's ``executionReport`` and ``outboundAccountPosition`` events,
wrapped as Binance does (``{"subscriptionId": N, "event": {...}}``);
``userDataStream.unsubscribe`` ends it with ``eventStreamTerminated``; ``ping`` and ``time``
answer.  Faults: every connection can be dropped, or every subscription terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from brokers.simulator.accounts import OrderError
from brokers.simulator.rest import EXCHANGE_KEY
from brokers.simulator.signing import check_time
from brokers.simulator.ws_api_hub import WsApiConnection


def _error(req_id: Any, code: int, msg: str, status: int = 400) -> dict[str, Any]:
    return {"id": req_id, "status": status, "error": {"code": code, "msg": msg}}


def _verify(params: dict[str, Any], api_key: str, secret: str, server_ms: int) -> None:
    if params.get("apiKey") != api_key:
        raise OrderError(-2015, "Invalid API-key, IP, or permissions for action.", status=401)
    signature = str(params.get("signature", ""))
    payload = "&".join(f"{k}={params[k]}" for k in sorted(params) if k != "signature")
    expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.lower()):
        raise OrderError(-1022, "Signature for this request is not valid.")
    check_time({k: str(v) for k, v in params.items()}, server_ms)


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
                except OrderError as exc:
                    conn.send(_error(req_id, exc.code, exc.msg, exc.status))
                    continue
                sub_id = ex.ws_api.next_subscription()

                def listener(event: dict[str, Any], sub_id: int = sub_id) -> None:
                    conn.send({"subscriptionId": sub_id, "event": event})

                conn.subscriptions[sub_id] = listener
                ex.account.listeners.append(listener)
                conn.send({"id": req_id, "status": 200, "result": {"subscriptionId": sub_id}})
            elif method == "userDataStream.unsubscribe":
                ids = [params["subscriptionId"]] if "subscriptionId" in params else list(conn.subscriptions)
                for sub_id in ids:
                    listener = conn.subscriptions.pop(sub_id, None)
                    if listener is not None:
                        with contextlib.suppress(ValueError):
                            ex.account.listeners.remove(listener)
                        conn.send({"subscriptionId": sub_id, "event": {"e": "eventStreamTerminated", "E": ex.now_ms()}})
                conn.send({"id": req_id, "status": 200, "result": {}})
            else:
                conn.send(_error(req_id, -1102, f"Unknown method {method!r}"))
    finally:
        for listener in conn.subscriptions.values():
            with contextlib.suppress(ValueError):
                ex.account.listeners.remove(listener)
        ex.ws_api.connections.discard(conn)
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
    return ws


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ws-api/v3", ws_api)
