"""The alerts package's SQL schema (its :class:`~storage.sqlite.Migrations`).

Step 1: alerts, the audit of how each ended, the poll queue, push subscriptions and the push
queue.  Step 2: ``alert_actions`` — one row per fired alert that carried an action, written in
the firing transaction: the action's client order id and its outcome (``pending`` until the
exchange answered or the order service resolved it after a restart, then ``done``).
Step 3: ``outbox`` — one row per (notification channel, notification) written in the firing
transaction, delivered by the channel sender (alerts.channels); ``push_subscriptions.channels``
— the channels a principal routes its own notifications to.
Step 4: trades.log progress as one high-water mark (``alert_counters.audit_logged_rowid``: every
fired row up to that ``alert_events`` rowid has its line) instead of a ``logged`` flag per row —
marking a pass's lines is then a one-row update, and a firing no longer updates the partial
index ``alert_events_unlogged`` (dropped).  The mark starts just below the oldest row the flag
still called unlogged; rows above it that the flag called logged stay skipped (the pass still
reads ``logged = 0``, which every new row has).  ``alert_events`` rows are never deleted, so
their rowids only grow and are never reused.
Step 5: ``outbox_principal_pending`` — the pending rows by (channel, principal, id), so the sender's
head (alerts/outbox_store.py ``HEAD_SQL``: each principal's oldest rows) walks the index per
principal instead of every pending row of the channel.
"""

from __future__ import annotations

from storage import Migrations

MIGRATIONS = Migrations(
    "alerts",
    (
        (
            1,
            """
            CREATE TABLE alerts (
                id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                symbol TEXT NOT NULL,
                interval TEXT NOT NULL,
                kind TEXT NOT NULL,
                record TEXT NOT NULL,
                created_at REAL NOT NULL,
                expires_at REAL
            );
            CREATE INDEX alerts_principal ON alerts (principal, created_at);
            CREATE INDEX alerts_expiry ON alerts (expires_at) WHERE expires_at IS NOT NULL;
            CREATE TABLE alert_events (
                alert_id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('fired', 'cancelled', 'expired')),
                at REAL NOT NULL,
                value REAL,
                bar_time INTEGER,
                record TEXT NOT NULL,
                logged INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX alert_events_unlogged ON alert_events (logged) WHERE logged = 0;
            CREATE TABLE notifications (
                alert_id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                payload TEXT NOT NULL,
                created_at REAL NOT NULL
            );
            CREATE INDEX notifications_principal ON notifications (principal, created_at);
            CREATE TABLE push_subscriptions (
                principal TEXT PRIMARY KEY,
                symbols TEXT,
                alert_types TEXT,
                updated_at REAL NOT NULL
            );
            CREATE TABLE push_queue (
                seq INTEGER PRIMARY KEY,
                principal TEXT NOT NULL,
                alert_id TEXT NOT NULL,
                frame TEXT NOT NULL,
                enqueued_at REAL NOT NULL,
                delivered INTEGER NOT NULL DEFAULT 0,
                UNIQUE (principal, alert_id)
            );
            CREATE INDEX push_queue_principal ON push_queue (principal, seq);
            CREATE TABLE alert_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT INTO alert_counters (name, value) VALUES ('push_seq', 0)
            """,
        ),
        (
            2,
            """
            CREATE TABLE alert_actions (
                alert_id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                client_order_id TEXT,
                state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
                outcome TEXT NOT NULL,
                at REAL NOT NULL
            );
            CREATE INDEX alert_actions_pending ON alert_actions (state) WHERE state = 'pending'
            """,
        ),
        (
            3,
            """
            CREATE TABLE outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                channel TEXT NOT NULL,
                notification_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                payload TEXT NOT NULL,
                created_at REAL NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_at REAL NOT NULL,
                last_error TEXT,
                done_at REAL,
                UNIQUE (channel, notification_id)
            );
            CREATE INDEX outbox_pending ON outbox (channel, id) WHERE state = 'pending';
            CREATE INDEX outbox_notification ON outbox (notification_id);
            ALTER TABLE push_subscriptions ADD COLUMN channels TEXT
            """,
        ),
        (
            4,
            """
            INSERT INTO alert_counters (name, value) VALUES ('audit_logged_rowid', COALESCE(
                (SELECT MIN(rowid) - 1 FROM alert_events WHERE logged = 0 AND outcome = 'fired'),
                (SELECT MAX(rowid) FROM alert_events),
                0));
            DROP INDEX alert_events_unlogged
            """,
        ),
        (
            5,
            "CREATE INDEX outbox_principal_pending ON outbox (channel, principal, id) WHERE state = 'pending'",
        ),
    ),
)
