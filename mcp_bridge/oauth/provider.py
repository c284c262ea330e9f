"""The authorization server behind the SDK's OAuth handlers (``OAuthAuthorizationServerProvider``).

Policy, beyond what the SDK's handlers check (PKCE S256, code expiry, redirect_uri match):

- registration (RFC 7591) only for redirect URIs on the allowed hosts (config), https
  except for loopback, never with userinfo; loopback names match exactly, real domains
  (``claude.ai``) also match their subdomains — so ``evil.localhost``,
  ``localhost.evil.example`` and ``http://evil.example@localhost/`` are all refused;
- a client that never completes a consent expires after ``pending_client_ttl_s`` (an hour);
  at most ``max_pending_clients`` such clients are kept and a new registration evicts the
  oldest, so junk registrations can never fill the table and block a real client;
- scopes (:mod:`mcp_bridge.scopes`): the client's request is offered on the consent page,
  where the operator may narrow it; the approved set goes onto the code and every token
  issued from it, and a refresh never widens it;
- ``/authorize`` never approves by itself: it parks the request and sends the browser to
  the consent page, where the operator passphrase is required (:mod:`.consent`);
- a code works once; presenting it again revokes everything issued to that client;
- refresh tokens rotate: each use returns a new pair and the old refresh token is dead;
  presenting a used one again revokes the client's whole grant (theft detection);
- RFC 8707: a ``resource`` must name this server;
- tokens of one client share a principal (``oauth:<client_id>``), so alerts survive a refresh.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import urlparse

import structlog
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mcp_bridge.oauth.pg_store import PgOAuthStore
from mcp_bridge.oauth.store import AccessRow, OAuthStore, RefreshRow, grant_principal
from mcp_bridge.pg_tokens import PgTokenStore
from mcp_bridge.scopes import (
    ALERTS,
    CHARTS,
    LEGACY_OAUTH_SCOPE,
    MIGRATED_SCOPES,
    SCOPE_ORDER,
    TRADE,
    from_stored,
    ordered,
)
from mcp_bridge.tokens import TokenStore, hash_token

log = structlog.get_logger(__name__)

OAUTH_SCOPES: list[str] = list(SCOPE_ORDER)
"""Scopes advertised (``scopes_supported``) and accepted at registration and /authorize."""
CONSENT_PATH = "/oauth/consent"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
PRECHECKED = frozenset({CHARTS, ALERTS})
"""Scopes ticked on the consent page when asked for; trade and admin the operator ticks explicitly."""


def consent_choices(requested: list[str] | None) -> tuple[list[str], frozenset[str]]:
    """(scopes offered on the consent page, those ticked at first) for a client's request.

    A client that asked for nothing (or only the old ``mcp`` scope) is offered charts,
    alerts and trade; otherwise exactly what it asked for.
    """
    names = set(requested or ())
    if not names or names == {LEGACY_OAUTH_SCOPE}:
        offered = ordered({CHARTS, ALERTS, TRADE})
    else:
        offered = ordered(from_stored(" ".join(names)))
    return offered, frozenset(offered) & PRECHECKED


def _is_domain(host: str) -> bool:
    """A registrable DNS name (``claude.ai``), not a loopback name, a single label or an IP address."""
    if host in LOOPBACK_HOSTS or host.endswith(".localhost") or "." not in host or ":" in host:
        return False
    return not host.replace(".", "").isdigit()


def principal_of(client_id: str) -> str:
    return grant_principal(client_id)


def _granted(stored: list[str]) -> list[str]:
    """Scopes as kept on a code or refresh token, in display order (the old ``mcp`` read as before scopes)."""
    names = set(stored)
    if LEGACY_OAUTH_SCOPE in names:
        names = (names - {LEGACY_OAUTH_SCOPE}) | MIGRATED_SCOPES
    return ordered(names)


class ChartgenOAuthProvider:
    """The provider over a single node's SQLite or a cluster's PostgreSQL; every secret it hands out
    is stored hashed."""

    def __init__(
        self,
        store: OAuthStore | PgOAuthStore,
        tokens: TokenStore | PgTokenStore,
        *,
        base_url: str,
        redirect_hosts: list[str],
        access_ttl_s: float = 3600.0,
        refresh_ttl_s: float = 30 * 86400.0,
        code_ttl_s: float = 300.0,
        consent_ttl_s: float = 600.0,
        pending_client_ttl_s: float = 3600.0,
        max_pending_clients: int = 1000,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.base_url = base_url.rstrip("/")
        self.resource_url = f"{self.base_url}/mcp"
        self.redirect_hosts = {h.lower().strip("[]") for h in redirect_hosts}
        self.access_ttl_s = access_ttl_s
        self.refresh_ttl_s = refresh_ttl_s
        self.code_ttl_s = code_ttl_s
        self.consent_ttl_s = consent_ttl_s
        self.pending_client_ttl_s = pending_client_ttl_s
        self.max_pending_clients = max_pending_clients

    # --- clients -------------------------------------------------------------------------
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        found = await self.store.client(client_id, self.pending_client_ttl_s)
        if found is None:
            return None
        info, secret_hash = found
        client = OAuthClientInformationFull.model_validate(info)
        # the stored secret is a hash; the token/revoke routes hash the presented secret too
        client.client_secret = secret_hash
        if client.scope is None or LEGACY_OAUTH_SCOPE in client.scope.split():
            # registered before scopes existed: it may ask for any; the operator decides on the consent page
            client.scope = " ".join([LEGACY_OAUTH_SCOPE, *OAUTH_SCOPES])
        return client

    def redirect_allowed(self, uri: str) -> str | None:
        """None if ``uri`` may receive codes, else the reason."""
        try:
            parsed = urlparse(uri)
            port = parsed.port
        except ValueError:
            return f"{uri} is not a valid URL"
        host = (parsed.hostname or "").lower()
        if parsed.fragment:
            return f"{uri} has a fragment; redirect URIs must not"
        if parsed.username is not None or parsed.password is not None or "@" in parsed.netloc:
            return f"{uri} has a user name in it (user@host); redirect URIs must name only the host"
        netloc_host = parsed.netloc.rsplit(":", 1)[0] if port is not None else parsed.netloc
        if netloc_host.lower().strip("[]") != host:
            return f"{uri} has an unusual host part; write it plainly, e.g. https://claude.ai/api/mcp/auth_callback"
        exact = host in self.redirect_hosts
        sub = any(host.endswith("." + h) for h in self.redirect_hosts if _is_domain(h))
        if not (exact or sub):
            allowed = sorted(self.redirect_hosts)
            return (
                f"redirect host {host or '(none)'} is not allowed (oauth_redirect_hosts: {allowed}; "
                "loopback names must match exactly)"
            )
        if parsed.scheme != "https" and not (parsed.scheme == "http" and host in LOOPBACK_HOSTS):
            return f"{uri} must use https (plain http only for loopback)"
        return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        for uri in client_info.redirect_uris or []:
            problem = self.redirect_allowed(str(uri))
            if problem is not None:
                log.warning("oauth_registration_refused", reason=problem)
                raise RegistrationError("invalid_redirect_uri", problem)
        info = client_info.model_dump(mode="json", exclude={"client_secret"}, exclude_none=True)
        secret = client_info.client_secret
        evicted = await self.store.save_client(
            client_info.client_id or "",
            info,
            hash_token(secret) if secret else None,
            pending_ttl_s=self.pending_client_ttl_s,
            max_pending=self.max_pending_clients,
        )
        if evicted:
            log.warning("oauth_pending_clients_evicted", count=evicted, max_pending=self.max_pending_clients)
        log.info("oauth_client_registered", client_id=client_info.client_id, name=client_info.client_name)

    # --- authorization ---------------------------------------------------------------------
    def _check_resource(self, resource: str | None) -> None:
        if resource is not None and resource.rstrip("/") not in (self.resource_url, self.base_url):
            raise AuthorizeError("invalid_target", f"resource {resource} is not this server ({self.resource_url})")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self._check_resource(params.resource)
        request_id = secrets.token_urlsafe(32)
        parked = {
            "state": params.state,
            "scopes": params.scopes or [],
            "code_challenge": params.code_challenge,
            "redirect_uri": str(params.redirect_uri),
            "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
            "resource": params.resource,
        }
        await self.store.save_consent(request_id, client.client_id or "", parked, self.consent_ttl_s)
        return f"{self.base_url}{CONSENT_PATH}?request={request_id}"

    async def approve(self, request_id: str, scopes: frozenset[str]) -> str | None:
        """The operator approved ``scopes``: a single-use code and the redirect URL carrying it; None if stale.

        Only scopes the consent page offered are granted (a posted extra one is dropped).
        """
        pending = await self.store.consent(request_id)
        if pending is None:
            return None
        client_id, p = pending
        offered, _ = consent_choices(p.get("scopes"))
        granted = [s for s in offered if s in scopes]
        if not granted:
            return None
        code = secrets.token_urlsafe(32)
        data = {**p, "client_id": client_id, "scopes": granted}
        if not await self.store.approve(request_id, code, data, self.code_ttl_s):
            return None
        log.info("oauth_consent_approved", client_id=client_id, scopes=granted)
        return construct_redirect_uri(p["redirect_uri"], code=code, state=p.get("state"))

    async def deny(self, request_id: str) -> str | None:
        pending = await self.store.consent(request_id)
        if pending is None:
            return None
        client_id, p = pending
        if not await self.store.discard_consent(request_id):
            return None
        log.info("oauth_consent_denied", client_id=client_id)
        return construct_redirect_uri(
            p["redirect_uri"], error="access_denied", error_description="the operator refused", state=p.get("state")
        )

    # --- codes -----------------------------------------------------------------------------
    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        found = await self.store.code(authorization_code)
        if found is None:
            return None
        data, expires_at, used_at = found
        if data["client_id"] != client.client_id:
            return None
        if used_at is not None:
            log.warning("oauth_code_reused", client_id=client.client_id)
            await self.store.revoke_grant(data["client_id"])
            return None
        return AuthorizationCode(
            code=authorization_code,
            scopes=_granted(data["scopes"]),
            expires_at=expires_at,
            client_id=data["client_id"],
            code_challenge=data["code_challenge"],
            redirect_uri=data["redirect_uri"],
            redirect_uri_provided_explicitly=data["redirect_uri_provided_explicitly"],
            resource=data.get("resource"),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        client_id = client.client_id or ""
        scopes, resource = authorization_code.scopes, authorization_code.resource

        async def issue(tx: Any) -> OAuthToken:
            return await self._issue(tx, client_id, scopes, resource)

        tokens = await self.store.consume_code(authorization_code.code, issue)
        if tokens is None:
            raise TokenError("invalid_grant", "authorization code was already used")
        log.info("oauth_tokens_issued", client_id=client_id, grant="authorization_code")
        return tokens

    async def _issue(self, tx: Any, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        now = time.time()
        access = "cg_oat_" + secrets.token_urlsafe(32)
        refresh = "cg_ort_" + secrets.token_urlsafe(32)
        principal = principal_of(client_id)
        issued = AccessRow("tok_" + secrets.token_hex(8), client_id, principal, now + self.access_ttl_s, scopes)
        await self.store.insert_access(tx, issued, access)
        row = RefreshRow(client_id, principal_of(client_id), scopes, resource, now + self.refresh_ttl_s)
        await self.store.insert_refresh(tx, refresh, row)
        return OAuthToken(
            access_token=access,
            expires_in=int(self.access_ttl_s),
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    # --- refresh -----------------------------------------------------------------------------
    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        row = await self.store.refresh(refresh_token)
        if row is None:
            reused = await self.store.refresh_owner_if_used(refresh_token)
            if reused is not None:
                log.warning("oauth_refresh_token_reused", client_id=reused)
                await self.store.revoke_grant(reused)
            return None
        if row.client_id != client.client_id:
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=row.client_id,
            scopes=_granted(row.scopes),
            expires_at=None if row.expires_at is None else int(row.expires_at),
            resource=row.resource,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        client_id = client.client_id or ""
        # never wider than the refresh token: a narrower request narrows, nothing widens
        granted = [s for s in (scopes or refresh_token.scopes) if s in refresh_token.scopes]
        if not granted:
            raise TokenError("invalid_scope", "no scope left to grant; request a subset of the refresh token's scopes")

        async def issue(tx: Any) -> OAuthToken:
            return await self._issue(tx, client_id, granted, refresh_token.resource)

        tokens = await self.store.consume_refresh(refresh_token.token, issue)
        if tokens is None:
            raise TokenError("invalid_grant", "refresh token is no longer valid")
        log.info("oauth_tokens_issued", client_id=client_id, grant="refresh_token")
        return tokens

    # --- access tokens and revocation ------------------------------------------------------------
    async def load_access_token(self, token: str) -> AccessToken | None:
        info = await self.tokens.verify(token)
        if info is None or info.kind != "oauth":
            return None
        return AccessToken(
            token=token,
            client_id=info.name,
            scopes=ordered(info.scopes),
            expires_at=None if info.expires_at is None else int(info.expires_at),
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        if isinstance(token, RefreshToken):
            await self.store.revoke_grant(token.client_id)
        else:
            await self.store.revoke_access(token.token)
        log.info("oauth_token_revoked", client_id=token.client_id, kind=type(token).__name__)
