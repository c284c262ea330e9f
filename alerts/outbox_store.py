"""The notification outbox: one row per (channel, notification), written inside the firing transaction.

:class:`ChannelRouting` decides which channels a fired alert goes to — the operator's
``notify_all_channels`` for everybody, plus the channels the owner routed its own notifications
to with ``subscribe_notifications {"channels": [...]}`` (when the subscription's filters match
the alert, and only channels whose ``subscribers`` grant somebody); :func:`outbox_rows` makes a
firing's rows (both stores).  :func:`enqueue_in` writes
them on the firing transaction's connection, so a notification is in the outbox exactly when its
alert has fired; :func:`set_action_in` puts an alert action's outcome into the undelivered rows in
the transaction that records the outcome.  :class:`OutboxStore` is the delivery side the channel
senders (alerts.channels) use — :class:`Outbox` is its interface, which the PostgreSQL outbox
(alerts/pg_outbox.py) also has.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from alerts.models import Alert, Firing, Subscription, push_frame
from config import Settings
from storage import Database


@dataclass(frozen=True, slots=True)
class ChannelRouting:
    """Which channels exist and which receive every principal's notifications."""

    known: frozenset[str] = frozenset()
    all_principals: tuple[str, ...] = ()
    """``notify_all_channels``, in the order configured."""
    subscribable: frozenset[str] | None = None
    """Channels whose ``subscribers`` grant anybody (None: every known channel, for tests and benches
    that build a routing by hand).  A principal's own routing to any other channel is dropped at
    firing time — a subscription stored before the operator took the grant away reaches nothing."""

    @classmethod
    def configured(cls, settings: Settings) -> ChannelRouting:
        """The operator's ``[channels.NAME]``, ``notify_all_channels`` and each channel's ``subscribers``."""
        return cls(
            known=frozenset(settings.channels),
            all_principals=tuple(settings.notify_all_channels),
            subscribable=frozenset(name for name, ch in settings.channels.items() if ch.subscribers),
        )

    def for_alert(self, own: Iterable[str] | None) -> list[str]:
        """The channels of one notification: everybody's, then the owner's own (unknown or ungranted
        names skipped; who may subscribe is checked by name when subscribing, alerts.service)."""
        out = list(self.all_principals)
        allowed = self.known if self.subscribable is None else self.known & self.subscribable
        for name in own or ():
            if name in allowed and name not in out:
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


class ByName(Protocol):
    """A database row read by column name: an SQLite ``sqlite3.Row`` or an asyncpg ``Record``."""

    def __getitem__(self, column: str, /) -> Any: ...


class FiredAlert(Protocol):
    """What :func:`outbox_rows` reads of a fired alert (alerts.store's ``Fired``)."""

    @property
    def alert(self) -> Alert: ...
    @property
    def firing(self) -> Firing: ...
    @property
    def push_data(self) -> str | None: ...
    @property
    def action(self) -> dict[str, Any] | None: ...


def outbox_rows(
    routing: ChannelRouting,
    fired: Iterable[FiredAlert],
    subscriptions: Mapping[str, Subscription],
    now: float,
    dumps: Callable[[Any], str],
) -> list[OutboxRow]:
    """One row per channel of each fired alert: the operator's channels, and the owner's own when its
    push subscription (``subscriptions`` by principal) matches the alert; the payload is the push frame."""
    if not routing.known:
        return []
    rows: list[OutboxRow] = []
    for x in fired:
        sub = subscriptions.get(x.alert.principal)
        own = sub.channels if sub is not None and sub.matches(x.alert) else None
        channels = routing.for_alert(own)
        if channels:
            data = x.push_data or dumps(push_frame(x.alert, x.firing, x.action))
            rows.extend(OutboxRow(c, x.alert.id, x.alert.principal, data, now) for c in channels)
    return rows


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


@dataclass(frozen=True, slots=True)
class Delivery:
    """One pending outbox row as the sender reads it."""

    id: int
    channel: str
    notification_id: str
    principal: str
    payload: str
    created_at: float
    attempts: int
    next_at: float


@dataclass(frozen=True, slots=True)
class ChannelCounts:
    pending: int = 0
    delivered: int = 0
    failed: int = 0
    oldest_pending_at: float | None = None


def delivery_of(r: ByName) -> Delivery:
    """An outbox row (``HEAD_COLUMNS``) as the sender reads it."""
    return Delivery(
        int(r["id"]),
        r["channel"],
        r["notification_id"],
        r["principal"],
        r["payload"],
        float(r["created_at"]),
        int(r["attempts"]),
        float(r["next_at"]),
    )


HEAD_COLUMNS = "id, channel, notification_id, principal, payload, created_at, attempts, next_at"

_HEAD_COLUMNS_Q = ", ".join("q." + c.strip() for c in HEAD_COLUMNS.split(","))

HEAD_SQL = (
    "WITH RECURSIVE p(principal) AS ("
    " SELECT MIN(principal) FROM outbox WHERE channel = {channel} AND state = 'pending'"
    " UNION ALL"
    " SELECT (SELECT MIN(o.principal) FROM outbox o"
    " WHERE o.channel = {channel} AND o.state = 'pending' AND o.principal > p.principal)"
    " FROM p WHERE p.principal IS NOT NULL),"
    " cut(principal, last_id) AS MATERIALIZED ("
    " SELECT principal, (SELECT c.id FROM outbox c"
    " WHERE c.channel = {channel} AND c.state = 'pending' AND c.principal = p.principal"
    " ORDER BY c.id LIMIT 1 OFFSET {limit} - 1)"
    " FROM p WHERE p.principal IS NOT NULL)"
    f" SELECT {_HEAD_COLUMNS_Q} FROM cut, outbox q"
    " WHERE q.channel = {channel} AND q.state = 'pending' AND q.principal = cut.principal"
    " AND q.id <= COALESCE(cut.last_id, 9223372036854775807)"
    " ORDER BY q.id"
)
"""The head of a channel's queue: each principal's ``limit`` oldest pending rows (placeholders by store).

A skip scan over the ``outbox_principal_pending`` index (alerts migration 5): the recursive part
finds the principals with pending rows one index seek each, ``cut`` the id of each one's
``limit``-th row, and the rows are read up to it — the cost grows with the rows handed out and the
principals waiting, not with the backlog (a window over every pending row of the channel made
each head read O(backlog): 10,000 queued notifications took 5.8 s to deliver instead of 3.3 s)."""

COUNTS_SQL = "SELECT channel, state, COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox GROUP BY channel, state"


def channel_counts(rows: Iterable[ByName]) -> dict[str, ChannelCounts]:
    """:data:`COUNTS_SQL`'s rows as each channel's counts."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault(r["channel"], {})
        entry[r["state"]] = int(r["n"])
        if r["state"] == "pending":
            entry["oldest_pending_at"] = float(r["oldest"])
    return {name: ChannelCounts(**e) for name, e in out.items()}


class Outbox(Protocol):
    """The delivery side of an outbox, as :class:`~alerts.channels.sender.OutboxSender` uses it."""

    async def head(self, channel: str, limit: int = 200) -> list[Delivery]: ...
    async def payload(self, row_id: int) -> str | None: ...
    async def delivered(self, row_ids: Sequence[int], now: float) -> None: ...
    async def retry_later(self, row_ids: Sequence[int], next_at: float, error: str) -> None: ...
    async def failed(self, row_ids: Sequence[int], now: float, error: str) -> None: ...
    async def counts(self) -> dict[str, ChannelCounts]: ...
    async def prune(self, before: float) -> int: ...


class OutboxStore:
    """The delivery side of the outbox: the head of a channel's queue and its state changes.

    Each state change is one transaction, whatever rows it covers (a digest message's rows are
    marked together); delivered marks are written in batches by the sender (a crash between a 2xx
    and its mark re-sends that row: delivery is at-least-once)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def head(self, channel: str, limit: int = 200) -> list[Delivery]:
        """Each principal's ``limit`` oldest pending rows of the channel, in id (= firing) order, once
        they are on disk (:data:`HEAD_SQL`: one principal's backlog never hides another's rows).

        A firing may be committed before its disk flush (``AlertStore.fire_synced_later``); its
        rows are only handed out after a flush that covers them, like its push frames."""
        rows = await self.db.fetchall(HEAD_SQL.format(channel="?1", limit="?2"), (channel, limit))
        if rows and self.db.wal_sync is not None:
            await self.db.wal_sync.request()
        return [delivery_of(r) for r in rows]

    async def payload(self, row_id: int) -> str | None:
        """A row's current payload (an action outcome may have been written into it since it was read)."""
        row = await self.db.fetchone("SELECT payload FROM outbox WHERE id = ? AND state = 'pending'", (row_id,))
        return None if row is None else str(row["payload"])

    async def delivered(self, row_ids: Sequence[int], now: float) -> None:
        if row_ids:
            async with self.db.transaction() as tx:
                await tx.executemany(
                    "UPDATE outbox SET state = 'delivered', attempts = attempts + 1, done_at = ?, last_error = NULL"
                    " WHERE id = ? AND state = 'pending'",
                    [(now, i) for i in row_ids],
                )

    async def retry_later(self, row_ids: Sequence[int], next_at: float, error: str) -> None:
        if row_ids:
            async with self.db.transaction() as tx:
                await tx.executemany(
                    "UPDATE outbox SET attempts = attempts + 1, next_at = ?, last_error = ?"
                    " WHERE id = ? AND state = 'pending'",
                    [(next_at, error[:500], i) for i in row_ids],
                )

    async def failed(self, row_ids: Sequence[int], now: float, error: str) -> None:
        """Mark rows failed; a row keeps the error of its last attempt when it had one."""
        if row_ids:
            async with self.db.transaction() as tx:
                await tx.executemany(
                    "UPDATE outbox SET state = 'failed', done_at = ?, last_error = COALESCE(last_error, ?)"
                    " WHERE id = ? AND state = 'pending'",
                    [(now, error[:500], i) for i in row_ids],
                )

    async def counts(self) -> dict[str, ChannelCounts]:
        """Per channel: pending, delivered and failed rows and the creation time of the oldest pending one."""
        return channel_counts(await self.db.fetchall(COUNTS_SQL))

    async def prune(self, before: float) -> int:
        """Drop delivered and failed rows finished before ``before``; returns how many."""
        async with self.db.transaction() as tx:
            cur = await tx.execute("DELETE FROM outbox WHERE state != 'pending' AND done_at < ?", (before,))
            return cur.rowcount
