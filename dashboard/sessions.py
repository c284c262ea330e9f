"""Dashboard sessions: the operator signed in with the passphrase, one row per browser.

The cookie carries a random secret; the table keeps only its SHA-256, a public id (shown on the
access page, used to revoke), the CSRF token the page sends with every state change, and the
times that bound it: an idle limit (no request for ``idle_s``) and an absolute one (``max_s``
after sign-in).  Revocation is immediate: every request looks the session up.  ``last_seen_at``
is written at most once a minute so browsing does not turn into a write per request.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from config.database import Database, Migrations

MIGRATIONS = Migrations(
    "dashboard",
    (
        (
            1,
            """
            CREATE TABLE dashboard_sessions (
                id TEXT PRIMARY KEY,
                secret_hash TEXT NOT NULL UNIQUE,
                csrf TEXT NOT NULL,
                created_at REAL NOT NULL,
                last_seen_at REAL NOT NULL,
                expires_at REAL NOT NULL,
                client TEXT NOT NULL,
                user_agent TEXT NOT NULL,
                revoked_at REAL
            )
            """,
        ),
    ),
)

IDLE_S = 12 * 3600.0
MAX_S = 7 * 86400.0
TOUCH_EVERY_S = 60.0


class Session(BaseModel):
    """A persisted session (never the secret)."""

    model_config = ConfigDict(frozen=True)

    id: str
    csrf: str
    created_at: float
    last_seen_at: float
    expires_at: float
    client: str
    user_agent: str
    revoked_at: float | None = None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SessionStore:
    """Create, verify, list and revoke dashboard sessions; each change in one transaction."""

    def __init__(
        self,
        db: Database,
        *,
        idle_s: float = IDLE_S,
        max_s: float = MAX_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.idle_s = idle_s
        self.max_s = max_s
        self._clock = clock
        self.listeners: list[Callable[[], None]] = []
        """Called after a session is created or revoked (open event streams re-check theirs)."""

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()

    async def create(self, client: str, user_agent: str) -> tuple[str, Session]:
        """A new session: (the cookie's secret — sent once, session)."""
        now = self._clock()
        secret = secrets.token_urlsafe(32)
        session = Session(
            id=secrets.token_hex(8),
            csrf=secrets.token_urlsafe(24),
            created_at=now,
            last_seen_at=now,
            expires_at=now + self.max_s,
            client=client[:100],
            user_agent=user_agent[:300],
        )
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO dashboard_sessions (id, secret_hash, csrf, created_at, last_seen_at, expires_at,"
                " client, user_agent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session.id, _hash(secret), session.csrf, now, now, session.expires_at, session.client,
                 session.user_agent),
            )  # fmt: skip
        self._changed()
        return secret, session

    async def verify(self, secret: str | None) -> Session | None:
        """The live session of a cookie's secret; None when unknown, revoked, idle too long or expired."""
        if not secret or len(secret) > 200:
            return None
        row = await self.db.fetchone("SELECT * FROM dashboard_sessions WHERE secret_hash = ?", (_hash(secret),))
        if row is None:
            return None
        session = Session.model_validate({k: row[k] for k in Session.model_fields})
        now = self._clock()
        if session.revoked_at is not None or now >= session.expires_at or now - session.last_seen_at > self.idle_s:
            return None
        if now - session.last_seen_at >= TOUCH_EVERY_S:
            await self.db.execute("UPDATE dashboard_sessions SET last_seen_at = ? WHERE id = ?", (now, session.id))
            session = session.model_copy(update={"last_seen_at": now})
        return session

    async def still_valid(self, session_id: str) -> bool:
        row = await self.db.fetchone(
            "SELECT revoked_at, expires_at, last_seen_at FROM dashboard_sessions WHERE id = ?", (session_id,)
        )
        now = self._clock()
        return (
            row is not None
            and row["revoked_at"] is None
            and now < row["expires_at"]
            and now - row["last_seen_at"] <= self.idle_s
        )

    async def active(self) -> list[Session]:
        now = self._clock()
        rows = await self.db.fetchall(
            "SELECT * FROM dashboard_sessions WHERE revoked_at IS NULL AND expires_at > ? AND last_seen_at > ?"
            " ORDER BY created_at",
            (now, now - self.idle_s),
        )
        return [Session.model_validate({k: r[k] for k in Session.model_fields}) for r in rows]

    async def revoke(self, session_id: str) -> bool:
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE dashboard_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (self._clock(), session_id),
            )
            done = cur.rowcount > 0
        if done:
            self._changed()
        return done
