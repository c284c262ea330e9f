"""Hand-over marks: per market, the exchange time up to which its owner evaluated every trade.

The worker that owns a market (``SYMBOL interval``, cluster/membership.py) moves the market's mark
every heartbeat to the exchange time of the newest tick its evaluator checked against every armed
alert, firings committed (alerts/evaluator.py ``ticks_through``).  When the worker dies, the new
owner reads the mark and closes the gap from there: it fetches the trades the exchange made after
the mark and fires what they crossed (daemon/worker/handover.py).  A mark only moves forward
(``GREATEST``): a paused ex-owner that wakes and writes an older time cannot move it back.

Marks also give ``chartgen cluster status`` its lag: the server's clock minus a market's mark is how
far behind the exchange that market's alert evaluation is (the exchange's and the server's clocks
agree to within NTP's error).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage import Migrations, PostgresDatabase

MARK_MIGRATIONS = Migrations(
    "cluster_marks",
    (
        (
            1,
            """
            CREATE TABLE cluster_market_marks (
                market TEXT PRIMARY KEY,
                evaluated_ms BIGINT NOT NULL,
                member TEXT NOT NULL,
                written_at TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class Mark:
    market: str
    evaluated_ms: int
    member: str
    lag_s: float
    """The server's clock minus ``evaluated_ms`` (seconds)."""


class MarketMarks:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def advance(self, marks: Mapping[str, int], member: str) -> None:
        """Move each market's mark forward to its time (never back); one statement."""
        if not marks:
            return
        markets = sorted(marks)  # rows locked in one order: two writers never deadlock
        await self.db.execute(
            "INSERT INTO cluster_market_marks AS m (market, evaluated_ms, member, written_at)"
            " SELECT x.market, x.ms, $3, clock_timestamp() FROM unnest($1::text[], $2::bigint[]) AS x(market, ms)"
            " ON CONFLICT (market) DO UPDATE SET evaluated_ms = excluded.evaluated_ms, member = excluded.member,"
            " written_at = excluded.written_at WHERE m.evaluated_ms < excluded.evaluated_ms",
            markets,
            [marks[m] for m in markets],
            member,
        )

    async def read(self, markets: Iterable[str]) -> dict[str, int]:
        """The marks of these markets (a market never evaluated has none)."""
        rows = await self.db.fetch(
            "SELECT market, evaluated_ms FROM cluster_market_marks WHERE market = ANY($1::text[])", list(markets)
        )
        return {r["market"]: int(r["evaluated_ms"]) for r in rows}

    async def all(self) -> list[Mark]:
        rows = await self.db.fetch(
            "SELECT market, evaluated_ms, member,"
            " EXTRACT(EPOCH FROM clock_timestamp()) * 1000 - evaluated_ms AS lag_ms"
            " FROM cluster_market_marks ORDER BY market"
        )
        return [Mark(r["market"], int(r["evaluated_ms"]), r["member"], float(r["lag_ms"]) / 1000) for r in rows]
