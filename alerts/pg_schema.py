"""The alerts package's PostgreSQL schema (its :class:`~storage.migrations.Migrations` for
``storage/postgres.py``); the SQLite one is alerts/schema.py.

Step 1 is the shape SQLite reached by its step 4, with two differences that several processes
writing at once require:

- ``principal_counters`` holds, per principal, the last push sequence number and the sizes of
  its two queues.  A firing transaction updates its principals' rows (in principal order), so
  sequence numbers are handed out in commit order per principal — a PostgreSQL sequence would
  not be: a transaction that took number 5 may commit after one that took 6, and a client
  resuming after 6 would never see 5.  The sizes are upper bounds shared by every process (the
  SQLite store keeps them in process memory, which only works with one writer).
- ``push_queue`` is keyed by (principal, seq): SSE ``Last-Event-ID`` is per principal stream.

``alert_events.seq`` (identity) orders the audit the way SQLite's rowid does.  Step 2 indexes
alerts by market, which a cluster worker reads its share by.  Step 3 adds ``alert_actions`` (an
alert action's client order id and outcome: ``pending`` until the order leader answered; the
PostgreSQL half of alerts/action_store.py, written by alerts/pg_actions.py and pg_action_outcomes.py).  Step 4 adds the
notification channels' ``outbox`` (alerts/pg_outbox.py; SQLite's step 3); step 5 its
``outbox_principal_pending`` index (SQLite's step 5).
"""

from __future__ import annotations

from storage import Migrations

PG_MIGRATIONS = Migrations(
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
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION
            );
            CREATE INDEX alerts_principal ON alerts (principal, created_at);
            CREATE INDEX alerts_expiry ON alerts (expires_at) WHERE expires_at IS NOT NULL;
            CREATE TABLE alert_events (
                alert_id TEXT PRIMARY KEY,
                seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                principal TEXT NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('fired', 'cancelled', 'expired')),
                at DOUBLE PRECISION NOT NULL,
                value DOUBLE PRECISION,
                bar_time BIGINT,
                record TEXT NOT NULL
            );
            CREATE TABLE notifications (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                alert_id TEXT NOT NULL UNIQUE,
                principal TEXT NOT NULL,
                payload TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            );
            CREATE INDEX notifications_principal ON notifications (principal, id);
            CREATE TABLE push_subscriptions (
                principal TEXT PRIMARY KEY,
                symbols TEXT,
                alert_types TEXT,
                channels TEXT,
                updated_at DOUBLE PRECISION NOT NULL
            );
            CREATE TABLE push_queue (
                principal TEXT NOT NULL,
                seq BIGINT NOT NULL,
                alert_id TEXT NOT NULL,
                frame TEXT NOT NULL,
                enqueued_at DOUBLE PRECISION NOT NULL,
                delivered BOOLEAN NOT NULL DEFAULT FALSE,
                PRIMARY KEY (principal, seq),
                UNIQUE (principal, alert_id)
            );
            CREATE INDEX push_queue_enqueued ON push_queue (enqueued_at);
            CREATE TABLE principal_counters (
                principal TEXT PRIMARY KEY,
                push_seq BIGINT NOT NULL DEFAULT 0,
                push_queued BIGINT NOT NULL DEFAULT 0,
                poll_queued BIGINT NOT NULL DEFAULT 0
            )
            """,
        ),
        (
            2,
            # a cluster worker reads the alerts of its markets (PgAlertStore.active_in)
            "CREATE INDEX alerts_market ON alerts (symbol, interval)",
        ),
        (
            3,
            """
            CREATE TABLE alert_actions (
                alert_id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                client_order_id TEXT,
                state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
                outcome TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL
            );
            CREATE INDEX alert_actions_pending ON alert_actions (at) WHERE state = 'pending'
            """,
        ),
        (
            4,
            """
            CREATE TABLE outbox (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                channel TEXT NOT NULL,
                notification_id TEXT NOT NULL,
                principal TEXT NOT NULL,
                payload TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_at DOUBLE PRECISION NOT NULL,
                last_error TEXT,
                done_at DOUBLE PRECISION,
                UNIQUE (channel, notification_id)
            );
            CREATE INDEX outbox_pending ON outbox (channel, id) WHERE state = 'pending';
            CREATE INDEX outbox_notification ON outbox (notification_id) WHERE state = 'pending'
            """,
        ),
        (
            5,
            "CREATE INDEX outbox_principal_pending ON outbox (channel, principal, id) WHERE state = 'pending'",
        ),
    ),
)
