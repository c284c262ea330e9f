"""Leader leases in PostgreSQL with fencing tokens: exactly one holder of a named role at a time.

The cluster gives order sending and reconciliation of an exchange account to one process at a
time (design.md §11): the holder of the lease ``orders/<account>``.  A lease is a row of
``cluster_leases``: its holder, its fencing token and its expiry on the *server's* clock (the
processes' clocks are never compared with each other).

- :meth:`Leases.acquire` takes a free or expired lease and increments its token; a live lease
  held by someone else is refused.  The same holder acquiring its live lease again keeps the
  token.  A holder id names one process incarnation (cluster/membership.py's member id has a
  random part), never a host or a configured name: a restarted process is a new holder, so its
  paused former self can never pass for it.
- :meth:`Lease.renew` extends the expiry only while the row still names this holder *and this
  token* and has not expired; otherwise the lease is lost for good (a new acquire is needed and
  gets a new token).
- Fencing has two halves, because the exchange knows nothing of our tokens.  In the database,
  :meth:`Lease.fence` locks the lease row (``FOR SHARE``) inside the caller's transaction and
  fails unless it still names this holder and token and is unexpired, so a write such as an
  order intent commits only under a live lease, and a new holder's acquire waits for it.  Before
  the irreversible step (the HTTP request to the exchange), :meth:`Lease.may_act` checks a
  *local* deadline: the monotonic time the last successful acquire/renew was *sent* plus the TTL
  minus a margin.  The server's expiry is at least that late, so a process paused (GC, SIGSTOP,
  a slow disk) past its lease finds the deadline passed when it resumes and does not send.  The
  new holder must therefore treat an intent it inherits as possibly sent — reconcile it by
  client order id, never send it again.

Why not a PostgreSQL advisory lock: a session lock is tied to one connection and vanishes
silently with it, the holder cannot learn in advance when it will lose it, and it carries no
token to fence with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import asyncpg

from storage import Migrations, PostgresDatabase

LEASE_MIGRATIONS = Migrations(
    "cluster_leases",
    (
        (
            1,
            """
            CREATE TABLE cluster_leases (
                name TEXT PRIMARY KEY,
                holder TEXT NOT NULL,
                token BIGINT NOT NULL,
                acquired_at TIMESTAMPTZ NOT NULL,
                expires_at TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
)

SAFETY_MARGIN = 0.2
"""The share of the TTL a holder gives up locally (clock-rate differences, the request in flight)."""


class LeaseLost(RuntimeError):
    """The lease is no longer this holder's: it expired or another holder took it."""


@dataclass
class Lease:
    """A held lease: its name, holder and fencing token, and the local deadline for acting."""

    db: PostgresDatabase
    name: str
    holder: str
    token: int
    ttl_s: float
    deadline: float
    """``time.monotonic()`` after which this holder must not act (renew moves it)."""
    lost: bool = field(default=False)

    def may_act(self) -> bool:
        """True while the local deadline has not passed and the lease was not found lost."""
        return not self.lost and time.monotonic() < self.deadline

    async def renew(self) -> None:
        """Extend the lease by its TTL; :class:`LeaseLost` if it is no longer ours."""
        sent = time.monotonic()
        row = await self.db.fetchrow(
            "UPDATE cluster_leases SET expires_at = clock_timestamp() + make_interval(secs => $4)"
            " WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp() RETURNING token",
            self.name,
            self.holder,
            self.token,
            self.ttl_s,
        )
        if row is None:
            self.lost = True
            raise LeaseLost(f"lease {self.name} (token {self.token}) is no longer held by {self.holder}")
        self.deadline = sent + self.ttl_s * (1 - SAFETY_MARGIN)

    async def fence(self, conn: asyncpg.Connection) -> None:
        """Inside the caller's transaction: lock the lease row and fail unless it is still ours."""
        ok = await conn.fetchval(
            "SELECT 1 FROM cluster_leases WHERE name = $1 AND holder = $2 AND token = $3"
            " AND expires_at > clock_timestamp() FOR SHARE",
            self.name,
            self.holder,
            self.token,
        )
        if ok is None:
            self.lost = True
            raise LeaseLost(f"lease {self.name} (token {self.token}) is no longer held by {self.holder}")

    async def release(self) -> None:
        """Give the lease up now (a clean shutdown): the next holder need not wait for the TTL."""
        self.lost = True
        await self.db.execute(
            "UPDATE cluster_leases SET expires_at = clock_timestamp() WHERE name = $1 AND holder = $2 AND token = $3",
            self.name,
            self.holder,
            self.token,
        )


@dataclass(frozen=True)
class LeaseState:
    name: str
    holder: str
    token: int
    expires_in_s: float
    """Seconds until it expires on the server's clock (negative: expired)."""


class Leases:
    """Acquire and inspect leases of one database."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def acquire(self, name: str, holder: str, ttl_s: float, *, lock_wait_s: float = 1.0) -> Lease | None:
        """The lease if it was free, expired or already ours; None while someone else holds it.

        A holder's fenced transaction in progress keeps the row locked; a candidate waits at most
        ``lock_wait_s`` for it (then None: try again later) — a paused holder's transaction is
        ended by the server's ``idle_in_transaction_session_timeout`` (storage/postgres.py)."""
        if ttl_s <= 0:
            raise ValueError(f"lease ttl_s must be positive, got {ttl_s}")
        sent = time.monotonic()
        try:
            async with self.db.transaction() as conn:
                await conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_wait_s * 1000))}")
                token = await self._take(conn, name, holder, ttl_s)
        except asyncpg.LockNotAvailableError:
            return None
        if token is None:
            return None
        return Lease(self.db, name, holder, int(token), ttl_s, sent + ttl_s * (1 - SAFETY_MARGIN))

    @staticmethod
    async def _take(conn: asyncpg.Connection, name: str, holder: str, ttl_s: float) -> int | None:
        token: int | None = await conn.fetchval(
            "INSERT INTO cluster_leases AS l (name, holder, token, acquired_at, expires_at)"
            " VALUES ($1, $2, 1, clock_timestamp(), clock_timestamp() + make_interval(secs => $3))"
            " ON CONFLICT (name) DO UPDATE SET"
            "  token = CASE WHEN l.holder = excluded.holder AND l.expires_at > clock_timestamp()"
            "          THEN l.token ELSE l.token + 1 END,"
            "  acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > clock_timestamp()"
            "          THEN l.acquired_at ELSE excluded.acquired_at END,"
            "  holder = excluded.holder, expires_at = excluded.expires_at"
            " WHERE l.expires_at <= clock_timestamp() OR l.holder = excluded.holder"
            " RETURNING token",
            name,
            holder,
            ttl_s,
        )
        return token

    async def state(self, name: str) -> LeaseState | None:
        row = await self.db.fetchrow(
            "SELECT name, holder, token, EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS left_s"
            " FROM cluster_leases WHERE name = $1",
            name,
        )
        return None if row is None else LeaseState(row["name"], row["holder"], int(row["token"]), float(row["left_s"]))

    async def all(self) -> list[LeaseState]:
        rows = await self.db.fetch(
            "SELECT name, holder, token, EXTRACT(EPOCH FROM expires_at - clock_timestamp()) AS left_s"
            " FROM cluster_leases ORDER BY name"
        )
        return [LeaseState(r["name"], r["holder"], int(r["token"]), float(r["left_s"])) for r in rows]
