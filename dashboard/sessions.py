"""Dashboard sign-in state: sessions (the operator signed in, one row per browser), the sign-in
generation and device-cookie key, and one-time sign-in links.

The cookie carries a random secret; the table keeps only its SHA-256, a public id (shown on the
access page, used to revoke), the CSRF token the page sends with every state change, and the
times that bound it: an idle limit (no request for ``idle_s``) and an absolute one (``max_s``
after sign-in).  Revocation is immediate: every request looks the session up.  ``last_seen_at``
is written at most once a minute so browsing does not turn into a write per request.

:class:`Sessions` is what callers use from a store: :class:`SessionStore` here (SQLite, the single
node) or :class:`dashboard.pg_sessions.PgSessionStore` (PostgreSQL, shared by the cluster's fronts).
The rules both follow (a new session, when one is live, when ``last_seen_at`` is written) are the
module-level helpers below, so the two stores differ only in their SQL.

The ``dashboard_auth`` row (:class:`SignInState`) holds the key that signs device cookies
(dashboard/device_cookies.py) — in the database, so every cluster front shares it — and the
sign-in *generation*.  ``chartgen passphrase set`` bumps the generation and revokes every session
in the transaction that stores the new passphrase (:func:`end_every_sign_in`): device cookies are
signed over the generation and each session records the one it was signed in under, checked on
every request, so a sign-in racing the change (checked against the old passphrase) is dead too.

A sign-in link (``chartgen dashboard link``) is a random token kept as its SHA-256, valid
:data:`LINK_S` and once: it is consumed by ``UPDATE … WHERE used_at IS NULL`` in the transaction
that creates its session.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeGuard

import aiosqlite
from pydantic import BaseModel, ConfigDict

from storage import Database, Migrations

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
                created_at REAL NOT NULL,
                expires_at REAL NOT NULL,
                generation INTEGER NOT NULL,
                used_at REAL
            )
            """,
        ),
    ),
)

IDLE_S = 12 * 3600.0
MAX_S = 7 * 86400.0
TOUCH_EVERY_S = 60.0
LINK_S = 300.0
"""How long a sign-in link (``chartgen dashboard link``) may be opened."""
FIRST_GENERATION = 1


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
    generation: int = FIRST_GENERATION
    """The sign-in generation it was signed in under (a later one ends it)."""


class SignInState(BaseModel):
    """The ``dashboard_auth`` row: the device-cookie signing key (hex) and the sign-in generation."""

    model_config = ConfigDict(frozen=True)

    device_key: str
    generation: int


class Sessions(Protocol):
    """What callers use from a session store (:class:`SessionStore`, ``PgSessionStore``)."""

    listeners: list[Callable[[], None]]
    """Called after a session is created or revoked (open event streams re-check theirs)."""
    max_s: float
    """The absolute limit of a session, in seconds after sign-in (the cookie's max-age)."""

    async def create(self, client: str, user_agent: str, generation: int | None = None) -> tuple[str, Session]:
        """A new session: (the cookie's secret — sent once, session).  ``generation``: the one read before
        the passphrase was checked (None: the current one)."""
        ...

    async def sign_in_state(self) -> SignInState:
        """The device-cookie key and the sign-in generation (the key created on first use)."""
        ...

    async def create_link(self, valid_s: float = LINK_S) -> str:
        """A new one-time sign-in link's token (kept only as its SHA-256), valid ``valid_s``."""
        ...

    async def redeem_link(self, token: str | None, client: str, user_agent: str) -> tuple[str, Session] | None:
        """Consume a sign-in link and create its session, in one transaction; None when the token is
        unknown, used, expired or from before a passphrase change."""
        ...

    async def verify(self, secret: str | None) -> Session | None:
        """The live session of a cookie's secret; None when unknown, revoked, idle too long or expired."""
        ...

    async def still_valid(self, session_id: str) -> bool:
        """Whether the session with this id is live (an open event stream asks at each keep-alive)."""
        ...

    async def active(self) -> list[Session]:
        """The live sessions, oldest first."""
        ...

    async def revoke(self, session_id: str) -> bool:
        """Revoke a session not yet revoked; whether one was (the listeners are called then)."""
        ...


def hash_secret(secret: str) -> str:
    """What the table keeps of a cookie's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def acceptable_secret(secret: str | None) -> TypeGuard[str]:
    """Whether a cookie's secret is worth looking up (present and not absurdly long)."""
    return secret is not None and 0 < len(secret) <= 200


def new_session(
    client: str, user_agent: str, now: float, max_s: float, generation: int = FIRST_GENERATION
) -> tuple[str, Session]:
    """A new session's secret (for the cookie only) and the session to insert, ``client`` and ``user_agent`` cut."""
    secret = secrets.token_urlsafe(32)
    session = Session(
        id=secrets.token_hex(8),
        csrf=secrets.token_urlsafe(24),
        created_at=now,
        last_seen_at=now,
        expires_at=now + max_s,
        client=client[:100],
        user_agent=user_agent[:300],
        generation=generation,
    )
    return secret, session


def new_device_key() -> str:
    """A new device-cookie signing key (256 random bits, hex)."""
    return secrets.token_hex(32)


class Row(Protocol):
    """A result row by column name: SQLite's (``aiosqlite.Row``) or PostgreSQL's (``asyncpg.Record``)."""

    def __getitem__(self, key: str, /) -> Any: ...


def session_of(row: Row) -> Session:
    """The session of a ``dashboard_sessions`` row (SQLite's or PostgreSQL's)."""
    return Session.model_validate({k: row[k] for k in Session.model_fields})


def is_live(row: Row, now: float, idle_s: float) -> bool:
    """Whether a row's session is live: not revoked, of the current sign-in generation (the row's
    ``current_generation``), before its absolute limit, and used within ``idle_s``."""
    return (
        row["revoked_at"] is None
        and row["generation"] == row["current_generation"]
        and now < row["expires_at"]
        and now - row["last_seen_at"] <= idle_s
    )


def touch_due(session: Session, now: float) -> bool:
    """Whether ``last_seen_at`` is to be written now (at most once per :data:`TOUCH_EVERY_S`)."""
    return now - session.last_seen_at >= TOUCH_EVERY_S


def notify(listeners: list[Callable[[], None]]) -> None:
    """Call every listener (a session was created or revoked)."""
    for listener in listeners:
        listener()


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

    async def create(self, client: str, user_agent: str, generation: int | None = None) -> tuple[str, Session]:
        """A new session: (the cookie's secret — sent once, session)."""
        now = self._clock()
        async with self.db.transaction() as tx:
            if generation is None:
                generation = await _generation(tx)
            secret, session = new_session(client, user_agent, now, self.max_s, generation)
            await _insert(tx, secret, session)
        notify(self.listeners)
        return secret, session

    async def sign_in_state(self) -> SignInState:
        row = await self.db.fetchone("SELECT device_key, generation FROM dashboard_auth WHERE id = 1")
        if row is None:
            async with self.db.transaction() as tx:
                await tx.execute(
                    "INSERT INTO dashboard_auth (id, device_key, generation) VALUES (1, ?, ?)"
                    " ON CONFLICT (id) DO NOTHING",
                    (new_device_key(), FIRST_GENERATION),
                )
            row = await self.db.fetchone("SELECT device_key, generation FROM dashboard_auth WHERE id = 1")
        assert row is not None
        return SignInState(device_key=row["device_key"], generation=row["generation"])

    async def create_link(self, valid_s: float = LINK_S) -> str:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        async with self.db.transaction(durable=True) as tx:
            await tx.execute("DELETE FROM dashboard_links WHERE expires_at < ?", (now - 86400,))
            await tx.execute(
                "INSERT INTO dashboard_links (token_hash, created_at, expires_at, generation) VALUES (?, ?, ?, ?)",
                (hash_secret(token), now, now + valid_s, await _generation(tx)),
            )
        return token

    async def redeem_link(self, token: str | None, client: str, user_agent: str) -> tuple[str, Session] | None:
        if not acceptable_secret(token):
            return None
        now = self._clock()
        async with self.db.transaction() as tx:
            generation = await _generation(tx)
            cur = await tx.execute(
                "UPDATE dashboard_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?"
                " AND generation = ?",
                (now, hash_secret(token), now, generation),
            )
            if cur.rowcount != 1:
                return None
            secret, session = new_session(client, user_agent, now, self.max_s, generation)
            await _insert(tx, secret, session)
        notify(self.listeners)
        return secret, session

    async def verify(self, secret: str | None) -> Session | None:
        """The live session of a cookie's secret; None when unknown, revoked, idle too long or expired."""
        if not acceptable_secret(secret):
            return None
        row = await self.db.fetchone(
            f"SELECT *, {CURRENT_GENERATION_SQL} AS current_generation FROM dashboard_sessions WHERE secret_hash = ?",
            (hash_secret(secret),),
        )
        if row is None:
            return None
        now = self._clock()
        if not is_live(row, now, self.idle_s):
            return None
        session = session_of(row)
        if touch_due(session, now):
            await self.db.execute("UPDATE dashboard_sessions SET last_seen_at = ? WHERE id = ?", (now, session.id))
            session = session.model_copy(update={"last_seen_at": now})
        return session

    async def still_valid(self, session_id: str) -> bool:
        row = await self.db.fetchone(
            "SELECT revoked_at, expires_at, last_seen_at, generation,"
            f" {CURRENT_GENERATION_SQL} AS current_generation"
            " FROM dashboard_sessions WHERE id = ?",
            (session_id,),
        )
        return row is not None and is_live(row, self._clock(), self.idle_s)

    async def active(self) -> list[Session]:
        now = self._clock()
        rows = await self.db.fetchall(
            "SELECT * FROM dashboard_sessions WHERE revoked_at IS NULL AND expires_at > ? AND last_seen_at > ?"
            f" AND generation = {CURRENT_GENERATION_SQL} ORDER BY created_at",
            (now, now - self.idle_s),
        )
        return [session_of(r) for r in rows]

    async def revoke(self, session_id: str) -> bool:
        async with self.db.transaction() as tx:
            cur = await tx.execute(
                "UPDATE dashboard_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (self._clock(), session_id),
            )
            done = cur.rowcount > 0
        if done:
            notify(self.listeners)
        return done


CURRENT_GENERATION_SQL = f"COALESCE((SELECT generation FROM dashboard_auth WHERE id = 1), {FIRST_GENERATION})"
"""The current sign-in generation, in SQL (SQLite's and PostgreSQL's alike)."""


async def _generation(tx: aiosqlite.Connection) -> int:
    cur = await tx.execute(f"SELECT {CURRENT_GENERATION_SQL}")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _insert(tx: aiosqlite.Connection, secret: str, session: Session) -> None:
    await tx.execute(
        "INSERT INTO dashboard_sessions (id, secret_hash, csrf, created_at, last_seen_at, expires_at,"
        " client, user_agent, generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session.id, hash_secret(secret), session.csrf, session.created_at, session.last_seen_at,
         session.expires_at, session.client, session.user_agent, session.generation),
    )  # fmt: skip


async def end_every_sign_in(tx: aiosqlite.Connection, now: float) -> None:
    """The passphrase changed (inside its transaction): a new sign-in generation — every device cookie
    and unused sign-in link is void — and every session revoked."""
    await tx.execute(
        "INSERT INTO dashboard_auth (id, device_key, generation) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET generation = dashboard_auth.generation + 1",
        (new_device_key(), FIRST_GENERATION + 1),
    )
    await tx.execute("UPDATE dashboard_sessions SET revoked_at = ? WHERE revoked_at IS NULL", (now,))
    await tx.execute("UPDATE dashboard_links SET used_at = ? WHERE used_at IS NULL", (now,))
