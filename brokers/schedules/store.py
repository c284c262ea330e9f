"""The ``schedules`` table in the daemon database: the truth about every scheduled order.

One row per schedule: its owner, the validated place_order arguments (JSON), the timing
(``cron`` or ``every``, ``start_at``, ``end_at``, ``max_runs``), progress (``runs_done`` and
``last_fire_at``: every scheduled time up to it is dealt with — run, refused or skipped) and
``status`` (active, cancelled, finished).  The scheduler's in-memory jobs are rebuilt from the
active rows at start (APScheduler's SQLAlchemyJobStore would pickle jobs and block the loop).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from brokers.models import Actor
from storage import Database, Migrations

MIGRATIONS = Migrations(
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
                last_fire_at REAL,
                status TEXT NOT NULL DEFAULT 'active',
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                CHECK (status IN ('active', 'cancelled', 'finished')),
                CHECK ((cron IS NULL) <> (every IS NULL))
            );
            CREATE INDEX schedules_owner ON schedules (owner, status);
            CREATE INDEX schedules_status ON schedules (status)
            """,
        ),
    ),
)

ACTIVE, CANCELLED, FINISHED = "active", "cancelled", "finished"


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    id: str
    owner: str | None
    order_args: dict[str, Any]
    cron: str | None
    every: str | None
    start_at: str | None
    end_at: str | None
    max_runs: int | None
    runs_done: int
    last_fire_at: float | None
    status: str
    created_at: float
    updated_at: float

    def timing(self) -> dict[str, Any]:
        """The spec's arguments, as :func:`brokers.schedules.spec.parse_spec` takes them."""
        keys = {"cron": self.cron, "every": self.every, "start_at": self.start_at, "end_at": self.end_at}
        return {k: v for k, v in {**keys, "max_runs": self.max_runs}.items() if v is not None}


def schedule_row(r: Any) -> ScheduleRow:
    """A row of either database (sqlite3.Row or asyncpg.Record: both by column name)."""
    return ScheduleRow(
        id=r["id"],
        owner=r["owner"],
        order_args=json.loads(r["order_args"]),
        cron=r["cron"],
        every=r["every"],
        start_at=r["start_at"],
        end_at=r["end_at"],
        max_runs=r["max_runs"],
        runs_done=int(r["runs_done"]),
        last_fire_at=None if r["last_fire_at"] is None else float(r["last_fire_at"]),
        status=r["status"],
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
    )


def cancel_owners_in(conn: sqlite3.Connection, owners: Sequence[str], now: float) -> list[str]:
    """Inside the caller's transaction (a revocation): cancel every active schedule of ``owners``;
    the ids cancelled.  A running daemon's job finds its row cancelled at its next run and stops."""
    cancelled: list[str] = []
    for owner in owners:
        cur = conn.execute(
            "UPDATE schedules SET status = 'cancelled', updated_at = ? WHERE owner = ? AND status = 'active'"
            " RETURNING id",
            (now, owner),
        )
        cancelled.extend(str(r[0]) for r in cur.fetchall())
    return sorted(cancelled)


class ScheduleRepository(Protocol):
    """What the schedule service needs of its table: :class:`ScheduleStore` (SQLite) or
    :class:`brokers.schedules.pg_store.PgScheduleStore` (a cluster's PostgreSQL)."""

    async def insert(self, row: ScheduleRow) -> None: ...
    async def get(self, schedule_id: str) -> ScheduleRow | None: ...
    async def active(self) -> list[ScheduleRow]: ...
    async def count_active(self, owner: str | None) -> int: ...
    async def visible(self, actor: Actor, limit: int = 500) -> list[ScheduleRow]: ...
    async def settle(self, schedule_id: str, settled: float, *, ran: bool, finished: bool, now: float) -> bool: ...
    async def set_status(self, schedule_id: str, status: str, now: float) -> bool: ...


class ScheduleStore:
    """Schedules of every owner."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def insert(self, row: ScheduleRow) -> None:
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO schedules (id, owner, order_args, cron, every, start_at, end_at, max_runs, runs_done,"
                " last_fire_at, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.id, row.owner, json.dumps(row.order_args, sort_keys=True), row.cron, row.every,
                    row.start_at, row.end_at, row.max_runs, row.runs_done, row.last_fire_at, row.status,
                    row.created_at, row.updated_at,
                ),
            )  # fmt: skip

    async def get(self, schedule_id: str) -> ScheduleRow | None:
        r = await self.db.fetchone("SELECT * FROM schedules WHERE id = ?", (schedule_id,))
        return None if r is None else schedule_row(r)

    async def active(self) -> list[ScheduleRow]:
        rows = await self.db.fetchall("SELECT * FROM schedules WHERE status = ? ORDER BY created_at", (ACTIVE,))
        return [schedule_row(r) for r in rows]

    async def count_active(self, owner: str | None) -> int:
        r = await self.db.fetchone("SELECT COUNT(*) FROM schedules WHERE owner IS ? AND status = ?", (owner, ACTIVE))
        return 0 if r is None else int(r[0])

    async def visible(self, actor: Actor, limit: int = 500) -> list[ScheduleRow]:
        """``actor``'s schedules (everyone's for an admin), newest first."""
        if actor.admin:
            rows = await self.db.fetchall("SELECT * FROM schedules ORDER BY created_at DESC LIMIT ?", (limit,))
        elif actor.principal is None:
            return []
        else:
            rows = await self.db.fetchall(
                "SELECT * FROM schedules WHERE owner = ? ORDER BY created_at DESC LIMIT ?", (actor.principal, limit)
            )
        return [schedule_row(r) for r in rows]

    async def settle(self, schedule_id: str, settled: float, *, ran: bool, finished: bool, now: float) -> bool:
        """Record progress: every scheduled time up to ``settled`` is dealt with (one more run if
        ``ran``); ``finished`` ends the schedule.  Durable: it decides what a restart runs.
        Returns False when the row is no longer active (cancelled meanwhile) or already past ``settled``."""

        def step(conn: Any) -> bool:
            cur = conn.execute(
                "UPDATE schedules SET last_fire_at = ?, runs_done = runs_done + ?,"
                " status = CASE WHEN ? THEN 'finished' ELSE status END, updated_at = ?"
                " WHERE id = ? AND status = 'active' AND (last_fire_at IS NULL OR last_fire_at < ?)",
                (settled, 1 if ran else 0, 1 if finished else 0, now, schedule_id, settled),
            )
            return bool(cur.rowcount)

        return await self.db.run_transaction(step, durable=True)

    async def set_status(self, schedule_id: str, status: str, now: float) -> bool:
        """Move an active schedule to ``status``; False when it was not active."""
        changed = await self.db.execute(
            "UPDATE schedules SET status = ?, updated_at = ? WHERE id = ? AND status = 'active'",
            (status, now, schedule_id),
        )
        return changed > 0
