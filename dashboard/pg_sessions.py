"""Dashboard sessions on PostgreSQL, for the cluster's fronts: the operations of
:class:`dashboard.sessions.SessionStore` (SQLite) on a ``dashboard_sessions`` table every front reads.

It owns the cluster's dashboard sessions: one row per signed-in browser, the secret kept only as its
SHA-256, with the same idle and absolute limits and the same rules (the helpers of
:mod:`dashboard.sessions`).  What differs is where the table lives: PostgreSQL, shared by every
front, so a session signed in at one front is valid at every front.  Nothing is cached: every
request looks its session up (one indexed read), so a revocation at any front takes effect on the
next request at every front.  The listeners are called in this process only: an open event
stream on the revoking front ends at once; one on another front re-checks its session
(:meth:`PgSessionStore.still_valid`) at its next keep-alive and ends then.  ``last_seen_at`` is
written at most once per :data:`~dashboard.sessions.TOUCH_EVERY_S`, and never moved back (fronts'
clocks differ a little).  The sign-in state (device-cookie key, generation) and the one-time
sign-in links are PostgreSQL's too, so a device cookie or a link issued at one front holds at every
front, and ``chartgen passphrase set --cluster`` ends every sign-in at every front
(:func:`end_every_sign_in`, in the passphrase's transaction).  PostgreSQL away: every operation raises
:class:`~storage.postgres.StorageUnavailable` (a session it cannot check is neither accepted nor
reported as signed out; nothing is recorded).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import asyncpg

from dashboard.sessions import (
    CURRENT_GENERATION_SQL,
    FIRST_GENERATION,
    IDLE_S,
    LINK_S,
    MAX_S,
    Session,
    SignInState,
    acceptable_secret,
    hash_secret,
    is_live,
    new_device_key,
    new_session,
    notify,
    session_of,
    touch_due,
)
from storage import Migrations, PostgresDatabase, rowcount, unreachable_as

PG_SESSION_MIGRATIONS = Migrations(
    "dashboard",
    (
        (
            1,
            """
            CREATE TABLE dashboard_sessions (
                id TEXT PRIMARY KEY,
                secret_hash TEXT NOT NULL UNIQUE,
                csrf TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                last_seen_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                client TEXT NOT NULL,
                user_agent TEXT NOT NULL,
                revoked_at DOUBLE PRECISION
            )
            """,
        ),
        (
            2,
            """
            CREATE TABLE dashboard_auth (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                device_key TEXT NOT NULL,
                generation INTEGER NOT NULL
            );
            ALTER TABLE dashboard_sessions ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
            CREATE TABLE dashboard_links (
                token_hash TEXT PRIMARY KEY,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                generation INTEGER NOT NULL,
                used_at DOUBLE PRECISION
            )
            """,
        ),
    ),
)
"""The shape of SQLite's ``dashboard_sessions`` (dashboard.sessions.MIGRATIONS), times as DOUBLE PRECISION."""


class PgSessionStore:
    """Create, verify, list and revoke dashboard sessions in the cluster's PostgreSQL (a ``Sessions``)."""

    def __init__(
        self,
        db: PostgresDatabase,
        *,
        idle_s: float = IDLE_S,
        max_s: float = MAX_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.idle_s = idle_s
        self.max_s = max_s
        self._clock = clock
        self._where = db.where
        self.listeners: list[Callable[[], None]] = []
        """Called after a session is created or revoked through this store (this front's event streams)."""

    async def create(self, client: str, user_agent: str, generation: int | None = None) -> tuple[str, Session]:
        """A new session: (the cookie's secret — sent once, session)."""
        with unreachable_as("session not created", self._where):
            async with self.db.transaction() as conn:
                if generation is None:
                    generation = int(await conn.fetchval(f"SELECT {CURRENT_GENERATION_SQL}"))
                secret, session = new_session(client, user_agent, self._clock(), self.max_s, generation)
                await _insert(conn, secret, session)
        notify(self.listeners)
        return secret, session

    async def sign_in_state(self) -> SignInState:
        with unreachable_as("sign-in state not read", self._where):
            row = await self.db.fetchrow("SELECT device_key, generation FROM dashboard_auth WHERE id = 1")
            if row is None:  # the first front to need it creates it; the others read the winner's
                await self.db.execute(
                    "INSERT INTO dashboard_auth (id, device_key, generation) VALUES (1, $1, $2)"
                    " ON CONFLICT (id) DO NOTHING",
                    new_device_key(),
                    FIRST_GENERATION,
                )
                row = await self.db.fetchrow("SELECT device_key, generation FROM dashboard_auth WHERE id = 1")
        assert row is not None
        return SignInState(device_key=row["device_key"], generation=row["generation"])

    async def create_link(self, valid_s: float = LINK_S) -> str:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with unreachable_as("sign-in link not created", self._where):
            async with self.db.transaction() as conn:
                await conn.execute("DELETE FROM dashboard_links WHERE expires_at < $1", now - 86400)
                await conn.execute(
                    "INSERT INTO dashboard_links (token_hash, created_at, expires_at, generation)"
                    f" VALUES ($1, $2, $3, {CURRENT_GENERATION_SQL})",
                    hash_secret(token),
                    now,
                    now + valid_s,
                )
        return token

    async def redeem_link(self, token: str | None, client: str, user_agent: str) -> tuple[str, Session] | None:
        if not acceptable_secret(token):
            return None
        now = self._clock()
        with unreachable_as("sign-in link not used", self._where):
            async with self.db.transaction() as conn:
                # FOR SHARE: a passphrase change (which updates the row) waits for this sign-in, or this for it
                generation = await conn.fetchval("SELECT generation FROM dashboard_auth WHERE id = 1 FOR SHARE")
                generation = FIRST_GENERATION if generation is None else int(generation)
                tag = await conn.execute(
                    "UPDATE dashboard_links SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL"
                    " AND expires_at > $1 AND generation = $3",
                    now,
                    hash_secret(token),
                    generation,
                )
                if rowcount(tag) != 1:
                    return None
                secret, session = new_session(client, user_agent, now, self.max_s, generation)
                await _insert(conn, secret, session)
        notify(self.listeners)
        return secret, session

    async def verify(self, secret: str | None) -> Session | None:
        """The live session of a cookie's secret; None when unknown, revoked, idle too long or expired."""
        if not acceptable_secret(secret):
            return None
        with unreachable_as("session not checked", self._where):
            row = await self.db.fetchrow(
                f"SELECT *, {CURRENT_GENERATION_SQL} AS current_generation"
                " FROM dashboard_sessions WHERE secret_hash = $1",
                hash_secret(secret),
            )
            if row is None:
                return None
            now = self._clock()
            if not is_live(row, now, self.idle_s):
                return None
            session = session_of(row)
            if touch_due(session, now):
                await self.db.execute(
                    "UPDATE dashboard_sessions SET last_seen_at = $1 WHERE id = $2 AND last_seen_at < $1",
                    now,
                    session.id,
                )
                session = session.model_copy(update={"last_seen_at": now})
        return session

    async def still_valid(self, session_id: str) -> bool:
        with unreachable_as("session not checked", self._where):
            row = await self.db.fetchrow(
                "SELECT revoked_at, expires_at, last_seen_at, generation,"
                f" {CURRENT_GENERATION_SQL} AS current_generation"
                " FROM dashboard_sessions WHERE id = $1",
                session_id,
            )
        return row is not None and is_live(row, self._clock(), self.idle_s)

    async def active(self) -> list[Session]:
        now = self._clock()
        with unreachable_as("sessions not listed", self._where):
            rows = await self.db.fetch(
                "SELECT * FROM dashboard_sessions WHERE revoked_at IS NULL AND expires_at > $1 AND last_seen_at > $2"
                f" AND generation = {CURRENT_GENERATION_SQL} ORDER BY created_at",
                now,
                now - self.idle_s,
            )
        return [session_of(r) for r in rows]

    async def revoke(self, session_id: str) -> bool:
        with unreachable_as("session not revoked", self._where):
            tag = await self.db.execute(
                "UPDATE dashboard_sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                self._clock(),
                session_id,
            )
        done = rowcount(tag) > 0
        if done:
            notify(self.listeners)
        return done


async def _insert(conn: asyncpg.Connection, secret: str, session: Session) -> None:
    await conn.execute(
        "INSERT INTO dashboard_sessions (id, secret_hash, csrf, created_at, last_seen_at, expires_at,"
        " client, user_agent, generation) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        session.id,
        hash_secret(secret),
        session.csrf,
        session.created_at,
        session.last_seen_at,
        session.expires_at,
        session.client,
        session.user_agent,
        session.generation,
    )


async def end_every_sign_in(conn: asyncpg.Connection, now: float) -> None:
    """The passphrase changed (inside its transaction, at any front or ``chartgen passphrase set
    --cluster``): a new sign-in generation — every device cookie and unused link void at every front —
    and every session revoked."""
    await conn.execute(
        "INSERT INTO dashboard_auth (id, device_key, generation) VALUES (1, $1, $2)"
        " ON CONFLICT (id) DO UPDATE SET generation = dashboard_auth.generation + 1",
        new_device_key(),
        FIRST_GENERATION + 1,
    )
    await conn.execute("UPDATE dashboard_sessions SET revoked_at = $1 WHERE revoked_at IS NULL", now)
    await conn.execute("UPDATE dashboard_links SET used_at = $1 WHERE used_at IS NULL", now)
