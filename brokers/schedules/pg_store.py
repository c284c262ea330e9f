"""The scheduled orders' table on a cluster's PostgreSQL: the same rows and operations as
:class:`brokers.schedules.store.ScheduleStore` (SQLite), for fronts (``schedule_order``,
``list_schedules``, ``cancel_schedule``) and the order leader that runs them (cluster/schedule_runs.py).

:meth:`PgScheduleStore.settle_in` records a run's progress inside the caller's transaction (the
leader's, which also records the run's order intent): ``… WHERE status = 'active' AND
(last_fire_at IS NULL OR last_fire_at < due)``, so of two leaders running the same scheduled time
(an old one paused past its lease, a new one) only one moves the progress, and only that one
records the order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import asyncpg

from brokers.models import Actor
from brokers.schedules.store import ACTIVE, ScheduleRow, schedule_row
from storage import Migrations, PostgresDatabase, rowcount, unreachable_as

PG_SCHEDULE_MIGRATIONS = Migrations(
    "brokers.schedules",
    (
        (
            1,
            """
            CREATE TABLE schedules (
                id TEXT PRIMARY KEY,
                owner TEXT,
                order_args TEXT NOT NULL,
                cron TEXT,
                every TEXT,
                start_at TEXT,
                end_at TEXT,
                max_runs INTEGER,
                runs_done INTEGER NOT NULL DEFAULT 0,
                last_fire_at DOUBLE PRECISION,
                status TEXT NOT NULL DEFAULT 'active',
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                CHECK (status IN ('active', 'cancelled', 'finished')),
                CHECK ((cron IS NULL) <> (every IS NULL))
            );
            CREATE INDEX schedules_owner ON schedules (owner, status);
            CREATE INDEX schedules_status ON schedules (status)
            """,
        ),
    ),
)


async def cancel_owners(conn: asyncpg.Connection, owners: Sequence[str], now: float) -> list[str]:
    """Inside the caller's transaction (a revocation): cancel every active schedule of ``owners``; the
    ids cancelled.  The order leader reads the row before each run, so a cancelled one never runs again."""
    rows = await conn.fetch(
        "UPDATE schedules SET status = 'cancelled', updated_at = $1 WHERE owner = ANY($2::text[])"
        " AND status = 'active' RETURNING id",
        now,
        list(owners),
    )
    return sorted(str(r["id"]) for r in rows)


class PgScheduleStore:
    """Schedules of every owner, on PostgreSQL (several processes)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def insert(self, row: ScheduleRow) -> None:
        with unreachable_as("schedule not created", self.db.where):
            await self.db.execute(
                "INSERT INTO schedules (id, owner, order_args, cron, every, start_at, end_at, max_runs, runs_done,"
                " last_fire_at, status, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                row.id, row.owner, json.dumps(row.order_args, sort_keys=True), row.cron, row.every, row.start_at,
                row.end_at, row.max_runs, row.runs_done, row.last_fire_at, row.status, row.created_at, row.updated_at,
            )  # fmt: skip

    async def get(self, schedule_id: str) -> ScheduleRow | None:
        r = await self.db.fetchrow("SELECT * FROM schedules WHERE id = $1", schedule_id)
        return None if r is None else schedule_row(r)

    async def active(self) -> list[ScheduleRow]:
        rows = await self.db.fetch("SELECT * FROM schedules WHERE status = $1 ORDER BY created_at", ACTIVE)
        return [schedule_row(r) for r in rows]

    async def count_active(self, owner: str | None) -> int:
        n = await self.db.fetchval(
            "SELECT COUNT(*) FROM schedules WHERE owner IS NOT DISTINCT FROM $1 AND status = $2", owner, ACTIVE
        )
        return int(n or 0)

    async def visible(self, actor: Actor, limit: int = 500) -> list[ScheduleRow]:
        """``actor``'s schedules (everyone's for an admin), newest first."""
        if actor.admin:
            rows = await self.db.fetch("SELECT * FROM schedules ORDER BY created_at DESC LIMIT $1", limit)
        elif actor.principal is None:
            return []
        else:
            rows = await self.db.fetch(
                "SELECT * FROM schedules WHERE owner = $1 ORDER BY created_at DESC LIMIT $2", actor.principal, limit
            )
        return [schedule_row(r) for r in rows]

    async def settle_in(
        self, conn: asyncpg.Connection, schedule_id: str, settled: float, *, ran: bool, finished: bool, now: float
    ) -> bool:
        """Inside the caller's transaction: every scheduled time up to ``settled`` is dealt with (one more
        run if ``ran``; ``finished`` ends it).  False when the row is no longer active or already past it."""
        tag = await conn.execute(
            "UPDATE schedules SET last_fire_at = $1, runs_done = runs_done + $2,"
            " status = CASE WHEN $3 THEN 'finished' ELSE status END, updated_at = $4"
            " WHERE id = $5 AND status = 'active' AND (last_fire_at IS NULL OR last_fire_at < $1)",
            settled, 1 if ran else 0, finished, now, schedule_id,
        )  # fmt: skip
        return rowcount(tag) > 0

    async def settle(self, schedule_id: str, settled: float, *, ran: bool, finished: bool, now: float) -> bool:
        """:meth:`settle_in` in a transaction of its own (skipped or finished times)."""
        with unreachable_as("schedule progress not recorded", self.db.where):
            async with self.db.transaction() as conn:
                return await self.settle_in(conn, schedule_id, settled, ran=ran, finished=finished, now=now)

    async def set_status(self, schedule_id: str, status: str, now: float) -> bool:
        """Move an active schedule to ``status``; False when it was not active."""
        with unreachable_as("schedule not changed", self.db.where):
            tag = await self.db.execute(
                "UPDATE schedules SET status = $1, updated_at = $2 WHERE id = $3 AND status = 'active'",
                status,
                now,
                schedule_id,
            )
        return rowcount(tag) > 0
