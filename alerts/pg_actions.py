"""Alert actions on PostgreSQL: their rows in the firing transaction (:func:`commit_actions`) and
their final outcomes (:class:`PgActionOutcomes`) — the PostgreSQL half of alerts/action_store.py.

:func:`commit_actions` runs inside :meth:`alerts.pg_store.PgAlertStore.fire`'s transaction: for each
fired alert that carries an action it runs the caller's async ``commit`` (a cluster worker's records
the order intent for the account's order leader) in a savepoint, so a refusal
(:class:`~alerts.actions.ActionRefused`) leaves nothing half-written, and writes the
``alert_actions`` row — ``pending`` with the client order id when the intent was recorded, ``done``
with the refusal otherwise.  The intent therefore exists exactly when the alert fired.

:meth:`PgActionOutcomes.record` makes an outcome final, once whoever calls it (``UPDATE … WHERE
state = 'pending'``: several workers may settle the same action): it writes the outcome into the
poll notification if it is still queued and into the notification's undelivered outbox rows, and
queues the alert's push frame — held back at the
firing so that the pushed notification carries the order's outcome, as on a single node — with
the principal's next sequence number, announced to the fronts like a firing's frames (``NOTIFY``
in the transaction, or the store's ``announce_push`` after it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import asyncpg
import orjson

from alerts.action_store import PlannedAction, refusal_before_commit
from alerts.actions import ActionRefused, pending_outcome, refused_outcome
from alerts.models import Alert, Firing, push_frame
from alerts.pg_outbox import set_action as set_outbox_action
from alerts.pg_push import notify_pushed
from alerts.store import alert_of, dumps
from alerts.subscription_store import subscription_of

if TYPE_CHECKING:
    from alerts.pg_store import PgAlertStore

PgCommitAction = Callable[[asyncpg.Connection, Any], Awaitable[None]]
"""Inside the firing transaction: record an action's order intent (raises ActionRefused)."""

NO_ORDER_PATH = "the order path is not running on this worker (alert actions need the cluster's order leader)"


async def strip_actions(conn: asyncpg.Connection, principals: Sequence[str]) -> list[str]:
    """Inside the caller's transaction (a revocation): remove the action of every armed alert of
    ``principals``; the alert ids.  The alerts stay as plain alerts; the firing transaction reads
    the stored record, so an alert firing afterwards on any worker places no order."""
    rows = await conn.fetch(
        "UPDATE alerts SET record = (record::jsonb - 'action')::text"
        " WHERE principal = ANY($1::text[]) AND (record::jsonb) ? 'action'"
        " AND (record::jsonb -> 'action') <> 'null'::jsonb RETURNING id",
        list(principals),
    )
    return sorted(str(r["id"]) for r in rows)


async def commit_actions(
    conn: asyncpg.Connection,
    alerts: Mapping[str, Alert],
    plans: Mapping[str, PlannedAction],
    commit: PgCommitAction | None,
    now: float,
) -> dict[str, dict[str, Any]]:
    """Record every fired action alert's intent and ``alert_actions`` row; alert id → outcome entry."""
    outcomes: dict[str, dict[str, Any]] = {}
    rows: list[tuple[str, str, str | None, str, str, float]] = []
    for alert_id, alert in alerts.items():
        plan = plans.get(alert_id)
        refused = refusal_before_commit(plan, commit, NO_ORDER_PATH)
        if refused is not None:
            outcome = refused
        else:
            assert plan is not None and commit is not None
            try:
                async with conn.transaction():  # a savepoint: a refusal leaves no part of the intent
                    await commit(conn, plan.token)
            except ActionRefused as exc:
                outcome = refused_outcome(str(exc))
            else:
                outcome = pending_outcome(plan.client_order_id)
        state = "pending" if outcome["status"] == "Pending" else "done"
        rows.append((alert_id, alert.principal, outcome["order_id"], state, dumps(outcome), now))
        outcomes[alert_id] = outcome
    if rows:
        await conn.executemany(
            "INSERT INTO alert_actions (alert_id, principal, client_order_id, state, outcome, at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            rows,
        )
    return outcomes


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
