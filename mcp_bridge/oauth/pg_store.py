"""The OAuth server's records on PostgreSQL, for the cluster's fronts: the operations of
:class:`mcp_bridge.oauth.store.OAuthStore` (SQLite) on tables every front shares.

A client registers at one front, the operator approves its consent at another, and it exchanges
the code and refreshes at any: every step reads and writes the cluster's PostgreSQL, with the
single node's rules.  Single use holds across fronts the same way it holds across requests: a
code or a refresh token is consumed by ``UPDATE … WHERE used_at IS NULL`` inside the transaction
that issues the new tokens — two fronts exchanging one code at the same moment serialize on the
row, and the second finds it used.  Access tokens go to the cluster's ``access_tokens``
(mcp_bridge/pg_tokens.py), which every front checks on every request, so a revoked grant is
refused by every front on the next request.  The passphrase hash is the cluster's
(``chartgen passphrase set --cluster``); a front's systemd credential ``passphrase`` still wins.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from mcp_bridge.oauth.store import CLIENTS_SQL, AccessRow, RefreshRow, client_entry, grant_principal
from mcp_bridge.revocation import Stopped, stop_principals
from mcp_bridge.scopes import to_stored
from mcp_bridge.tokens import hash_token
from storage import Migrations, PostgresDatabase, rowcount

PG_OAUTH_MIGRATIONS = Migrations(
    "mcp_bridge.oauth",
    (
        (
            1,
            """
            CREATE TABLE oauth_clients (
                client_id TEXT PRIMARY KEY,
                info TEXT NOT NULL,
                secret_hash TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                consented_at DOUBLE PRECISION
            );
            CREATE INDEX oauth_clients_pending ON oauth_clients (created_at) WHERE consented_at IS NULL;
            CREATE TABLE oauth_consents (
                request_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                params TEXT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                used_at DOUBLE PRECISION
            );
            CREATE TABLE oauth_codes (
                code_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                data TEXT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                used_at DOUBLE PRECISION
            );
            CREATE TABLE oauth_refresh_tokens (
                token_hash TEXT PRIMARY KEY,
                client_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                scopes TEXT NOT NULL,
                resource TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION,
                used_at DOUBLE PRECISION,
                revoked_at DOUBLE PRECISION
            );
            CREATE INDEX oauth_refresh_client ON oauth_refresh_tokens (client_id);
            CREATE TABLE oauth_passphrase (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                hash TEXT NOT NULL,
                set_at DOUBLE PRECISION NOT NULL
            )
            """,
        ),
    ),
)
"""The shape SQLite's OAuth tables reached by their step 2, in one step."""

_PENDING = "SELECT client_id FROM oauth_clients WHERE consented_at IS NULL"


async def _delete_pending(conn: asyncpg.Connection, where: str, *args: Any) -> None:
    """Delete the pending (never-consented) clients matching ``where``, with their parked consents."""
    selected = f"{_PENDING} AND {where}"
    await conn.execute(f"DELETE FROM oauth_consents WHERE client_id IN ({selected})", *args)
    await conn.execute(f"DELETE FROM oauth_clients WHERE client_id IN ({selected})", *args)


class PgOAuthStore:
    """PostgreSQL persistence of the authorization server (the cluster's fronts)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    # --- clients ---------------------------------------------------------------------
    async def save_client(
        self,
        client_id: str,
        info: dict[str, Any],
        secret_hash: str | None,
        *,
        pending_ttl_s: float = 3600.0,
        max_pending: int = 1000,
    ) -> int:
        """:meth:`OAuthStore.save_client`: expired pending clients go, then the oldest past ``max_pending``.

        An advisory lock serializes registrations across fronts, so two cannot both count the same
        room and leave more than ``max_pending`` pending clients."""
        now = time.time()
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('oauth/registrations', 0))")
            await _delete_pending(conn, "created_at < $1", now - pending_ttl_s)
            pending = await conn.fetchval("SELECT COUNT(*) FROM oauth_clients WHERE consented_at IS NULL")
            excess = int(pending) - max_pending + 1
            if excess > 0:
                await _delete_pending(
                    conn, f"client_id IN ({_PENDING} ORDER BY created_at, client_id LIMIT $1)", excess
                )
            await conn.execute(
                "INSERT INTO oauth_clients (client_id, info, secret_hash, created_at) VALUES ($1, $2, $3, $4)",
                client_id,
                json.dumps(info, sort_keys=True),
                secret_hash,
                now,
            )
        return max(0, excess)

    async def client(self, client_id: str, pending_ttl_s: float = 3600.0) -> tuple[dict[str, Any], str | None] | None:
        row = await self.db.fetchrow(
            "SELECT info, secret_hash FROM oauth_clients WHERE client_id = $1"
            " AND (consented_at IS NOT NULL OR created_at >= $2)",
            client_id,
            time.time() - pending_ttl_s,
        )
        return None if row is None else (json.loads(row["info"]), row["secret_hash"])

    async def client_counts(self) -> tuple[int, int]:
        row = await self.db.fetchrow(
            "SELECT COUNT(consented_at) AS done, COUNT(*) - COUNT(consented_at) AS pending FROM oauth_clients"
        )
        return (int(row["done"]), int(row["pending"])) if row is not None else (0, 0)

    # --- consent requests ----------------------------------------------------------------
    async def save_consent(self, request_id: str, client_id: str, params: dict[str, Any], ttl_s: float) -> None:
        now = time.time()
        async with self.db.transaction() as conn:
            await conn.execute("DELETE FROM oauth_consents WHERE expires_at < $1", now - 3600)
            await conn.execute(
                "INSERT INTO oauth_consents (request_hash, client_id, params, expires_at) VALUES ($1, $2, $3, $4)",
                hash_token(request_id),
                client_id,
                json.dumps(params, sort_keys=True),
                now + ttl_s,
            )

    async def consent(self, request_id: str) -> tuple[str, dict[str, Any]] | None:
        row = await self.db.fetchrow(
            "SELECT client_id, params FROM oauth_consents"
            " WHERE request_hash = $1 AND used_at IS NULL AND expires_at > $2",
            hash_token(request_id),
            time.time(),
        )
        return None if row is None else (row["client_id"], json.loads(row["params"]))

    async def approve(self, request_id: str, code: str, data: dict[str, Any], ttl_s: float) -> bool:
        """Consume the consent request and store its code, in one transaction; False if already used."""
        now = time.time()
        async with self.db.transaction() as conn:
            done = await conn.execute(
                "UPDATE oauth_consents SET used_at = $1 WHERE request_hash = $2 AND used_at IS NULL"
                " AND expires_at > $1",
                now,
                hash_token(request_id),
            )
            if rowcount(done) != 1:
                return False
            await conn.execute(
                "UPDATE oauth_clients SET consented_at = $1 WHERE client_id = $2 AND consented_at IS NULL",
                now,
                data["client_id"],
            )
            await conn.execute("DELETE FROM oauth_codes WHERE expires_at < $1", now - 3600)
            await conn.execute(
                "INSERT INTO oauth_codes (code_hash, client_id, data, expires_at) VALUES ($1, $2, $3, $4)",
                hash_token(code),
                data["client_id"],
                json.dumps(data, sort_keys=True),
                now + ttl_s,
            )
        return True

    async def discard_consent(self, request_id: str) -> bool:
        done = await self.db.execute(
            "UPDATE oauth_consents SET used_at = $1 WHERE request_hash = $2 AND used_at IS NULL",
            time.time(),
            hash_token(request_id),
        )
        return rowcount(done) == 1

    # --- codes ---------------------------------------------------------------------------
    async def code(self, code: str) -> tuple[dict[str, Any], float, float | None] | None:
        row = await self.db.fetchrow(
            "SELECT data, expires_at, used_at FROM oauth_codes WHERE code_hash = $1", hash_token(code)
        )
        return None if row is None else (json.loads(row["data"]), row["expires_at"], row["used_at"])

    async def consume_code(self, code: str, issue: Any) -> Any:
        """Mark ``code`` used and run ``issue(conn)`` in the same transaction; None if it was already used."""
        async with self.db.transaction() as conn:
            done = await conn.execute(
                "UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL",
                time.time(),
                hash_token(code),
            )
            if rowcount(done) != 1:
                return None
            return await issue(conn)

    # --- tokens issued (inside consume_code / consume_refresh) ------------------------------
    @staticmethod
    async def insert_access(conn: asyncpg.Connection, row: AccessRow, token: str) -> None:
        await conn.execute(
            "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at, expires_at, scopes)"
            " VALUES ($1, $2, 'oauth', $3, $4, $5, $6, $7)",
            row.id,
            row.client_id,
            row.principal,
            hash_token(token),
            time.time(),
            row.expires_at,
            to_stored(row.scopes),
        )

    @staticmethod
    async def insert_refresh(conn: asyncpg.Connection, token: str, row: RefreshRow) -> None:
        await conn.execute(
            "INSERT INTO oauth_refresh_tokens (token_hash, client_id, principal, scopes, resource, created_at,"
            " expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            hash_token(token),
            row.client_id,
            row.principal,
            " ".join(row.scopes),
            row.resource,
            time.time(),
            row.expires_at,
        )
        # a new grant (or a rotation of a live one): the principal may trade again (brokers/pg_suspensions.py)
        await conn.execute("DELETE FROM revoked_principals WHERE principal = $1", row.principal)

    # --- refresh tokens --------------------------------------------------------------------
    async def refresh(self, token: str) -> RefreshRow | None:
        row = await self.db.fetchrow(
            "SELECT * FROM oauth_refresh_tokens WHERE token_hash = $1 AND used_at IS NULL AND revoked_at IS NULL"
            " AND (expires_at IS NULL OR expires_at > $2)",
            hash_token(token),
            time.time(),
        )
        if row is None:
            return None
        return RefreshRow(row["client_id"], row["principal"], row["scopes"].split(), row["resource"], row["expires_at"])

    async def refresh_owner_if_used(self, token: str) -> str | None:
        value = await self.db.fetchval(
            "SELECT client_id FROM oauth_refresh_tokens WHERE token_hash = $1 AND used_at IS NOT NULL",
            hash_token(token),
        )
        return None if value is None else str(value)

    async def consume_refresh(self, token: str, issue: Any) -> Any:
        """Rotate: mark ``token`` used and run ``issue(conn)`` in the same transaction; None if no longer active."""
        async with self.db.transaction() as conn:
            done = await conn.execute(
                "UPDATE oauth_refresh_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL"
                " AND revoked_at IS NULL",
                time.time(),
                hash_token(token),
            )
            if rowcount(done) != 1:
                return None
            return await issue(conn)

    async def clients(self) -> list[dict[str, Any]]:
        return [client_entry(r) for r in await self.db.fetch(CLIENTS_SQL)]

    async def revoke_grant(self, client_id: str) -> Stopped:
        """Revoke every refresh and access token issued to ``client_id`` (every front refuses them next),
        and in the same transaction stop the grant's trading, schedules and alert actions
        (mcp_bridge/revocation.py)."""
        now = time.time()
        async with self.db.transaction() as conn:
            await conn.execute(
                "UPDATE oauth_refresh_tokens SET revoked_at = $1 WHERE client_id = $2 AND revoked_at IS NULL",
                now,
                client_id,
            )
            await conn.execute(
                "UPDATE access_tokens SET revoked_at = $1 WHERE kind = 'oauth' AND name = $2 AND revoked_at IS NULL",
                now,
                client_id,
            )
            return await stop_principals(conn, [grant_principal(client_id)], now)

    async def revoke_access(self, token: str) -> Stopped:
        """Revoke one access token; its principal is stopped only if no live credential is left."""
        now = time.time()
        async with self.db.transaction() as conn:
            rows = await conn.fetch(
                "UPDATE access_tokens SET revoked_at = $1 WHERE token_hash = $2 AND revoked_at IS NULL"
                " RETURNING principal",
                now,
                hash_token(token),
            )
            return await stop_principals(conn, [r["principal"] for r in rows], now)

    # --- passphrase --------------------------------------------------------------------------
    async def passphrase_hash(self) -> str | None:
        value = await self.db.fetchval("SELECT hash FROM oauth_passphrase WHERE id = 1")
        return None if value is None else str(value)

    async def set_passphrase_hash(
        self, value: str, *, also: Callable[[asyncpg.Connection], Awaitable[None]] | None = None
    ) -> None:
        """Store the passphrase's hash; ``also`` runs in the same transaction (the dashboard ends every
        sign-in there: dashboard/pg_sessions.py ``end_every_sign_in``)."""
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO oauth_passphrase (id, hash, set_at) VALUES (1, $1, $2)"
                " ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, set_at = excluded.set_at",
                value,
                time.time(),
            )
            if also is not None:
                await also(conn)
