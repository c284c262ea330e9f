"""Wiring the operator's dashboard (``/ui``) into the HTTP server: its session store, the passphrase
source the OAuth consent page uses too, the daemon's /status document, and the Host/Origin guard."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.routing import BaseRoute

from config import Settings
from daemon.parts.oauth import passphrase_source, public_host
from dashboard import ClusterPages, DashboardDeps, PgSessionStore, Sessions, SessionStore, dashboard_routes
from engine import Tick
from mcp_bridge import (
    SERVER_VERSION,
    OAuthStore,
    PassphraseAttempts,
    PgOAuthStore,
    PgTokenStore,
    Services,
    security_settings,
)


def dashboard_setup(
    settings: Settings,
    services: Services,
    status: Callable[[], Awaitable[dict[str, Any]]],
    attempts: PassphraseAttempts | None = None,
    *,
    cluster: ClusterPages | None = None,
    notified: list[Callable[[], None]] | None = None,
    ticks: list[Callable[[Tick], None]] | None = None,
) -> list[BaseRoute]:
    """The /ui routes, or none when the dashboard is switched off or nothing stores sessions.

    ``attempts``: the operator-passphrase limiter shared with the OAuth consent page, so a guesser
    gets one budget for both pages.  A cluster front (its tokens in PostgreSQL) keeps sessions and
    OAuth grants there and gives its ``cluster`` pages and the relay's ``notified`` observers
    (daemon/front/dashboard.py)."""
    tokens = services.tokens
    if not settings.dashboard_enabled or tokens is None:
        return []
    if isinstance(tokens, PgTokenStore):
        oauth: OAuthStore | PgOAuthStore = PgOAuthStore(tokens.db)
        sessions: Sessions = PgSessionStore(tokens.db)
    else:
        oauth, sessions = OAuthStore(tokens.db), SessionStore(tokens.db)
    allowed = public_host(settings)
    guard = TransportSecurityMiddleware(security_settings(settings.host, [allowed] if allowed else None))
    deps = DashboardDeps(
        services=services,
        sessions=sessions,
        passphrase=passphrase_source(oauth),
        status=status,
        oauth=oauth if settings.oauth_enabled else None,
        secure_cookie=(settings.base_url or "").startswith("https://"),
        version=SERVER_VERSION,
        indicators=tuple(settings.indicators),
        attempts=attempts or PassphraseAttempts(),
        base_url=settings.base_url,
        cluster=cluster,
        notified=notified,
        ticks=ticks,
    )
    return dashboard_routes(deps, guard)
