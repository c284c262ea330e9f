"""Streamable HTTP in front of the SDK: chartgen's HTTP surface (contract §1.4) on MCP sessions.

Routes: ``GET /`` health; ``POST /mcp`` with the aliases ``POST /`` and ``POST /message``;
``GET /mcp`` with the alias ``GET /sse``; ``DELETE /mcp``.  Before the SDK sees a POST:

- Accept: missing, or ``application/json`` alone, is accepted (chartgen clients send
  that); an Accept that allows no JSON gets chartgen's 406 body.  Replies are JSON.
- A body that is not JSON gets chartgen's 400 ``-32700 Parse error`` envelope.
- Sessions: ``initialize`` and any request carrying ``Mcp-Session-Id`` go to the stateful
  session manager (the SDK mints and checks session ids); a request without a session id
  that is not ``initialize`` — chartgen's clients never initialize — is served by a
  stateless manager on the same server, so it works without a handshake.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from alerts.push import PushHub
from alerts.store import AlertStore
from mcp_bridge.identity import SCOPE_KEY, SCOPES_KEY, Caller
from mcp_bridge.push_sse import serve_push_stream
from mcp_bridge.rate_limit import IpLimiter
from mcp_bridge.server import SERVER_VERSION

MAX_BODY_BYTES = 16 * 1024 * 1024
_FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#131722"/>'
    '<path d="M3 11l3-4 3 2 4-6" stroke="#26a69a" stroke-width="2" fill="none"/></svg>'
)


def accepts_json(accept: str | None) -> bool:
    """chartgen's Accept rule: missing → yes; else some */*, application/* or application/json without q=0."""
    if accept is None or not accept.strip():
        return True
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if media not in ("*/*", "application/*", "application/json"):
            continue
        q_zero = False
        for param in pieces[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q_zero = float(value.strip()) == 0.0
                except ValueError:
                    q_zero = False
        if not q_zero:
            return True
    return False


def _rpc_error(status: int, code: int, message: str, session_id: str | None, req_id: Any = None) -> Response:
    headers = {"mcp-session-id": session_id} if session_id else None
    body = {"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def _with_header(scope: Scope, name: bytes, value: bytes) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k != name]
    headers.append((name, value))
    return {**scope, "headers": headers}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


Authenticate = Callable[[str], Awaitable["Caller | None"]]
"""Bearer token → the caller (None for an unknown, revoked or expired token)."""

Direct = Callable[[Any, "Caller | None", str], Awaitable["dict[str, Any] | None"]]
"""(session-less message, caller, protocol version) → its answer, or None to hand it to the SDK."""

OPEN_METHODS = frozenset({"initialize", "tools/list"})
"""Methods chartgen serves without a bearer token (contract §1.4)."""
WWW_AUTHENTICATE = 'Bearer realm="chartgen"'


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _status_for(problem: str | None) -> int:
    return 429 if problem is not None and problem.startswith("Too many") else 401


def _methods(message: Any) -> list[Any]:
    items = message if isinstance(message, list) else [message]
    return [m.get("method") if isinstance(m, dict) else None for m in items]


def _request_id(message: Any) -> Any:
    return message.get("id") if isinstance(message, dict) else None


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization")
    if value is None:
        return None
    return value[len("Bearer ") :].strip() if value.startswith("Bearer ") else ""


class McpEndpoint:
    """The ASGI endpoint behind /mcp and its aliases."""

    def __init__(
        self,
        stateful: StreamableHTTPSessionManager,
        stateless: StreamableHTTPSessionManager,
        *,
        authenticate: Authenticate | None = None,
        push_hub: PushHub | None = None,
        push_store: AlertStore | None = None,
        keepalive_s: float = 30.0,
        www_authenticate: str = WWW_AUTHENTICATE,
        bearer_failures: IpLimiter | None = None,
        direct: Direct | None = None,
    ) -> None:
        self.direct = direct
        self.www_authenticate = www_authenticate
        self.bearer_failures = bearer_failures or IpLimiter(30, 60.0)
        self.stateful = stateful
        self.stateless = stateless
        self.authenticate = authenticate
        self.push_hub = push_hub
        self.push_store = push_store
        self.keepalive_s = keepalive_s

    async def _principal(self, request: Request) -> tuple[Caller | None, str | None]:
        """(caller, None) for a valid token; (None, reason) for a missing or bad one.

        Failed bearer attempts count per client IP; past the limit every attempt from that
        IP is refused unchecked until the window has passed (reason starts with "Too many").
        """
        token = _bearer(request)
        if token is None:
            return None, "Missing Authorization header"
        ip = request.client.host if request.client is not None else "unknown"
        wait = self.bearer_failures.retry_after(ip)
        if wait is not None:
            return None, f"Too many failed authentication attempts; retry in {wait:.0f} s"
        caller = await self.authenticate(token) if token and self.authenticate is not None else None
        if caller is None:
            self.bearer_failures.record(ip)
            return None, "Invalid or expired token"
        return caller, None

    async def _get_stream(self, scope: Scope, receive: Receive, send: Send, request: Request) -> None:
        session_id = request.headers.get("mcp-session-id")
        if self.authenticate is not None:
            caller, problem = await self._principal(request)
        else:
            caller, problem = Caller("anonymous", frozenset()), None
        if caller is None:
            resp = Response(
                problem or "Invalid or expired token",
                status_code=_status_for(problem),
                media_type="text/plain",
                headers={"www-authenticate": self.www_authenticate},
            )
            await resp(scope, receive, send)
            return
        await serve_push_stream(
            scope,
            receive,
            send,
            principal=caller.principal,
            hub=self.push_hub,
            store=self.push_store,
            session_id=session_id,
            keepalive_s=self.keepalive_s,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        session_id = request.headers.get("mcp-session-id")
        if request.method == "GET":
            await self._get_stream(scope, receive, send, request)
            return
        if request.method != "POST":
            await self.stateful.handle_request(scope, receive, send)
            return
        if not accepts_json(request.headers.get("accept")):
            resp = _rpc_error(406, -32600, "Not Acceptable: server returns application/json", session_id)
            await resp(scope, receive, send)
            return
        body = await _read_body(receive, MAX_BODY_BYTES)
        if body is None:
            resp = _rpc_error(413, -32600, f"Request body exceeds {MAX_BODY_BYTES} bytes", session_id)
            await resp(scope, receive, send)
            return
        try:
            message = json.loads(body)
        except ValueError as exc:
            resp = _rpc_error(400, -32700, f"Parse error: {exc}", session_id)
            await resp(scope, receive, send)
            return
        except RecursionError:
            resp = _rpc_error(400, -32700, "Parse error: JSON nested too deeply", session_id)
            await resp(scope, receive, send)
            return
        if self.authenticate is not None:
            needs_auth = any(m not in OPEN_METHODS for m in _methods(message))
            if needs_auth or request.headers.get("authorization") is not None:
                caller, problem = await self._principal(request)
                if caller is None:
                    resp = _rpc_error(
                        _status_for(problem),
                        -32000,
                        problem or "Invalid or expired token",
                        session_id,
                        _request_id(message),
                    )
                    resp.headers["www-authenticate"] = self.www_authenticate
                    await resp(scope, receive, send)
                    return
                scope = {**scope, SCOPE_KEY: caller.principal, SCOPES_KEY: caller.scopes}
        is_initialize = isinstance(message, dict) and message.get("method") == "initialize"
        if session_id is None and not is_initialize and self.direct is not None:
            version = request.headers.get("mcp-protocol-version", DEFAULT_NEGOTIATED_VERSION)
            principal = scope.get(SCOPE_KEY)
            direct_caller = Caller(principal, scope[SCOPES_KEY]) if isinstance(principal, str) else None
            answer = await self.direct(message, direct_caller, version)
            if answer is not None:
                await Response(orjson.dumps(answer), media_type="application/json")(scope, receive, send)
                return
        # The SDK answers JSON when asked for JSON; chartgen clients may omit Accept and Content-Type.
        scope = _with_header(scope, b"accept", b"application/json, text/event-stream")
        scope = _with_header(scope, b"content-type", b"application/json")
        replay = _replay(body, receive)
        if session_id is not None or is_initialize:
            await self.stateful.handle_request(scope, replay, send)
        else:
            await self.stateless.handle_request(scope, replay, send)


def _security(host: str, allowed_hosts: list[str] | None) -> TransportSecuritySettings:
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *(allowed_hosts or [])]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    origins += [f"https://{h.split(':')[0]}" for h in (allowed_hosts or [])]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


Readiness = Callable[[], tuple[bool, list[str]]]


def build_http_app(
    server: Server[Any],
    *,
    host: str = "127.0.0.1",
    allowed_hosts: list[str] | None = None,
    readiness: Readiness | None = None,
    authenticate: Authenticate | None = None,
    push_hub: PushHub | None = None,
    push_store: AlertStore | None = None,
    keepalive_s: float = 30.0,
    status: Callable[[], dict[str, Any]] | None = None,
    extra_routes: list[BaseRoute] | None = None,
    www_authenticate: str = WWW_AUTHENTICATE,
    metrics: Callable[[], Awaitable[bytes]] | None = None,
    direct: Direct | None = None,
) -> Starlette:
    """The Starlette app serving MCP and the health routes; run it with uvicorn in the daemon's loop.

    ``readiness`` reports whether the daemon's parts are up (``/readyz``: 200 when ready,
    503 with the reasons otherwise); without it the server is ready as soon as it serves.
    """
    security = _security(host, allowed_hosts)
    stateful = StreamableHTTPSessionManager(
        app=server, json_response=True, security_settings=security, max_request_body_size=MAX_BODY_BYTES
    )
    stateless = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, security_settings=security, max_request_body_size=MAX_BODY_BYTES
    )
    endpoint = McpEndpoint(
        stateful,
        stateless,
        authenticate=authenticate,
        push_hub=push_hub,
        push_store=push_store,
        keepalive_s=keepalive_s,
        www_authenticate=www_authenticate,
        direct=direct,
    )

    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "name": "chartgen",
                "version": SERVER_VERSION,
                "protocol": "MCP",
                "protocolVersion": "2025-03-26",
                "status": "ok",
            }
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ready, reasons = readiness() if readiness is not None else (True, [])
        body = {"status": "ready" if ready else "not_ready", "reasons": reasons}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def status_route(request: Request) -> Response:
        if authenticate is not None:
            principal, problem = await endpoint._principal(request)
            if principal is None:
                return Response(
                    problem, status_code=_status_for(problem), headers={"www-authenticate": www_authenticate}
                )
        return JSONResponse(status() if status is not None else {})

    async def metrics_route(request: Request) -> Response:
        """Prometheus exposition: loopback scrapers freely, others with a valid bearer token."""
        client = request.client.host if request.client is not None else ""
        if authenticate is not None and not _is_loopback(client):
            principal, problem = await endpoint._principal(request)
            if principal is None:
                return Response(
                    problem, status_code=_status_for(problem), headers={"www-authenticate": www_authenticate}
                )
        if metrics is None:
            return Response("metrics are not enabled", status_code=404)
        return Response(await metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def favicon(request: Request) -> Response:
        return Response(_FAVICON, media_type="image/svg+xml")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with stateful.run(), stateless.run():
            yield

    routes = [
        Route("/", health, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/status", status_route, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/favicon.svg", favicon, methods=["GET"]),
        Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
        Route("/", endpoint, methods=["POST"]),
        Route("/message", endpoint, methods=["POST"]),
        Route("/sse", endpoint, methods=["GET"]),
        *(extra_routes or []),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
