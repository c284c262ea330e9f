"""The ``alert_actions`` rows: an action's client order id and outcome, and their hand-over to the queues.

:func:`commit_actions_in` runs inside the firing transaction (:meth:`AlertStore.fire`): for each
fired alert that carries an action it records the order intent through the executor's
``commit_in`` (inside a SAVEPOINT, so a refusal leaves nothing half-written) and the
``alert_actions`` row — ``pending`` when an intent was recorded, ``done`` with the refusal
otherwise.  :class:`ActionOutcomes` later writes the final outcome into that row, the queued
poll notification and the queued push frame, in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from alerts.actions import ActionRefused, pending_outcome, refused_outcome
from alerts.models import Alert
from alerts.outbox_store import set_action_in
from storage import Database

CommitAction = Callable[[sqlite3.Connection, Any], None]


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """An action prepared before the firing transaction: a token to commit, or why it is refused."""

    client_order_id: str
    token: Any = None
    refusal: str | None = None


def refusal_before_commit(plan: PlannedAction | None, commit: object, no_path: str) -> dict[str, Any] | None:
    """The outcome of an action refused before its intent is committed (no plan or no order path:
    ``no_path``; a refused plan: its reason); None when the intent is to be committed."""
    if plan is None or commit is None:
        return refused_outcome(no_path)
    if plan.refusal is not None:
        return refused_outcome(plan.refusal)
    return None


def commit_actions_in(
    conn: sqlite3.Connection,
    alerts: Mapping[str, Alert],
    plans: Mapping[str, PlannedAction],
    commit: CommitAction | None,
    now: float,
) -> dict[str, dict[str, Any]]:
    """Record every fired alert's action (intent + row); returns alert id → provisional outcome entry."""
    outcomes: dict[str, dict[str, Any]] = {}
    for alert_id, alert in alerts.items():
        if alert.action is None:
            continue
        plan = plans.get(alert_id)
        refused = refusal_before_commit(plan, commit, "the order path is not running (start the daemon with --trade)")
        if refused is not None:
            outcome = refused
        else:
            assert plan is not None and commit is not None
            conn.execute("SAVEPOINT alert_action")
            try:
                commit(conn, plan.token)
            except ActionRefused as exc:
                conn.execute("ROLLBACK TO alert_action")
                outcome = refused_outcome(str(exc))
            else:
                outcome = pending_outcome(plan.client_order_id)
            conn.execute("RELEASE alert_action")
        state = "pending" if outcome["status"] == "Pending" else "done"
        conn.execute(
            "INSERT INTO alert_actions (alert_id, principal, client_order_id, state, outcome, at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (alert_id, alert.principal, outcome["order_id"], state, orjson.dumps(outcome).decode(), now),
        )
        outcomes[alert_id] = outcome
    return outcomes


def strip_actions_in(conn: sqlite3.Connection, principals: Sequence[str]) -> list[str]:
    """Inside the caller's transaction (a revocation): remove the action of every armed alert of
    ``principals``; the alert ids.  The alerts stay, as plain alerts: their owner's notifications
    still come.  The firing transaction reads the stored record, so an alert firing afterwards —
    in this process or another — places no order."""
    stripped: list[str] = []
    for principal in principals:
        cur = conn.execute(
            "UPDATE alerts SET record = json_remove(record, '$.action')"
            " WHERE principal = ? AND json_extract(record, '$.action') IS NOT NULL RETURNING id",
            (principal,),
        )
        stripped.extend(str(r[0]) for r in cur.fetchall())
    return sorted(stripped)


@dataclass(frozen=True, slots=True)
class UpdatedFrame:
    """A queued push frame rewritten with the action's outcome (to publish now)."""

    principal: str
    seq: int
    data: str


class OutcomeLog(Protocol):
    """What an :class:`~alerts.action_runner.ActionRunner` writes outcomes to: :class:`ActionOutcomes`
    (SQLite) or :class:`~alerts.pg_action_outcomes.PgActionOutcomes` (PostgreSQL, whose ``record`` returns None)."""

    async def pending(self) -> list[tuple[str, str]]: ...

    async def record(self, alert_id: str, outcome: dict[str, Any]) -> UpdatedFrame | None: ...


class ActionOutcomes:
    """Final outcomes of alert actions, written where the client will read them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def pending(self) -> list[tuple[str, str]]:
        """(alert id, client order id) of every action whose outcome is not known yet."""
        rows = await self.db.fetchall(
            "SELECT alert_id, client_order_id FROM alert_actions WHERE state = 'pending' ORDER BY at"
        )
        return [(r["alert_id"], r["client_order_id"]) for r in rows]

    async def get(self, alert_id: str) -> tuple[str, dict[str, Any]] | None:
        """(state, outcome entry) of one alert's action, or None."""
        row = await self.db.fetchone("SELECT state, outcome FROM alert_actions WHERE alert_id = ?", (alert_id,))
        return None if row is None else (row["state"], orjson.loads(row["outcome"]))

    async def record(self, alert_id: str, outcome: dict[str, Any]) -> UpdatedFrame | None:
        """Store ``outcome`` as final and put it into the queued notification and push frame.

        Returns the rewritten push frame if one is still queued undelivered (to publish now)."""
        return await self.db.run_transaction(lambda conn: _record_sync(conn, alert_id, outcome))


def _record_sync(conn: sqlite3.Connection, alert_id: str, outcome: dict[str, Any]) -> UpdatedFrame | None:
    entry = orjson.dumps(outcome).decode()
    cur = conn.execute(
        "UPDATE alert_actions SET state = 'done', outcome = ? WHERE alert_id = ? AND state = 'pending'",
        (entry, alert_id),
    )
    if cur.rowcount == 0:
        return None
    row = conn.execute("SELECT payload FROM notifications WHERE alert_id = ?", (alert_id,)).fetchone()
    if row is not None:
        payload = orjson.loads(row[0])
        payload["action"] = outcome
        conn.execute(
            "UPDATE notifications SET payload = ? WHERE alert_id = ?", (orjson.dumps(payload).decode(), alert_id)
        )
    set_action_in(conn, alert_id, outcome)
    updated = None
    for seq, principal, frame_text, delivered in conn.execute(
        "SELECT seq, principal, frame, delivered FROM push_queue WHERE alert_id = ?", (alert_id,)
    ).fetchall():
        frame = orjson.loads(frame_text)
        frame["params"]["action"] = outcome
        data = orjson.dumps(frame).decode()
        conn.execute("UPDATE push_queue SET frame = ? WHERE seq = ?", (data, seq))
        if not delivered:
            updated = UpdatedFrame(principal, int(seq), data)
    return updated
