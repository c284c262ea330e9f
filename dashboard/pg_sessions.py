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
clocks differ a little).  PostgreSQL away: every operation raises
:class:`~config.postgres.StorageUnavailable` (a session it cannot check is neither accepted nor
reported as signed out; nothing is recorded).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from config.migrations import Migrations
from config.postgres import PostgresDatabase, rowcount, unreachable_as
from dashboard.sessions import (
    IDLE_S,
    MAX_S,
    Session,
    acceptable_secret,
    hash_secret,
    is_live,
    new_session,
    notify,
    session_of,
    touch_due,
)

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

    async def create(self, client: str, user_agent: str) -> tuple[str, Session]:
        """A new session: (the cookie's secret — sent once, session)."""
        secret, session = new_session(client, user_agent, self._clock(), self.max_s)
        with unreachable_as("session not created", self._where):
            await self.db.execute(
                "INSERT INTO dashboard_sessions (id, secret_hash, csrf, created_at, last_seen_at, expires_at,"
                " client, user_agent) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                session.id,
                hash_secret(secret),
                session.csrf,
                session.created_at,
                session.last_seen_at,
                session.expires_at,
                session.client,
                session.user_agent,
            )
        notify(self.listeners)
        return secret, session

    async def verify(self, secret: str | None) -> Session | None:
        """The live session of a cookie's secret; None when unknown, revoked, idle too long or expired."""
        if not acceptable_secret(secret):
            return None
        with unreachable_as("session not checked", self._where):
            row = await self.db.fetchrow("SELECT * FROM dashboard_sessions WHERE secret_hash = $1", hash_secret(secret))
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
                "SELECT revoked_at, expires_at, last_seen_at FROM dashboard_sessions WHERE id = $1", session_id
            )
        return row is not None and is_live(row, self._clock(), self.idle_s)

    async def active(self) -> list[Session]:
        now = self._clock()
        with unreachable_as("sessions not listed", self._where):
            rows = await self.db.fetch(
                "SELECT * FROM dashboard_sessions WHERE revoked_at IS NULL AND expires_at > $1 AND last_seen_at > $2"
                " ORDER BY created_at",
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
