"""Markets the operator has the cluster follow: ``chartgen cluster follow | unfollow``, in PostgreSQL.

A worker's universe — the markets shared out by rendezvous hashing (cluster/membership.py) — is its
configured ``symbols`` × ``intervals``, every market with an armed alert, and the markets in
``cluster_followed``.  Every worker reads the same table each heartbeat (:data:`UNIVERSE_SQL`), so a
market added here is taken by its owner within a heartbeat, without editing any worker's settings
or restarting one — and, unlike a setting, it cannot differ between workers (a market configured on
one worker only is in that worker's universe only: the others assign it by a different universe,
and it may end up followed by nobody or by two).  Removing a market stops it at the next heartbeat
unless an armed alert or a worker's settings still need it.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage import Migrations, PostgresDatabase, rowcount

FOLLOWED_MIGRATIONS = Migrations(
    "cluster_followed",
    (
        (
            1,
            """
            CREATE TABLE cluster_followed (
                symbol TEXT NOT NULL,
                interval TEXT NOT NULL,
                added_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                PRIMARY KEY (symbol, interval)
            )
            """,
        ),
    ),
)

UNIVERSE_SQL = "SELECT symbol, interval FROM alerts UNION SELECT symbol, interval FROM cluster_followed"
"""The markets every worker follows besides its configured ones (armed alerts', the operator's)."""


class FollowedMarkets:
    """The operator's followed markets: (symbol, Binance interval) pairs."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def follow(self, markets: Iterable[tuple[str, str]]) -> int:
        """Add ``markets`` (already there: unchanged); how many were new."""
        pairs = sorted(set(markets))
        tag = await self.db.execute(
            "INSERT INTO cluster_followed (symbol, interval) SELECT * FROM unnest($1::text[], $2::text[])"
            " ON CONFLICT DO NOTHING",
            [s for s, _ in pairs],
            [i for _, i in pairs],
        )
        return rowcount(tag)

    async def unfollow(self, markets: Iterable[tuple[str, str]]) -> int:
        """Remove ``markets``; how many were there."""
        pairs = sorted(set(markets))
        tag = await self.db.execute(
            "DELETE FROM cluster_followed WHERE (symbol, interval) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
            [s for s, _ in pairs],
            [i for _, i in pairs],
        )
        return rowcount(tag)

    async def all(self) -> list[tuple[str, str]]:
        rows = await self.db.fetch("SELECT symbol, interval FROM cluster_followed ORDER BY symbol, interval")
        return [(r["symbol"], r["interval"]) for r in rows]
