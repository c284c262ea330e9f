"""The newest fired alerts with their action outcomes, for the dashboard's notifications page and chart
markers, read from whichever store holds them — SQLite (a single node) or PostgreSQL (a cluster).

One query per dialect rather than a method on each store: it reads the audit tables both schemas
share (``alert_events``, ``alert_actions``) and nothing on the firing path calls it.  On PostgreSQL
the newest rows are found by ``alert_events.seq`` (an identity with a unique index, so a backward
index scan) instead of ``at``, which has no index there: adding one would cost every firing an
index insert for a page an operator opens now and then.  The two orders agree up to firings
committed out of their ``at`` order by different workers.
"""

from __future__ import annotations

from typing import Any

from storage import Database, PostgresDatabase

_COLUMNS = (
    "SELECT e.alert_id, e.principal, e.at, e.value, e.bar_time, e.record, a.outcome AS action"
    " FROM alert_events e LEFT JOIN alert_actions a ON a.alert_id = e.alert_id WHERE e.outcome = 'fired'"
)


async def recent_fired(db: Database | PostgresDatabase, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` fired alerts, newest first: alert_id, principal, at, value, bar_time, record
    (the alert's JSON) and action (its outcome's JSON, or None)."""
    if isinstance(db, PostgresDatabase):
        rows: list[Any] = await db.fetch(_COLUMNS + " ORDER BY e.seq DESC LIMIT $1", limit)
    else:
        rows = await db.fetchall(_COLUMNS + " ORDER BY e.at DESC LIMIT ?", (limit,))
    return [{k: r[k] for k in ("alert_id", "principal", "at", "value", "bar_time", "record", "action")} for r in rows]
