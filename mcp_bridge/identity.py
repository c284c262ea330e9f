"""Who is calling: the principal a tool call acts for.

Over HTTP the principal comes from the bearer token the request was authenticated with
(the HTTP layer stores it in the ASGI scope under :data:`SCOPE_KEY`); a stdio session is
one client with the fixed principal ``stdio``.  Tool handlers get the principal and the
scopes in their :class:`~mcp_bridge.tools.unit.ToolContext`.  The router also binds the
principal around each call for :func:`current_principal`, which only the render gate reads
(engine.charts.gate: how many charts one client has rendering), deep below the tool layer.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from mcp_bridge.scopes import ALL_SCOPES
from mcp_bridge.tokens import STDIO_PRINCIPAL

SCOPE_KEY = "chartgen.principal"
SCOPES_KEY = "chartgen.scopes"
"""ASGI scope key of the authenticated caller's scopes (a frozenset of scope names)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated HTTP caller: the principal it acts for and the scopes its token carries."""

    principal: str
    scopes: frozenset[str]


_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("chartgen_principal", default=None)


def principal_of(ctx: Any) -> str | None:
    """The principal of an SDK request context: the HTTP scope's, else stdio's (no HTTP request)."""
    request = getattr(ctx, "request", None)
    if request is None:
        return STDIO_PRINCIPAL
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        value = scope.get(SCOPE_KEY)
        return value if isinstance(value, str) else None
    return None


def scopes_of(ctx: Any) -> frozenset[str] | None:
    """The scopes of an SDK request context: stdio's are all of them; an HTTP request's are its
    bearer token's; None for an HTTP request that carried no bearer (the HTTP layer lets only
    ``initialize`` and ``tools/list`` through without one while authentication is on)."""
    request = getattr(ctx, "request", None)
    if request is None:
        return ALL_SCOPES
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        value = scope.get(SCOPES_KEY)
        return value if isinstance(value, frozenset) else None
    return None


def current_principal() -> str | None:
    """The principal of the tool call being served (None: an unauthenticated HTTP caller)."""
    return _principal.get()


def bind_principal(principal: str | None) -> contextvars.Token[str | None]:
    return _principal.set(principal)


def reset_principal(token: contextvars.Token[str | None]) -> None:
    _principal.reset(token)
