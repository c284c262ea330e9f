"""Alert actions on PostgreSQL in the firing transaction: their rows (:func:`commit_actions`) and their
removal on a revocation (:func:`strip_actions`) — the PostgreSQL half of alerts/action_store.py's
``commit_actions_in``/``strip_actions_in``.  Their final outcomes are alerts/pg_action_outcomes.py's.

:func:`commit_actions` runs inside :meth:`alerts.pg_store.PgAlertStore.fire`'s transaction: for each
fired alert that carries an action it runs the caller's async ``commit`` (a cluster worker's records
the order intent for the account's order leader) in a savepoint, so a refusal
(:class:`~alerts.actions.ActionRefused`) leaves nothing half-written, and writes the
``alert_actions`` row — ``pending`` with the client order id when the intent was recorded, ``done``
with the refusal otherwise.  The intent therefore exists exactly when the alert fired.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg

from alerts.action_store import PlannedAction, refusal_before_commit
from alerts.actions import ActionRefused, pending_outcome, refused_outcome
from alerts.models import Alert
from alerts.store import dumps

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
