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

The edge rules (issue 12), in the order a request meets them:

- Host/Origin (DNS rebinding): every route of this app — health, status, metrics and every
  MCP route including the session-less fast path — runs the SDK's own check
  (``TransportSecurityMiddleware.validate_request``) first; before, only requests that reached
  the SDK's session managers were checked.  OAuth routes (``extra_routes``) keep their own checks.
- Client address: ``request.client`` is the real client; uvicorn replaces the peer by the
  ``X-Forwarded-For`` address only for ``trusted_proxies`` (daemon/http_server.py).  Failed
  bearers are counted per client address (:class:`~mcp_bridge.rate_limit.BearerFailures`).
- Bodies: with an ``Authorization`` header the bearer is checked before the body is read (then
  up to 16 MiB); without one the body is capped at ``max_unauthenticated_body_bytes`` (64 KiB)
  before it is parsed — chartgen's clients send ``tools/list`` without a bearer.  The rest of a
  refused body is received and dropped chunk by chunk (up to 16 MiB) before the answer, so a
  proxy in front sees our 401/413 rather than a reset.
- ``/metrics``: free only to a direct loopback connection that carries no forwarded header
  (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``, ``X-Forwarded-Proto``/``-Host``): a local
  reverse proxy connects from loopback too.  ``metrics_require_token`` asks a bearer always.
- Notification streams (``GET /mcp``, ``GET /sse``): at most ``max_streams_per_principal`` per
  token; a new one closes the token's oldest (mcp_bridge/push_sse.py).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from alerts import AlertRepository, PushHub
from config import is_loopback_host
from mcp_bridge.http_bodies import (
    MAX_BODY_BYTES,
    accepts_json,
    declared_length,
    discard_body,
    loads_or_none,
    read_body,
    replay_body,
    rpc_error,
    rpc_methods,
    rpc_request_id,
    with_header,
)
from mcp_bridge.identity import SCOPE_KEY, SCOPES_KEY, Caller
from mcp_bridge.push_sse import serve_push_stream
from mcp_bridge.rate_limit import BearerFailures
from mcp_bridge.rebinding import guarded, rebinding_refusal, security_settings
from mcp_bridge.server import SERVER_VERSION
from storage import StorageError

MAX_UNAUTHENTICATED_BODY_BYTES = 64 * 1024
MAX_STREAMS_PER_PRINCIPAL = 8
_FORWARDED_HEADERS = frozenset({"x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-proto", "x-forwarded-host"})
_FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#131722"/>'
    '<path d="M3 11l3-4 3 2 4-6" stroke="#26a69a" stroke-width="2" fill="none"/></svg>'
)


Authenticate = Callable[[str], Awaitable["Caller | None"]]
"""Bearer token → the caller (None for an unknown, revoked or expired token)."""

Direct = Callable[[Any, "Caller | None", str], Awaitable["dict[str, Any] | None"]]
"""(session-less message, caller, protocol version) → its answer, or None to hand it to the SDK."""

AUTH_UNAVAILABLE = "Token store unavailable"
OPEN_METHODS = frozenset({"initialize", "tools/list"})
"""Methods chartgen serves without a bearer token (contract §1.4)."""
WWW_AUTHENTICATE = 'Bearer realm="chartgen"'


def _is_direct_loopback(request: Request) -> bool:
    """A loopback peer that says it forwards nobody (a local reverse proxy connects from loopback too)."""
    client = request.client.host if request.client is not None else ""
    return is_loopback_host(client) and not any(name in _FORWARDED_HEADERS for name in request.headers)


def _status_for(problem: str | None) -> int:
    if problem is not None and problem.startswith(AUTH_UNAVAILABLE):
        return 503
    return 429 if problem is not None and problem.startswith("Too many") else 401


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
        push_store: AlertRepository | None = None,
        keepalive_s: float = 30.0,
        www_authenticate: str = WWW_AUTHENTICATE,
        bearer_failures: BearerFailures | None = None,
        direct: Direct | None = None,
        security: TransportSecurityMiddleware | None = None,
        max_unauthenticated_body_bytes: int = MAX_UNAUTHENTICATED_BODY_BYTES,
        max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
    ) -> None:
        self.direct = direct
        self.www_authenticate = www_authenticate
        self.bearer_failures = bearer_failures or BearerFailures(30, 60.0)
        self.stateful = stateful
        self.stateless = stateless
        self.authenticate = authenticate
        # without the daemon's hub a hub of our own still counts the streams per principal
        self.push_hub = push_hub if push_hub is not None else PushHub()
        self.push_store = push_store
        self.keepalive_s = keepalive_s
        self.security = security or TransportSecurityMiddleware(security_settings("127.0.0.1", None))
        self.max_unauthenticated_body_bytes = max_unauthenticated_body_bytes
        self.max_streams_per_principal = max_streams_per_principal

    async def caller_of(self, request: Request) -> tuple[Caller | None, str | None]:
        """(caller, None) for a valid token; (None, reason) for a missing or bad one.

        Failed bearer attempts count per client address; past the limit an attempt from that
        address with a token not seen valid before is refused unchecked until the window has
        passed (reason starts with "Too many"); see :class:`BearerFailures`.
        """
        token = _bearer(request)
        if token is None:
            return None, "Missing Authorization header"
        ip = request.client.host if request.client is not None else "unknown"
        wait = self.bearer_failures.refused(ip, token)
        if wait is not None:
            return None, f"Too many failed authentication attempts; retry in {max(1.0, wait):.0f} s"
        try:
            caller = await self.authenticate(token) if token and self.authenticate is not None else None
        except StorageError as exc:  # the token store could not be read (a cluster front: PostgreSQL away)
            return None, f"{AUTH_UNAVAILABLE}: {exc}; retry shortly"
        if caller is None:
            self.bearer_failures.failed(ip)
            return None, "Invalid or expired token"
        self.bearer_failures.succeeded(token)
        return caller, None

    async def _get_stream(self, scope: Scope, receive: Receive, send: Send, request: Request) -> None:
        session_id = request.headers.get("mcp-session-id")
        if self.authenticate is not None:
            caller, problem = await self.caller_of(request)
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
            max_streams=self.max_streams_per_principal,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refused = await rebinding_refusal(self.security, request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        session_id = request.headers.get("mcp-session-id")
        if request.method == "GET":
            await self._get_stream(scope, receive, send, request)
            return
        if request.method != "POST":
            await self.stateful.handle_request(scope, receive, send)
            return
        if not accepts_json(request.headers.get("accept")):
            resp = rpc_error(406, -32600, "Not Acceptable: server returns application/json", session_id)
            await resp(scope, receive, send)
            return
        caller: Caller | None = None
        if self.authenticate is not None and request.headers.get("authorization") is not None:
            # the bearer first: a large body is read only for a valid token
            caller, problem = await self.caller_of(request)
            if caller is None:
                # chartgen's 401 echoes the request id: read it from a small body only
                small, ended = await read_body(receive, self.max_unauthenticated_body_bytes)
                if not ended:
                    await discard_body(receive)
                req_id = rpc_request_id(loads_or_none(small)) if small is not None else None
                resp = rpc_error(
                    _status_for(problem), -32000, problem or "Invalid or expired token", session_id, req_id
                )
                resp.headers["www-authenticate"] = self.www_authenticate
                await resp(scope, receive, send)
                return
            scope = {**scope, SCOPE_KEY: caller.principal, SCOPES_KEY: caller.scopes}
        if caller is None and self.authenticate is not None:
            limit = self.max_unauthenticated_body_bytes
            too_large = (
                f"Request body exceeds {limit} bytes, the limit for requests without a bearer token "
                "(max_unauthenticated_body_bytes): send Authorization: Bearer TOKEN, or a smaller request"
            )
        else:
            limit = MAX_BODY_BYTES
            too_large = f"Request body exceeds {MAX_BODY_BYTES} bytes"
        declared = declared_length(request)
        body, ended = await read_body(receive, limit) if declared is None or declared <= limit else (None, False)
        if body is None:
            if not ended:
                await discard_body(receive)
            await rpc_error(413, -32600, too_large, session_id)(scope, receive, send)
            return
        try:
            message = json.loads(body)
        except ValueError as exc:
            resp = rpc_error(400, -32700, f"Parse error: {exc}", session_id)
            await resp(scope, receive, send)
            return
        except RecursionError:
            resp = rpc_error(400, -32700, "Parse error: JSON nested too deeply", session_id)
            await resp(scope, receive, send)
            return
        needs_bearer = any(m not in OPEN_METHODS for m in rpc_methods(message))
        if self.authenticate is not None and caller is None and needs_bearer:
            resp = rpc_error(401, -32000, "Missing Authorization header", session_id, rpc_request_id(message))
            resp.headers["www-authenticate"] = self.www_authenticate
            await resp(scope, receive, send)
            return
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
        scope = with_header(scope, b"accept", b"application/json, text/event-stream")
        scope = with_header(scope, b"content-type", b"application/json")
        replay = replay_body(body, receive)
        if session_id is not None or is_initialize:
            await self.stateful.handle_request(scope, replay, send)
        else:
            await self.stateless.handle_request(scope, replay, send)


Readiness = Callable[[], tuple[bool, list[str]]]


def build_http_app(
    server: Server[Any],
    *,
    host: str = "127.0.0.1",
    allowed_hosts: list[str] | None = None,
    readiness: Readiness | None = None,
    authenticate: Authenticate | None = None,
    push_hub: PushHub | None = None,
    push_store: AlertRepository | None = None,
    keepalive_s: float = 30.0,
    status: Callable[[], dict[str, Any] | Awaitable[dict[str, Any]]] | None = None,
    extra_routes: list[BaseRoute] | None = None,
    www_authenticate: str = WWW_AUTHENTICATE,
    metrics: Callable[[], Awaitable[bytes]] | None = None,
    direct: Direct | None = None,
    max_unauthenticated_body_bytes: int = MAX_UNAUTHENTICATED_BODY_BYTES,
    max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
    metrics_require_token: bool = False,
) -> Starlette:
    """The Starlette app serving MCP and the health routes; run it with uvicorn in the daemon's loop.

    ``readiness`` reports whether the daemon's parts are up (``/readyz``: 200 when ready,
    503 with the reasons otherwise); without it the server is ready as soon as it serves.
    The edge limits are the settings of the same names (module docstring).
    """
    security = security_settings(host, allowed_hosts)
    guard = TransportSecurityMiddleware(security)
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
        security=guard,
        max_unauthenticated_body_bytes=max_unauthenticated_body_bytes,
        max_streams_per_principal=max_streams_per_principal,
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
            principal, problem = await endpoint.caller_of(request)
            if principal is None:
                return Response(
                    problem, status_code=_status_for(problem), headers={"www-authenticate": www_authenticate}
                )
        body = status() if status is not None else {}
        return JSONResponse(await body if inspect.isawaitable(body) else body)

    async def metrics_route(request: Request) -> Response:
        """Prometheus exposition: direct loopback scrapers freely, others with a valid bearer token."""
        if authenticate is not None and (metrics_require_token or not _is_direct_loopback(request)):
            principal, problem = await endpoint.caller_of(request)
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
        Route("/", guarded(guard, health), methods=["GET"]),
        Route("/healthz", guarded(guard, healthz), methods=["GET"]),
        Route("/readyz", guarded(guard, readyz), methods=["GET"]),
        Route("/status", guarded(guard, status_route), methods=["GET"]),
        Route("/metrics", guarded(guard, metrics_route), methods=["GET"]),
        Route("/favicon.ico", guarded(guard, favicon), methods=["GET"]),
        Route("/favicon.svg", guarded(guard, favicon), methods=["GET"]),
        Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
        Route("/", endpoint, methods=["POST"]),
        Route("/message", endpoint, methods=["POST"]),
        Route("/sse", endpoint, methods=["GET"]),
        *(extra_routes or []),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
