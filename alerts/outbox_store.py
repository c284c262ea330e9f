"""The notification outbox: one row per (channel, notification), written inside the firing transaction.

:class:`ChannelRouting` decides which channels a fired alert goes to — the operator's
``notify_all_channels`` for everybody, plus the channels the owner routed its own notifications
to with ``subscribe_notifications {"channels": [...]}`` (when the subscription's filters match
the alert).  :func:`enqueue_in` writes the rows on the firing transaction's connection, so a
notification is in the outbox exactly when its alert has fired; :func:`set_action_in` puts an
alert action's outcome into the undelivered rows in the transaction that records the outcome.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class ChannelRouting:
    """Which channels exist and which receive every principal's notifications."""

    known: frozenset[str] = frozenset()
    all_principals: tuple[str, ...] = ()
    """``notify_all_channels``, in the order configured."""

    def for_alert(self, own: Iterable[str] | None) -> list[str]:
        """The channels of one notification: everybody's, then the owner's own (unknown names skipped)."""
        out = list(self.all_principals)
        for name in own or ():
            if name in self.known and name not in out:
                out.append(name)
        return out


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A delivery to write: ``payload`` is the push frame's JSON text; ``notification_id`` the alert id."""

    channel: str
    notification_id: str
    principal: str
    payload: str
    created_at: float


def enqueue_in(conn: sqlite3.Connection, rows: Sequence[OutboxRow]) -> int:
    """Insert delivery rows on ``conn`` (inside the caller's transaction); a repeated (channel, id) is ignored."""
    if not rows:
        return 0
    cur = conn.executemany(
        "INSERT OR IGNORE INTO outbox (channel, notification_id, principal, payload, created_at, next_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(r.channel, r.notification_id, r.principal, r.payload, r.created_at, r.created_at) for r in rows],
    )
    return cur.rowcount


def set_action_in(conn: sqlite3.Connection, notification_id: str, outcome: dict[str, object]) -> None:
    """Write an action's outcome into the notification's undelivered outbox rows (caller's transaction)."""
    for row_id, payload in conn.execute(
        "SELECT id, payload FROM outbox WHERE notification_id = ? AND state = 'pending'", (notification_id,)
    ).fetchall():
        frame = orjson.loads(payload)
        frame["params"]["action"] = outcome
        conn.execute("UPDATE outbox SET payload = ? WHERE id = ?", (orjson.dumps(frame).decode(), row_id))
