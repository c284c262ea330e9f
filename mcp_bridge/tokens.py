"""Bearer tokens: personal access tokens now, OAuth access tokens later, in one hashed store.

A token is shown once, at creation; the database keeps only its SHA-256 (tokens are 256
random bits, so a fast hash is safe).  Each token has an id (``tok_…``) and a *principal*:
the identity alerts, notification queues and subscriptions are keyed by.  For a personal
access token the principal is the token's own id; OAuth will give all tokens of one grant
the same principal, so a refreshed token keeps its alerts.  Revocation and expiry take
effect on the next request: verified tokens are cached in memory, and every revocation drops
that cache in every process through a marker file (:mod:`mcp_bridge.token_cache`).  The revoking
transaction also stops what the principal armed — its trading, schedules and alert actions
(:mod:`mcp_bridge.revocation`).

Every token carries scopes (:mod:`mcp_bridge.scopes`), stored space-separated in the
``scopes`` column; tokens created before the column existed were migrated to
``charts alerts trade`` (what they could do then), and a row without scopes grants nothing.
"""

from __future__ import annotations

import builtins
import hashlib
import secrets
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_bridge.revocation import Stopped, stop_principals_in
from mcp_bridge.scopes import (
    DEFAULT_TOKEN_SCOPES,
    MIGRATED_SCOPES,
    ScopeError,
    from_stored,
    parse_scopes,
    to_stored,
)
from mcp_bridge.token_cache import VerifiedTokenCache, signal_revocation
from storage import Database, Migrations

if TYPE_CHECKING:
    from _typeshed import SupportsKeysAndGetItem

TOKEN_PREFIX = "cg_pat_"
STDIO_PRINCIPAL = "stdio"
"""The principal of the one client of a stdio session."""

MIGRATIONS = Migrations(
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
                created_at REAL NOT NULL,
                expires_at REAL,
                revoked_at REAL,
                last_used_at REAL
            );
            CREATE INDEX access_tokens_principal ON access_tokens (principal)
            """,
        ),
        (
            2,
            f"""
            ALTER TABLE access_tokens ADD COLUMN scopes TEXT;
            UPDATE access_tokens SET scopes = '{to_stored(MIGRATED_SCOPES)}'
            """,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What the server knows about a token (never the token text)."""

    id: str
    name: str
    kind: str
    principal: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None
    scopes: frozenset[str]
    """What the token may do (:mod:`mcp_bridge.scopes`)."""

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > time.time())


@dataclass(frozen=True, slots=True)
class Revocation:
    """The tokens one revocation revoked and what it stopped of their principals."""

    tokens: list[TokenInfo]
    stopped: Stopped


class TokenError(ValueError):
    """A token operation the caller must correct (unknown token, bad name)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scope_list(scopes: Iterable[str]) -> frozenset[str]:
    """The scope set of ``scopes`` (names); :class:`ScopeError` for an unknown name or an empty list."""
    return parse_scopes(" ".join(scopes))


def token_info(row: SupportsKeysAndGetItem[str, Any]) -> TokenInfo:
    """A stored token (an ``access_tokens`` row: SQLite's or PostgreSQL's) as :class:`TokenInfo`."""
    r = dict(row)
    return TokenInfo(
        id=r["id"],
        name=r["name"],
        kind=r["kind"],
        principal=r["principal"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        revoked_at=r["revoked_at"],
        last_used_at=r["last_used_at"],
        scopes=from_stored(r["scopes"]),
    )


def new_token(
    name: str,
    *,
    kind: str = "pat",
    principal: str | None = None,
    ttl_s: float | None = None,
    scopes: Iterable[str] = DEFAULT_TOKEN_SCOPES,
) -> tuple[str, TokenInfo]:
    """A new token's text and info, the name and scopes checked (both stores insert what this returns)."""
    name = name.strip()
    if not name or len(name) > 64 or not name.isprintable():
        raise TokenError("token name must be 1-64 printable characters, e.g. 'laptop' or 'claude-desktop'")
    try:
        granted = parse_scope_list(scopes)
    except ScopeError as exc:
        raise TokenError(str(exc)) from None
    token_id = "tok_" + secrets.token_hex(8)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = time.time()
    expires = None if ttl_s is None else now + ttl_s
    return token, TokenInfo(token_id, name, kind, principal or token_id, now, expires, None, None, granted)


def no_active_token(id_or_name: str) -> TokenError:
    return TokenError(f"no active token with id or name {id_or_name!r}; see `chartgen token list`")


PRINCIPALS_NAMED_SQL = (
    "SELECT principal FROM access_tokens WHERE id = ? OR name = ? OR principal = ?"
    " UNION SELECT 'oauth:' || client_id FROM oauth_clients WHERE consented_at IS NOT NULL"
    " AND (client_id = ? OR json_extract(info, '$.client_name') = ? OR 'oauth:' || client_id = ?)"
)
"""The principals a name stands for: a token's id or name, an OAuth client's id or name, a principal."""


class TokenStore:
    """Create, list, revoke and verify bearer tokens."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.cache: VerifiedTokenCache[TokenInfo] = VerifiedTokenCache(db.path)

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
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at, expires_at, scopes)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.id,
                    info.name,
                    info.kind,
                    info.principal,
                    hash_token(token),
                    info.created_at,
                    info.expires_at,
                    to_stored(info.scopes),
                ),
            )
        return token, info

    async def verify(self, token: str) -> TokenInfo | None:
        """The info of an active token, or None for an unknown, revoked or expired one."""
        if not token or len(token) > 512:
            return None
        digest = hash_token(token)
        cached = self.cache.get(digest)
        if cached is not None:
            return cached if cached.active else None
        seen = self.cache.snapshot()
        row = await self.db.fetchone("SELECT * FROM access_tokens WHERE token_hash = ?", (digest,))
        if row is None:
            return None
        info = token_info(row)
        if not info.active:
            return None
        self.cache.put(digest, info, seen)
        return info

    async def list(self) -> list[TokenInfo]:
        rows = await self.db.fetchall("SELECT * FROM access_tokens ORDER BY created_at")
        return [token_info(r) for r in rows]

    async def principals_named(self, name: str) -> builtins.list[str]:
        """The principals ``name`` stands for — a token's id or name, an OAuth client's id or name,
        or a principal itself (``tok_…``, ``oauth:…``) — sorted; empty when none."""
        rows = await self.db.fetchall(PRINCIPALS_NAMED_SQL, (name,) * 6)
        return sorted({str(r[0]) for r in rows})

    async def revoke(self, id_or_name: str) -> builtins.list[TokenInfo]:
        """Revoke the token with this id, or every active token with this name; returns what was revoked
        (what the revocation stopped: :meth:`revoke_all`)."""
        return (await self.revoke_all(id_or_name)).tokens

    async def revoke_all(self, id_or_name: str) -> Revocation:
        """Revoke the token with this id, or every active token with this name, and in the same
        transaction stop the trading, schedules and alert actions of every principal left without a
        live credential (mcp_bridge/revocation.py)."""
        now = time.time()

        def step(conn: sqlite3.Connection) -> Revocation:
            rows = [
                token_info(r)
                for r in conn.execute(
                    "SELECT * FROM access_tokens WHERE (id = ? OR name = ?) AND revoked_at IS NULL",
                    (id_or_name, id_or_name),
                ).fetchall()
            ]
            if not rows:
                raise no_active_token(id_or_name)
            conn.executemany("UPDATE access_tokens SET revoked_at = ? WHERE id = ?", [(now, info.id) for info in rows])
            return Revocation(rows, stop_principals_in(conn, [info.principal for info in rows], now))

        done = await self.db.run_transaction(step, durable=True)
        signal_revocation(self.db.path)
        return done
