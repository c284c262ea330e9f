"""DNS-rebinding protection on every route: the SDK's Host/Origin check, worded to name the fix.

The check itself is the mcp SDK's (``TransportSecurityMiddleware.validate_request``); this
module builds its settings (loopback names, and ``base_url``'s host and origin) and applies it
to routes the SDK's session managers never see (the session-less fast path, health, status,
metrics, notification streams).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response


def security_settings(host: str, allowed_hosts: list[str] | None) -> TransportSecuritySettings:
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


def guarded(security: TransportSecurityMiddleware, endpoint: Callable[[Request], Awaitable[Response]]) -> Any:
    """``endpoint`` behind the SDK's Host/Origin check (421 / 403 before the endpoint runs)."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        refused = await rebinding_refusal(security, request)
        return refused if refused is not None else await endpoint(request)

    return guarded
