"""Cluster membership by heartbeats in PostgreSQL, and markets assigned to live workers by
rendezvous (highest-random-weight) hashing.

Every process of the cluster has a member id naming its incarnation (:func:`new_member_id`:
host, pid and a random part) and heartbeats its row of ``cluster_members`` every few seconds;
a member whose last heartbeat is older than the liveness window (on the server's clock) is
dead to the others, and its markets move.

Rendezvous hashing (:func:`owner_of`): a market belongs to the live worker with the highest
``blake2b(member id, market)``.  Every process computes the same assignment from the same member
list with no coordination, and when a worker joins or leaves only the markets that it gains or
held move — each other market keeps its worker (tests/cluster/test_membership.py checks both
with hypothesis).  blake2b rather than ``hash()``: Python salts ``hash`` per process.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from storage import Migrations, PostgresDatabase, rowcount

MEMBER_MIGRATIONS = Migrations(
    "cluster_members",
    (
        (
            1,
            """
            CREATE TABLE cluster_members (
                id TEXT PRIMARY KEY,
                role TEXT NOT NULL CHECK (role IN ('worker', 'front')),
                address TEXT NOT NULL DEFAULT '',
                started_at TIMESTAMPTZ NOT NULL,
                last_seen TIMESTAMPTZ NOT NULL
            );
            CREATE INDEX cluster_members_seen ON cluster_members (role, last_seen)
            """,
        ),
        (
            2,
            """
            ALTER TABLE cluster_members DROP CONSTRAINT cluster_members_role_check;
            ALTER TABLE cluster_members ADD CONSTRAINT cluster_members_role_check
                CHECK (role IN ('worker', 'front', 'leader'))
            """,
        ),
        (3, "ALTER TABLE cluster_members ADD COLUMN bus TEXT"),
    ),
)

ROLES = ("worker", "front", "leader")


def new_member_id(role: str) -> str:
    """``role@host/pid/random``: unique to this process incarnation."""
    return f"{role}@{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def _weight(member: str, market: str) -> int:
    digest = hashlib.blake2b(f"{member}\x00{market}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(market: str, members: Sequence[str]) -> str:
    """The member a market belongs to (ValueError when there is none)."""
    if not members:
        raise ValueError(f"no live worker to own {market}")
    return max(members, key=lambda m: (_weight(m, market), m))


def assign(markets: Iterable[str], members: Sequence[str]) -> dict[str, list[str]]:
    """member → its markets (every member listed, possibly with none), markets in input order."""
    out: dict[str, list[str]] = {m: [] for m in members}
    for market in markets:
        out[owner_of(market, members)].append(market)
    return out


@dataclass(frozen=True)
class Member:
    id: str
    role: str
    address: str
    seen_s_ago: float
    """Seconds since its last heartbeat, on the server's clock."""
    bus: str | None = None
    """The member's ``bus`` setting ("local" or "nats"; None for an order leader, which uses none)."""


class Membership:
    """Heartbeats and the live members of one database."""

    def __init__(self, db: PostgresDatabase, liveness_s: float = 6.0) -> None:
        if liveness_s <= 0:
            raise ValueError(f"liveness_s must be positive, got {liveness_s}")
        self.db = db
        self.liveness_s = liveness_s

    async def heartbeat(self, member_id: str, role: str, address: str = "", bus: str | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        await self.db.execute(
            "INSERT INTO cluster_members (id, role, address, started_at, last_seen, bus)"
            " VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp(), $4)"
            " ON CONFLICT (id) DO UPDATE SET last_seen = clock_timestamp(), address = excluded.address,"
            " bus = excluded.bus",
            member_id,
            role,
            address,
            bus,
        )

    async def leave(self, member_id: str) -> None:
        """A clean shutdown: gone for the others at once, not after the liveness window."""
        await self.db.execute("DELETE FROM cluster_members WHERE id = $1", member_id)

    async def members(self, role: str | None = None) -> list[Member]:
        """Every member row (live or not), oldest heartbeat last."""
        rows = await self.db.fetch(
            "SELECT id, role, address, bus, EXTRACT(EPOCH FROM clock_timestamp() - last_seen) AS ago"
            " FROM cluster_members WHERE $1::text IS NULL OR role = $1 ORDER BY id",
            role,
        )
        return [Member(r["id"], r["role"], r["address"], float(r["ago"]), r["bus"]) for r in rows]

    async def bus_mismatch(self, bus: str) -> str | None:
        """Why the live members do not agree with ``bus`` (the live workers and fronts whose ``bus``
        differs), or None.  Workers announce fired notifications on their bus and fronts listen on
        theirs: a front on another bus than a worker hears that worker's firings only from its
        relay's periodic sweep."""
        other = sorted(
            f"{m.role} {m.id} ({m.bus})"
            for m in await self.members()
            if m.seen_s_ago <= self.liveness_s and m.bus is not None and m.bus != bus
        )
        if not other:
            return None
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        return f'bus mismatch: this member has bus = "{bus}" but {shown}; set the same bus on every worker and front'

    async def live(self, role: str) -> list[str]:
        """Ids of the members of ``role`` heard from within the liveness window, sorted."""
        rows = await self.db.fetch(
            "SELECT id FROM cluster_members WHERE role = $1"
            " AND last_seen > clock_timestamp() - make_interval(secs => $2) ORDER BY id",
            role,
            self.liveness_s,
        )
        return [r["id"] for r in rows]

    async def forget_dead(self, older_than_s: float) -> int:
        """Remove rows silent for ``older_than_s`` (housekeeping; liveness does not depend on it)."""
        return rowcount(
            await self.db.execute(
                "DELETE FROM cluster_members WHERE last_seen < clock_timestamp() - make_interval(secs => $1)",
                older_than_s,
            )
        )


@dataclass(frozen=True)
class AssignmentChange:
    """What one refresh changed for this worker: markets to start and to stop following."""

    follow: list[str]
    unfollow: list[str]
    workers: list[str]
    """The live workers the assignment was computed over (this one included)."""


class MarketAssignment:
    """One worker's share of the cluster's markets, kept current from the heartbeats.

    Each :meth:`refresh` heartbeats, reads the live workers and keeps the markets whose
    rendezvous owner is this worker.  A worker that died is dropped by the others once its
    heartbeat is older than the liveness window; until then its markets are followed by nobody
    (the hand-over gap the new owner closes by backfilling from REST before it evaluates alerts).
    Two workers may briefly both follow a market (a joining worker before the old owner
    refreshes): harmless to alerts, whose firing is exactly-once in the store."""

    def __init__(self, membership: Membership, member_id: str, address: str = "", bus: str | None = None) -> None:
        self.membership = membership
        self.member_id = member_id
        self.address = address
        self.bus = bus
        self.owned: frozenset[str] = frozenset()

    async def refresh(self, markets: Iterable[str]) -> AssignmentChange:
        await self.membership.heartbeat(self.member_id, "worker", self.address, self.bus)
        live = await self.membership.live("worker")
        if self.member_id not in live:  # heard a moment ago: only a clock edge can hide it
            live = sorted([*live, self.member_id])
        mine = frozenset(m for m in markets if owner_of(m, live) == self.member_id)
        change = AssignmentChange(sorted(mine - self.owned), sorted(self.owned - mine), live)
        self.owned = mine
        return change
