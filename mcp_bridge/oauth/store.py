"""What the OAuth server persists: clients, pending consents, codes, refresh tokens, the passphrase hash.

Everything secret is stored as a SHA-256 of 256 random bits (client secrets, consent
request ids, codes, refresh tokens) or as a scrypt hash (the operator passphrase); access
tokens live in the shared ``access_tokens`` table (:mod:`mcp_bridge.tokens`).  Single use
is enforced in SQL: a code or a refresh token is consumed by an ``UPDATE … WHERE
used_at IS NULL`` inside the transaction that issues the new tokens, so two concurrent
exchanges can never both succeed.

A client row records when a consent for it was first approved (``consented_at``); rows that
never got one are *pending*: they expire, and a registration evicts the oldest pending ones
when there are too many (:meth:`OAuthStore.save_client`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiosqlite

from mcp_bridge.revocation import Stopped, stop_principals_in
from mcp_bridge.scopes import to_stored
from mcp_bridge.token_cache import signal_revocation
from mcp_bridge.tokens import hash_token
from storage import Database, Migrations

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
        (
            2,
            """
            ALTER TABLE oauth_clients ADD COLUMN consented_at REAL;
            UPDATE oauth_clients SET consented_at = created_at WHERE client_id IN (
                SELECT client_id FROM oauth_codes
                UNION SELECT client_id FROM oauth_refresh_tokens
                UNION SELECT name FROM access_tokens WHERE kind = 'oauth'
            );
            CREATE INDEX oauth_clients_pending ON oauth_clients (created_at) WHERE consented_at IS NULL;
            UPDATE oauth_refresh_tokens SET scopes = 'charts alerts trade' WHERE scopes = 'mcp'
            """,
        ),
    ),
)


async def _delete_pending(tx: Any, where: str, params: tuple[Any, ...]) -> None:
    """Delete the pending (never-consented) clients matching ``where``, with their parked consents."""
    selected = f"SELECT client_id FROM oauth_clients WHERE consented_at IS NULL AND {where}"
    await tx.execute(f"DELETE FROM oauth_consents WHERE client_id IN ({selected})", params)
    await tx.execute(f"DELETE FROM oauth_clients WHERE client_id IN ({selected})", params)


CLIENTS_SQL = (
    "SELECT c.client_id, c.info, c.created_at, c.consented_at,"
    " (SELECT COUNT(*) FROM oauth_refresh_tokens r WHERE r.client_id = c.client_id"
    "  AND r.revoked_at IS NULL) AS grants"
    " FROM oauth_clients c WHERE c.consented_at IS NOT NULL ORDER BY c.created_at"
)
"""Every consented client with its count of live grants (both stores)."""


def client_entry(r: Any) -> dict[str, Any]:
    """A :data:`CLIENTS_SQL` row as the dashboard lists it."""
    return {
        "client_id": r["client_id"],
        "client_name": (json.loads(r["info"]) if r["info"] else {}).get("client_name"),
        "created_at": r["created_at"],
        "consented_at": r["consented_at"],
        "grants": int(r["grants"]),
    }


def grant_principal(client_id: str) -> str:
    """The principal every token of ``client_id``'s grant acts for (alerts survive a refresh)."""
    return f"oauth:{client_id}"


@dataclass(frozen=True, slots=True)
class AccessRow:
    """An OAuth access token to store (its hash goes in ``access_tokens``, kind ``oauth``)."""

    id: str
    client_id: str
    principal: str
    expires_at: float
    scopes: list[str]


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
    async def save_client(
        self,
        client_id: str,
        info: dict[str, Any],
        secret_hash: str | None,
        *,
        pending_ttl_s: float = 3600.0,
        max_pending: int = 1000,
    ) -> int:
        """Store a new (pending) client; returns how many pending clients were evicted to make room.

        In the same transaction, pending clients older than ``pending_ttl_s`` are deleted, and
        if ``max_pending`` are still left the oldest go, so a registration is never refused
        for lack of room and junk can only ever push out other junk (or an abandoned attempt).
        """
        now = time.time()
        async with self.db.transaction() as tx:
            await _delete_pending(tx, "created_at < ?", (now - pending_ttl_s,))
            async with tx.execute("SELECT COUNT(*) FROM oauth_clients WHERE consented_at IS NULL") as cur:
                row = await cur.fetchone()
            excess = (int(row[0]) if row is not None else 0) - max_pending + 1
            if excess > 0:
                await _delete_pending(
                    tx,
                    "client_id IN (SELECT client_id FROM oauth_clients WHERE consented_at IS NULL"
                    " ORDER BY created_at, rowid LIMIT ?)",
                    (excess,),
                )
            await tx.execute(
                "INSERT INTO oauth_clients (client_id, info, secret_hash, created_at) VALUES (?, ?, ?, ?)",
                (client_id, json.dumps(info, sort_keys=True), secret_hash, now),
            )
        return max(0, excess)

    async def client(self, client_id: str, pending_ttl_s: float = 3600.0) -> tuple[dict[str, Any], str | None] | None:
        """(info, secret hash) of a client that consented once, or is pending and not yet expired."""
        row = await self.db.fetchone(
            "SELECT info, secret_hash FROM oauth_clients WHERE client_id = ?"
            " AND (consented_at IS NOT NULL OR created_at >= ?)",
            (client_id, time.time() - pending_ttl_s),
        )
        return None if row is None else (json.loads(row["info"]), row["secret_hash"])

    async def client_counts(self) -> tuple[int, int]:
        """(clients that consented once, pending clients)."""
        row = await self.db.fetchone(
            "SELECT COUNT(consented_at) AS done, COUNT(*) - COUNT(consented_at) AS pending FROM oauth_clients", ()
        )
        return (int(row["done"]), int(row["pending"])) if row is not None else (0, 0)

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
            await tx.execute(
                "UPDATE oauth_clients SET consented_at = ? WHERE client_id = ? AND consented_at IS NULL",
                (now, data["client_id"]),
            )
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
        async with self.db.transaction(durable=True) as tx:
            cur = await tx.execute(
                "UPDATE oauth_codes SET used_at = ? WHERE code_hash = ? AND used_at IS NULL",
                (time.time(), hash_token(code)),
            )
            if cur.rowcount != 1:
                return None
            return await issue(tx)

    # --- tokens issued (inside consume_code / consume_refresh) ------------------------------
    @staticmethod
    async def insert_access(tx: Any, row: AccessRow, token: str) -> None:
        await tx.execute(
            "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at, expires_at, scopes)"
            " VALUES (?, ?, 'oauth', ?, ?, ?, ?, ?)",
            (
                row.id,
                row.client_id,
                row.principal,
                hash_token(token),
                time.time(),
                row.expires_at,
                to_stored(row.scopes),
            ),
        )

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
        # a new grant (or a rotation of a live one): the principal may trade again (brokers/suspensions.py)
        await tx.execute("DELETE FROM revoked_principals WHERE principal = ?", (row.principal,))

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
        async with self.db.transaction(durable=True) as tx:
            cur = await tx.execute(
                "UPDATE oauth_refresh_tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL"
                " AND revoked_at IS NULL",
                (time.time(), hash_token(token)),
            )
            if cur.rowcount != 1:
                return None
            return await issue(tx)

    async def clients(self) -> list[dict[str, Any]]:
        """Every consented client: id, name, registration and consent time, live access/refresh tokens."""
        rows = await self.db.fetchall(CLIENTS_SQL)
        return [client_entry(r) for r in rows]

    async def revoke_grant(self, client_id: str) -> Stopped:
        """Revoke every refresh and access token issued to ``client_id``, and in the same transaction
        stop the grant's trading, schedules and alert actions (mcp_bridge/revocation.py)."""
        now = time.time()

        def step(conn: sqlite3.Connection) -> Stopped:
            conn.execute(
                "UPDATE oauth_refresh_tokens SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL",
                (now, client_id),
            )
            conn.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE kind = 'oauth' AND name = ? AND revoked_at IS NULL",
                (now, client_id),
            )
            return stop_principals_in(conn, [grant_principal(client_id)], now)

        stopped = await self.db.run_transaction(step, durable=True)
        signal_revocation(self.db.path)
        return stopped

    async def revoke_access(self, token: str) -> Stopped:
        """Revoke one access token (RFC 7009); its principal is stopped only if no live credential is left."""
        now = time.time()

        def step(conn: sqlite3.Connection) -> Stopped:
            rows = conn.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE token_hash = ? AND revoked_at IS NULL"
                " RETURNING principal",
                (now, hash_token(token)),
            ).fetchall()
            return stop_principals_in(conn, [r[0] for r in rows], now)

        stopped = await self.db.run_transaction(step, durable=True)
        signal_revocation(self.db.path)
        return stopped

    # --- passphrase --------------------------------------------------------------------------
    async def passphrase_hash(self) -> str | None:
        row = await self.db.fetchone("SELECT hash FROM oauth_passphrase WHERE id = 1", ())
        return None if row is None else str(row["hash"])

    async def set_passphrase_hash(
        self, value: str, *, also: Callable[[aiosqlite.Connection], Awaitable[None]] | None = None
    ) -> None:
        """Store the passphrase's hash; ``also`` runs in the same transaction (the dashboard ends every
        sign-in there: dashboard/sessions.py ``end_every_sign_in``)."""
        async with self.db.transaction(durable=True) as tx:
            await tx.execute(
                "INSERT INTO oauth_passphrase (id, hash, set_at) VALUES (1, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, set_at = excluded.set_at",
                (value, time.time()),
            )
            if also is not None:
                await also(tx)
