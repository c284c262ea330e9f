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
import functools
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
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
from mcp_bridge.rate_limit import BearerFailures
from mcp_bridge.server import SERVER_VERSION

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_UNAUTHENTICATED_BODY_BYTES = 64 * 1024
MAX_STREAMS_PER_PRINCIPAL = 8
_FORWARDED_HEADERS = frozenset({"x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-proto", "x-forwarded-host"})
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


async def _read_body(receive: Receive, limit: int) -> tuple[bytes | None, bool]:
    """(body, True) when it fits in ``limit``; (None, ended) past it or on a disconnect, where
    ``ended`` says whether nothing of the request is left to receive."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None, True
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            return None, not more
        chunks.append(chunk)
        if not more:
            return b"".join(chunks), True


async def _discard_body(receive: Receive, budget: int = MAX_BODY_BYTES) -> None:
    """Receive and drop what is left of a refused request's body (one chunk at a time, never kept).

    uvicorn closes a ``Connection: close`` request's socket as soon as the answer is sent; body
    bytes still unread then make the kernel send a reset, and a proxy (nginx talks to us with
    ``Connection: close``) turns our 401/413 into a 502.  Past ``budget`` bytes we stop and answer.
    """
    size = 0
    while size <= budget:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


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


def _is_direct_loopback(request: Request) -> bool:
    """A loopback peer that says it forwards nobody (a local reverse proxy connects from loopback too)."""
    client = request.client.host if request.client is not None else ""
    return _is_loopback(client) and not any(name in _FORWARDED_HEADERS for name in request.headers)


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


def _loads_or_none(body: bytes) -> Any:
    """The JSON value of ``body``, or None when it is not JSON (or nested too deeply)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


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
        self.security = security or TransportSecurityMiddleware(_security("127.0.0.1", None))
        self.max_unauthenticated_body_bytes = max_unauthenticated_body_bytes
        self.max_streams_per_principal = max_streams_per_principal

    async def _principal(self, request: Request) -> tuple[Caller | None, str | None]:
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
        caller = await self.authenticate(token) if token and self.authenticate is not None else None
        if caller is None:
            self.bearer_failures.failed(ip)
            return None, "Invalid or expired token"
        self.bearer_failures.succeeded(token)
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
            resp = _rpc_error(406, -32600, "Not Acceptable: server returns application/json", session_id)
            await resp(scope, receive, send)
            return
        caller: Caller | None = None
        if self.authenticate is not None and request.headers.get("authorization") is not None:
            # the bearer first: a large body is read only for a valid token
            caller, problem = await self._principal(request)
            if caller is None:
                # chartgen's 401 echoes the request id: read it from a small body only
                small, ended = await _read_body(receive, self.max_unauthenticated_body_bytes)
                if not ended:
                    await _discard_body(receive)
                req_id = _request_id(_loads_or_none(small)) if small is not None else None
                resp = _rpc_error(
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
        declared = _declared_length(request)
        body, ended = await _read_body(receive, limit) if declared is None or declared <= limit else (None, False)
        if body is None:
            if not ended:
                await _discard_body(receive)
            await _rpc_error(413, -32600, too_large, session_id)(scope, receive, send)
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
        if self.authenticate is not None and caller is None and any(m not in OPEN_METHODS for m in _methods(message)):
            resp = _rpc_error(401, -32000, "Missing Authorization header", session_id, _request_id(message))
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
        scope = _with_header(scope, b"accept", b"application/json, text/event-stream")
        scope = _with_header(scope, b"content-type", b"application/json")
        replay = _replay(body, receive)
        if session_id is not None or is_initialize:
            await self.stateful.handle_request(scope, replay, send)
        else:
            await self.stateless.handle_request(scope, replay, send)


def _security(host: str, allowed_hosts: list[str] | None) -> TransportSecuritySettings:
    # loopback names with any port, and without one (a proxy forwarding ``Host $host`` drops the port)
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]", *(allowed_hosts or [])]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    origins += [f"https://{h.split(':')[0]}" for h in (allowed_hosts or [])]
    origins += [f"https://{h}" for h in (allowed_hosts or []) if ":" in h]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


async def rebinding_refusal(security: TransportSecurityMiddleware, request: Request) -> Response | None:
    """The SDK's Host/Origin check (421 / 403), its answer worded to name the fix; None: allowed."""
    refused = await security.validate_request(request)
    if refused is None:
        return None
    if refused.status_code == 421:
        text = (
            f"Invalid Host header {request.headers.get('host')!r}: this server answers to its loopback names and the "
            "host of base_url only. Behind a reverse proxy set base_url (CHARTGEN_BASE_URL) to the public URL."
        )
    elif refused.status_code == 403:
        text = (
            f"Invalid Origin header {request.headers.get('origin')!r}: only local pages and base_url's origin may "
            "call this server (DNS-rebinding protection)."
        )
    else:
        return refused
    return Response(text, status_code=refused.status_code, media_type="text/plain")


def _guarded(security: TransportSecurityMiddleware, endpoint: Callable[[Request], Awaitable[Response]]) -> Any:
    """``endpoint`` behind the SDK's Host/Origin check (421 / 403 before the endpoint runs)."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        refused = await rebinding_refusal(security, request)
        return refused if refused is not None else await endpoint(request)

    return guarded


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
    max_unauthenticated_body_bytes: int = MAX_UNAUTHENTICATED_BODY_BYTES,
    max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
    metrics_require_token: bool = False,
) -> Starlette:
    """The Starlette app serving MCP and the health routes; run it with uvicorn in the daemon's loop.

    ``readiness`` reports whether the daemon's parts are up (``/readyz``: 200 when ready,
    503 with the reasons otherwise); without it the server is ready as soon as it serves.
    The edge limits are the settings of the same names (module docstring).
    """
    security = _security(host, allowed_hosts)
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
            principal, problem = await endpoint._principal(request)
            if principal is None:
                return Response(
                    problem, status_code=_status_for(problem), headers={"www-authenticate": www_authenticate}
                )
        return JSONResponse(status() if status is not None else {})

    async def metrics_route(request: Request) -> Response:
        """Prometheus exposition: direct loopback scrapers freely, others with a valid bearer token."""
        if authenticate is not None and (metrics_require_token or not _is_direct_loopback(request)):
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
        Route("/", _guarded(guard, health), methods=["GET"]),
        Route("/healthz", _guarded(guard, healthz), methods=["GET"]),
        Route("/readyz", _guarded(guard, readyz), methods=["GET"]),
        Route("/status", _guarded(guard, status_route), methods=["GET"]),
        Route("/metrics", _guarded(guard, metrics_route), methods=["GET"]),
        Route("/favicon.ico", _guarded(guard, favicon), methods=["GET"]),
        Route("/favicon.svg", _guarded(guard, favicon), methods=["GET"]),
        Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
        Route("/", endpoint, methods=["POST"]),
        Route("/message", endpoint, methods=["POST"]),
        Route("/sse", endpoint, methods=["GET"]),
        *(extra_routes or []),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
