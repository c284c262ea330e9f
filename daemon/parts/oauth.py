"""Wiring the OAuth authorization server into ``--serve`` (routes, passphrase source, 401 header):
on the data dir's SQLite, or on a cluster front the cluster's PostgreSQL (mcp_bridge/oauth/pg_store.py).

The consent page checks device cookies (dashboard/device_cookies.py) against the sign-in state —
the signing key and generation in the ``dashboard_auth`` row, in the same database as the OAuth
grants — so it is given its own view of the dashboard's session store over that database
(:class:`~dashboard.sessions.SessionStore`, or a front's :class:`~dashboard.pg_sessions.PgSessionStore`):
it only reads (or first creates) that row, which every front shares, so no wiring order with the
dashboard's own store is needed, and it works with the dashboard switched off.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from starlette.routing import BaseRoute

from config import Settings
from dashboard import DeviceCookieJar, PgSessionStore, Sessions, SessionStore
from mcp_bridge import (
    ChartgenOAuthProvider,
    OAuthStore,
    PassphraseAttempts,
    PgOAuthStore,
    PgTokenStore,
    TokenStore,
    hash_passphrase,
    oauth_routes,
    resource_metadata_url,
)

CREDENTIAL_NAME = "passphrase"


@dataclass(frozen=True, slots=True)
class OAuthSetup:
    routes: list[BaseRoute]
    www_authenticate: str
    provider: ChartgenOAuthProvider


def public_base_url(settings: Settings, host: str, port: int) -> str:
    """``base_url`` if set (the TLS proxy's public URL), else the loopback address served."""
    if settings.base_url:
        return settings.base_url.rstrip("/")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def public_host(settings: Settings) -> str | None:
    """The Host header the proxy forwards (allowed past the DNS-rebinding check)."""
    return urlparse(settings.base_url).netloc or None if settings.base_url else None


def passphrase_source(store: OAuthStore | PgOAuthStore) -> Callable[[], Awaitable[str | None]]:
    """The passphrase hash: the systemd credential (hashed once, in memory) if present, else the database."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    path = Path(creds) / CREDENTIAL_NAME if creds else None
    cached: list[str] = []

    async def current() -> str | None:
        if path is not None and path.is_file():
            if not cached:
                cached.append(await asyncio.to_thread(hash_passphrase, path.read_text().strip()))
            return cached[0]
        return await store.passphrase_hash()

    return current


def oauth_setup(
    settings: Settings, tokens: TokenStore | PgTokenStore, base_url: str, attempts: PassphraseAttempts | None = None
) -> OAuthSetup:
    """The OAuth routes over the tokens' database; ``attempts`` is the operator-passphrase limiter shared
    with the dashboard's sign-in (per process: each front counts its own), and device cookies — one
    signing key for the whole cluster — choose which of its limits an attempt counts against."""
    store: OAuthStore | PgOAuthStore
    sign_in: Sessions
    if isinstance(tokens, PgTokenStore):
        store, sign_in = PgOAuthStore(tokens.db), PgSessionStore(tokens.db)
    else:
        store, sign_in = OAuthStore(tokens.db), SessionStore(tokens.db)
    provider = ChartgenOAuthProvider(
        store,
        tokens,
        base_url=base_url,
        redirect_hosts=list(settings.oauth_redirect_hosts),
        access_ttl_s=settings.oauth_access_ttl_s,
        refresh_ttl_s=settings.oauth_refresh_ttl_s,
    )
    devices = DeviceCookieJar(sign_in.sign_in_state, secure=base_url.startswith("https://"))
    routes = oauth_routes(provider, passphrase_source(store), attempts=attempts, devices=devices)
    header = f'Bearer realm="chartgen", resource_metadata="{resource_metadata_url(base_url)}"'
    return OAuthSetup(routes, header, provider)
