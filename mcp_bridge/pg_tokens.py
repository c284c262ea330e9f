"""Bearer tokens on PostgreSQL, for the cluster's fronts: the operations of
:class:`mcp_bridge.tokens.TokenStore` (SQLite) on a table every front reads.

Tokens are created, listed and revoked by ``chartgen token … --cluster`` and verified by every
front (``chartgen --serve --cluster``).  A verified token is not cached: the single node's cache
is dropped on revocation through a marker file beside its SQLite database, which fronts on other
hosts cannot see, so a front asks PostgreSQL on every request (one indexed read) and a
revocation takes effect on the next request at every front.  PostgreSQL away: verification
raises :class:`~storage.postgres.StorageUnavailable`, which the HTTP layer answers with 503 (a
token it cannot check is neither accepted nor reported as invalid).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Awaitable, Callable, Iterable

import asyncpg

from mcp_bridge.revocation import stop_principals
from mcp_bridge.scopes import DEFAULT_TOKEN_SCOPES, to_stored
from mcp_bridge.tokens import Revocation, TokenInfo, hash_token, new_token, no_active_token, token_info
from storage import Migrations, PostgresDatabase, unreachable_as

PG_TOKEN_MIGRATIONS = Migrations(
    "mcp_bridge.tokens",
    (
        (
            1,
            """
            CREATE TABLE access_tokens (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('pat', 'oauth')),
                principal TEXT NOT NULL,
                token_hash TEXT NOT NULL UNIQUE,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION,
                revoked_at DOUBLE PRECISION,
                last_used_at DOUBLE PRECISION,
                scopes TEXT
            );
            CREATE INDEX access_tokens_principal ON access_tokens (principal)
            """,
        ),
    ),
)
"""The shape SQLite's token table reached by its step 2 (scopes), in one step."""


class PgTokenStore:
    """Create, list, revoke and verify bearer tokens in the cluster's PostgreSQL."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._where = db.where

    async def create(
        self,
        name: str,
        *,
        kind: str = "pat",
        principal: str | None = None,
        ttl_s: float | None = None,
        scopes: Iterable[str] = DEFAULT_TOKEN_SCOPES,
    ) -> tuple[str, TokenInfo]:
        """A new token: returns (token text — show it once, its info)."""
        token, info = new_token(name, kind=kind, principal=principal, ttl_s=ttl_s, scopes=scopes)
        with unreachable_as("token not created", self._where):
            await self.db.execute(
                "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at, expires_at, scopes)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                info.id,
                info.name,
                info.kind,
                info.principal,
                hash_token(token),
                info.created_at,
                info.expires_at,
                to_stored(info.scopes),
            )
        return token, info

    async def verify(self, token: str) -> TokenInfo | None:
        """The info of an active token, or None for an unknown, revoked or expired one."""
        if not token or len(token) > 512:
            return None
        with unreachable_as("token not checked", self._where):
            row = await self.db.fetchrow("SELECT * FROM access_tokens WHERE token_hash = $1", hash_token(token))
        if row is None:
            return None
        info = token_info(row)
        return info if info.active else None

    async def list(self) -> list[TokenInfo]:
        with unreachable_as("tokens not listed", self._where):
            rows = await self.db.fetch("SELECT * FROM access_tokens ORDER BY created_at")
        return [token_info(r) for r in rows]

    async def principals_named(self, name: str) -> builtins.list[str]:
        """The principals ``name`` stands for (:meth:`mcp_bridge.tokens.TokenStore.principals_named`)."""
        with unreachable_as("principal not found", self._where):
            rows = await self.db.fetch(
                "SELECT principal FROM access_tokens WHERE id = $1 OR name = $1 OR principal = $1"
                " UNION SELECT 'oauth:' || client_id FROM oauth_clients WHERE consented_at IS NOT NULL"
                " AND (client_id = $1 OR (info::jsonb ->> 'client_name') = $1 OR 'oauth:' || client_id = $1)",
                name,
            )
        return sorted({str(r[0]) for r in rows})

    async def revoke(self, id_or_name: str) -> builtins.list[TokenInfo]:
        """Revoke the token with this id, or every active token with this name; returns what was revoked."""
        return (await self.revoke_all(id_or_name)).tokens

    async def revoke_all(
        self,
        id_or_name: str,
        *,
        also: Callable[[asyncpg.Connection, builtins.list[str]], Awaitable[None]] | None = None,
    ) -> Revocation:
        """:meth:`revoke`, stopping in the same transaction the trading, schedules and alert actions of
        every principal left without a live credential (mcp_bridge/revocation.py); ``also`` runs in
        that transaction too, with those principals (``token revoke --cancel-open --cluster``: their
        cancel-open requests)."""
        now = time.time()
        with unreachable_as("token not revoked", self._where):
            async with self.db.transaction() as conn:
                rows = await conn.fetch(
                    "UPDATE access_tokens SET revoked_at = $2 WHERE (id = $1 OR name = $1) AND revoked_at IS NULL"
                    " RETURNING *",
                    id_or_name,
                    now,
                )
                if not rows:
                    raise no_active_token(id_or_name)
                tokens = [token_info(r) for r in rows]
                stopped = await stop_principals(conn, [t.principal for t in tokens], now)
                if also is not None and stopped.principals:
                    await also(conn, stopped.principals)
        return Revocation(tokens, stopped)
