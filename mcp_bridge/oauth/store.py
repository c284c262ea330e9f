"""What the OAuth server persists: clients, pending consents, codes, refresh tokens, the passphrase hash.

Everything secret is stored as a SHA-256 of 256 random bits (client secrets, consent
request ids, codes, refresh tokens) or as a scrypt hash (the operator passphrase); access
tokens live in the shared ``access_tokens`` table (:mod:`mcp_bridge.tokens`).  Single use
is enforced in SQL: a code or a refresh token is consumed by an ``UPDATE … WHERE
used_at IS NULL`` inside the transaction that issues the new tokens, so two concurrent
exchanges can never both succeed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from config.database import Database, Migrations
from mcp_bridge.token_cache import signal_revocation
from mcp_bridge.tokens import hash_token

MIGRATIONS = Migrations(
    "mcp_bridge.oauth",
    (
        (
            1,
            """
            CREATE TABLE oauth_clients (
                client_id TEXT PRIMARY KEY,
                info TEXT NOT NULL,
                secret_hash TEXT,
                created_at REAL NOT NULL
            );
            CREATE TABLE oauth_consents (
                request_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                params TEXT NOT NULL,
                expires_at REAL NOT NULL,
                used_at REAL
            );
            CREATE TABLE oauth_codes (
                code_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                data TEXT NOT NULL,
                expires_at REAL NOT NULL,
                used_at REAL
            );
            CREATE TABLE oauth_refresh_tokens (
                token_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                scopes TEXT NOT NULL,
                resource TEXT,
                created_at REAL NOT NULL,
                expires_at REAL,
                used_at REAL,
                revoked_at REAL
            );
            CREATE INDEX oauth_refresh_client ON oauth_refresh_tokens (client_id);
            CREATE TABLE oauth_passphrase (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                hash TEXT NOT NULL,
                set_at REAL NOT NULL
            )
            """,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class RefreshRow:
    client_id: str
    principal: str
    scopes: list[str]
    resource: str | None
    expires_at: float | None


class OAuthStore:
    """SQLite persistence of the authorization server."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- clients ---------------------------------------------------------------------
    async def save_client(self, client_id: str, info: dict[str, Any], secret_hash: str | None) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO oauth_clients (client_id, info, secret_hash, created_at) VALUES (?, ?, ?, ?)",
                (client_id, json.dumps(info, sort_keys=True), secret_hash, time.time()),
            )

    async def client(self, client_id: str) -> tuple[dict[str, Any], str | None] | None:
        row = await self.db.fetchone("SELECT info, secret_hash FROM oauth_clients WHERE client_id = ?", (client_id,))
        return None if row is None else (json.loads(row["info"]), row["secret_hash"])

    async def client_count(self) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) AS n FROM oauth_clients", ())
        return int(row["n"]) if row is not None else 0

    # --- consent requests ----------------------------------------------------------------
    async def save_consent(self, request_id: str, client_id: str, params: dict[str, Any], ttl_s: float) -> None:
        now = time.time()
        async with self.db.transaction() as tx:
            await tx.execute("DELETE FROM oauth_consents WHERE expires_at < ?", (now - 3600,))
            await tx.execute(
                "INSERT INTO oauth_consents (request_hash, client_id, params, expires_at) VALUES (?, ?, ?, ?)",
                (hash_token(request_id), client_id, json.dumps(params, sort_keys=True), now + ttl_s),
            )

    async def consent(self, request_id: str) -> tuple[str, dict[str, Any]] | None:
        """(client_id, params) of a pending, unexpired consent request."""
        row = await self.db.fetchone(
            "SELECT client_id, params FROM oauth_consents"
            " WHERE request_hash = ? AND used_at IS NULL AND expires_at > ?",
            (hash_token(request_id), time.time()),
        )
        return None if row is None else (row["client_id"], json.loads(row["params"]))

    async def approve(self, request_id: str, code: str, data: dict[str, Any], ttl_s: float) -> bool:
        """Consume the consent request and store its code, in one transaction; False if already used."""
        now = time.time()
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE oauth_consents SET used_at = ? WHERE request_hash = ? AND used_at IS NULL AND expires_at > ?",
                (now, hash_token(request_id), now),
            )
            if cur.rowcount != 1:
                return False
            await tx.execute("DELETE FROM oauth_codes WHERE expires_at < ?", (now - 3600,))
            await tx.execute(
                "INSERT INTO oauth_codes (code_hash, client_id, data, expires_at) VALUES (?, ?, ?, ?)",
                (hash_token(code), data["client_id"], json.dumps(data, sort_keys=True), now + ttl_s),
            )
        return True

    async def discard_consent(self, request_id: str) -> bool:
        """Close a pending consent request without a code (denied); False if it was no longer pending."""
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE oauth_consents SET used_at = ? WHERE request_hash = ? AND used_at IS NULL",
                (time.time(), hash_token(request_id)),
            )
            return bool(cur.rowcount == 1)

    # --- codes ---------------------------------------------------------------------------
    async def code(self, code: str) -> tuple[dict[str, Any], float, float | None] | None:
        """(data, expires_at, used_at) of a code."""
        row = await self.db.fetchone(
            "SELECT data, expires_at, used_at FROM oauth_codes WHERE code_hash = ?", (hash_token(code),)
        )
        return None if row is None else (json.loads(row["data"]), row["expires_at"], row["used_at"])

    async def consume_code(self, code: str, issue: Any) -> Any:
        """Mark ``code`` used and run ``issue(tx)`` in the same transaction; None if it was already used."""
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE oauth_codes SET used_at = ? WHERE code_hash = ? AND used_at IS NULL",
                (time.time(), hash_token(code)),
            )
            if cur.rowcount != 1:
                return None
            return await issue(tx)

    # --- refresh tokens --------------------------------------------------------------------
    @staticmethod
    async def insert_refresh(tx: Any, token: str, row: RefreshRow) -> None:
        await tx.execute(
            "INSERT INTO oauth_refresh_tokens (token_hash, client_id, principal, scopes, resource, created_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                hash_token(token),
                row.client_id,
                row.principal,
                " ".join(row.scopes),
                row.resource,
                time.time(),
                row.expires_at,
            ),
        )

    async def refresh(self, token: str) -> RefreshRow | None:
        """An active (unused, unrevoked, unexpired) refresh token."""
        row = await self.db.fetchone(
            "SELECT * FROM oauth_refresh_tokens WHERE token_hash = ? AND used_at IS NULL AND revoked_at IS NULL"
            " AND (expires_at IS NULL OR expires_at > ?)",
            (hash_token(token), time.time()),
        )
        if row is None:
            return None
        return RefreshRow(row["client_id"], row["principal"], row["scopes"].split(), row["resource"], row["expires_at"])

    async def refresh_owner_if_used(self, token: str) -> str | None:
        """The client of a refresh token that was already rotated away (a replay), else None."""
        row = await self.db.fetchone(
            "SELECT client_id FROM oauth_refresh_tokens WHERE token_hash = ? AND used_at IS NOT NULL",
            (hash_token(token),),
        )
        return None if row is None else str(row["client_id"])

    async def consume_refresh(self, token: str, issue: Any) -> Any:
        """Rotate: mark ``token`` used and run ``issue(tx)`` in the same transaction; None if no longer active."""
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE oauth_refresh_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL"
                " AND revoked_at IS NULL",
                (time.time(), hash_token(token)),
            )
            if cur.rowcount != 1:
                return None
            return await issue(tx)

    async def revoke_grant(self, client_id: str) -> None:
        """Revoke every refresh and access token issued to ``client_id``."""
        now = time.time()
        async with self.db.transaction() as tx:
            await tx.execute(
                "UPDATE oauth_refresh_tokens SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL",
                (now, client_id),
            )
            await tx.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE kind = 'oauth' AND name = ? AND revoked_at IS NULL",
                (now, client_id),
            )
        signal_revocation(self.db.path)

    async def revoke_access(self, token: str) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE token_hash = ? AND revoked_at IS NULL",
                (time.time(), hash_token(token)),
            )
        signal_revocation(self.db.path)

    # --- passphrase --------------------------------------------------------------------------
    async def passphrase_hash(self) -> str | None:
        row = await self.db.fetchone("SELECT hash FROM oauth_passphrase WHERE id = 1", ())
        return None if row is None else str(row["hash"])

    async def set_passphrase_hash(self, value: str) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO oauth_passphrase (id, hash, set_at) VALUES (1, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, set_at = excluded.set_at",
                (value, time.time()),
            )
