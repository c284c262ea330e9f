"""Final outcomes of alert actions on PostgreSQL (:class:`PgActionOutcomes`) — the PostgreSQL half of
alerts/action_store.py's :class:`~alerts.action_store.ActionOutcomes`.

:meth:`PgActionOutcomes.record` makes an outcome final, once whoever calls it (``UPDATE … WHERE
state = 'pending'``: several workers may settle the same action): it writes the outcome into the
poll notification if it is still queued and into the notification's undelivered outbox rows, and
queues the alert's push frame — held back at the
firing so that the pushed notification carries the order's outcome, as on a single node — with
the principal's next sequence number, announced to the fronts like a firing's frames (``NOTIFY``
in the transaction, or the store's ``announce_push`` after it).

Why apart from alerts/pg_actions.py (the action rows the firing transaction writes): an outcome is
written through the alert store — its retried transactions and its push announcement — while the
store's firing transaction uses pg_actions; together they would import each other.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import orjson

from alerts.models import Firing, push_frame
from alerts.pg_outbox import set_action as set_outbox_action
from alerts.pg_push import notify_pushed
from alerts.pg_store import PgAlertStore
from alerts.store import alert_of, dumps
from alerts.subscription_store import subscription_of


class PgActionOutcomes:
    """Final outcomes of alert actions on PostgreSQL (an :class:`~alerts.action_runner.ActionRunner`'s)."""

    def __init__(self, store: PgAlertStore) -> None:
        self.store = store

    async def pending(self, limit: int = 1000) -> list[tuple[str, str]]:
        """(alert id, client order id) of the actions whose outcome is not known yet, oldest first."""
        rows = await self.store.db.fetch(
            "SELECT alert_id, client_order_id FROM alert_actions WHERE state = 'pending' ORDER BY at LIMIT $1", limit
        )
        return [(r["alert_id"], r["client_order_id"]) for r in rows]

    async def get(self, alert_id: str) -> tuple[str, dict[str, Any]] | None:
        """(state, outcome entry) of one alert's action, or None."""
        row = await self.store.db.fetchrow("SELECT state, outcome FROM alert_actions WHERE alert_id = $1", alert_id)
        return None if row is None else (row["state"], orjson.loads(row["outcome"]))

    async def record(self, alert_id: str, outcome: dict[str, Any]) -> None:
        """Make ``outcome`` final (once: a second call changes nothing), update the queued poll
        notification and queue the push frame; PostgreSQL away → StorageUnavailable (retry later)."""
        seqs = await self.store.retrying(
            lambda conn: self._record_tx(conn, alert_id, outcome), "action outcome not recorded"
        )
        if seqs and self.store.announce_push is not None:
            self.store.announce_push(seqs)

    async def _record_tx(
        self, conn: asyncpg.Connection, alert_id: str, outcome: dict[str, Any]
    ) -> dict[str, list[int]]:
        principal = await conn.fetchval(
            "UPDATE alert_actions SET state = 'done', outcome = $2 WHERE alert_id = $1 AND state = 'pending'"
            " RETURNING principal",
            alert_id,
            dumps(outcome),
        )
        if principal is None:
            return {}
        await set_outbox_action(conn, alert_id, outcome)
        payload = await conn.fetchval("SELECT payload FROM notifications WHERE alert_id = $1", alert_id)
        if payload is not None:
            entry = orjson.loads(payload)
            entry["action"] = outcome
            await conn.execute("UPDATE notifications SET payload = $2 WHERE alert_id = $1", alert_id, dumps(entry))
        event = await conn.fetchrow(
            "SELECT value, bar_time, at, record FROM alert_events WHERE alert_id = $1", alert_id
        )
        sub = await conn.fetchrow(
            "SELECT principal, symbols, alert_types, channels FROM push_subscriptions WHERE principal = $1", principal
        )
        if event is None or sub is None:
            return {}
        alert = alert_of(event["record"])
        if not subscription_of(sub).matches(alert):
            return {}
        firing = Firing(alert_id=alert_id, value=event["value"], triggered_at=event["at"], bar_time=event["bar_time"])
        seq = await conn.fetchval(
            "INSERT INTO principal_counters AS c (principal, push_seq, push_queued) VALUES ($1, 1, 1)"
            " ON CONFLICT (principal) DO UPDATE SET push_seq = c.push_seq + 1, push_queued = c.push_queued + 1"
            " RETURNING push_seq",
            principal,
        )
        await conn.execute(
            "INSERT INTO push_queue (principal, seq, alert_id, frame, enqueued_at) VALUES ($1, $2, $3, $4, $5)"
            " ON CONFLICT DO NOTHING",
            principal,
            seq,
            alert_id,
            dumps(push_frame(alert, firing, outcome)),
            time.time(),
        )
        if self.store.announce_push is None:
            await notify_pushed(conn, {principal: [seq]})
        return {principal: [int(seq)]}
