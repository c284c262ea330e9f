"""The OAuth routes mounted next to /mcp: the SDK's handlers, our consent page, and two wrappers.

- RFC 8414 ``/.well-known/oauth-authorization-server``, ``/authorize``, ``/token``,
  RFC 7591 ``/register``, RFC 7009 ``/revoke`` (the SDK's handlers over our provider);
- RFC 9728 ``/.well-known/oauth-protected-resource/mcp``;
- ``/oauth/consent`` (:mod:`.consent`).

Scopes (:mod:`mcp_bridge.scopes`) are advertised as ``scopes_supported`` in both metadata
documents and accepted at registration; a client registering without a ``scope`` may ask
for any of them (the operator decides on the consent page).

Wrappers: every auth endpoint is limited per client IP; on ``/token`` and ``/revoke`` the
presented client secret is replaced by its SHA-256 before the SDK compares it with the
stored client record, which only ever holds the hash.
"""

from __future__ import annotations

import base64
import math
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from mcp.server.auth.routes import build_resource_metadata_url, create_auth_routes, create_protected_resource_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_bridge.oauth.attempts import PassphraseAttempts
from mcp_bridge.oauth.consent import ConsentPage, DeviceVerifier, PassphraseHash, client_ip
from mcp_bridge.oauth.provider import CONSENT_PATH, OAUTH_SCOPES, ChartgenOAuthProvider
from mcp_bridge.rate_limit import IpLimiter
from mcp_bridge.tokens import hash_token

MAX_FORM_BYTES = 64 * 1024


def resource_metadata_url(base_url: str) -> str:
    return str(build_resource_metadata_url(AnyHttpUrl(f"{base_url.rstrip('/')}/mcp")))


class RateLimited:
    """Answer 429 with Retry-After once an IP exceeds the limiter's budget."""

    def __init__(self, app: ASGIApp, limiter: IpLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") != "OPTIONS":
            wait = self.limiter.hit(client_ip(Request(scope)))
            if wait is not None:
                resp = JSONResponse(
                    {"error": "slow_down", "error_description": f"too many requests; retry in {math.ceil(wait)} s"},
                    status_code=429,
                    headers={"retry-after": str(max(1, math.ceil(wait)))},
                )
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HashedClientSecret:
    """Replace the client secret of a token/revoke request by its hash (the form of the stored one)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                await JSONResponse({"error": "invalid_request", "error_description": "body too large"}, 413)(
                    scope, receive, send
                )
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-length", b"authorization")]
        pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        if any(k == "client_secret" for k, _ in pairs):
            pairs = [(k, hash_token(v) if k == "client_secret" and v else v) for k, v in pairs]
            body = urlencode(pairs).encode()
        auth = dict(scope["headers"]).get(b"authorization")
        if auth is not None:
            headers.append((b"authorization", _hash_basic(auth)))
        headers.append((b"content-length", str(len(body)).encode()))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)


def _hash_basic(value: bytes) -> bytes:
    text = value.decode("latin-1")
    if not text.lower().startswith("basic "):
        return value
    try:
        decoded = base64.b64decode(text[6:].strip(), validate=True).decode()
        client_id, secret = decoded.split(":", 1)
    except (ValueError, UnicodeDecodeError):
        return value
    hashed = f"{client_id}:{quote(hash_token(unquote(secret)))}"
    return ("Basic " + base64.b64encode(hashed.encode()).decode()).encode()


def _wrap(route: Route, limiter: IpLimiter, *, hash_secret: bool = False) -> Route:
    app: Any = route.app
    if hash_secret:
        app = HashedClientSecret(app)
    return Route(route.path, endpoint=RateLimited(app, limiter), methods=sorted(route.methods or []))


def oauth_routes(
    provider: ChartgenOAuthProvider,
    passphrase_hash: PassphraseHash,
    *,
    limiter: IpLimiter | None = None,
    attempts: PassphraseAttempts | None = None,
    devices: DeviceVerifier | None = None,
) -> list[BaseRoute]:
    """Every OAuth route, ready to be added to the Starlette app; ``attempts`` and ``devices``: the
    consent page's passphrase limiter and device-cookie verifier (:class:`.consent.ConsentPage`)."""
    limiter = limiter or IpLimiter(60, 60.0)
    base = provider.base_url
    sdk_routes = create_auth_routes(
        provider,  # type: ignore[arg-type]  # mcp 2.3 also lists exchange_identity_assertion: called only when enabled (off)
        issuer_url=AnyHttpUrl(base),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=OAUTH_SCOPES, default_scopes=OAUTH_SCOPES
        ),
        revocation_options=RevocationOptions(enabled=True),
    )
    routes: list[BaseRoute] = []
    for r in sdk_routes:
        assert isinstance(r, Route)
        if r.path.startswith("/.well-known/"):
            routes.append(r)
        else:
            routes.append(_wrap(r, limiter, hash_secret=r.path in ("/token", "/revoke")))
    routes += create_protected_resource_routes(
        resource_url=AnyHttpUrl(provider.resource_url),
        authorization_servers=[AnyHttpUrl(base)],
        scopes_supported=OAUTH_SCOPES,
        resource_name="chartgen",
    )
    consent = ConsentPage(provider, passphrase_hash, attempts=attempts, devices=devices)
    routes.append(Route(CONSENT_PATH, endpoint=RateLimited(_asgi(consent), limiter), methods=["GET", "POST"]))
    return routes


def _asgi(page: ConsentPage) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await page(Request(scope, receive))
        await response(scope, receive, send)

    return app
