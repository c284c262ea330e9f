"""The brokers package's migration step 3: protective orders and order lists (SQL only).

Adds to ``orders`` the trigger fields of stop / take-profit orders (``stop_price``,
``trailing_delta``, ``triggered``) and the order-list membership of a leg
(``list_client_id`` and ``leg``: working, take_profit or stop), and creates ``order_lists``:
one row per order list (OCO, OTOCO) with its owner and status, and — for a bracket whose
OCO the daemon places after the entry fills — the pending-bracket record (``entry_client_id``,
the legs' prices, the values admitted for them and ``bracket_state``: waiting → claimed →
placed, or void / rejected).  Kept apart so :mod:`brokers.orders.store` stays small.
"""

from __future__ import annotations

MIGRATION_3 = """
ALTER TABLE orders ADD COLUMN stop_price TEXT;
ALTER TABLE orders ADD COLUMN trailing_delta INTEGER;
ALTER TABLE orders ADD COLUMN list_client_id TEXT;
ALTER TABLE orders ADD COLUMN leg TEXT;
ALTER TABLE orders ADD COLUMN triggered INTEGER NOT NULL DEFAULT 0;
CREATE INDEX orders_list ON orders (list_client_id);
CREATE TABLE order_lists (
    list_client_id TEXT PRIMARY KEY,
    broker TEXT NOT NULL,
    kind TEXT NOT NULL,
    symbol TEXT NOT NULL,
    side TEXT,
    owner TEXT,
    status TEXT NOT NULL,
    exchange_list_id TEXT,
    entry_client_id TEXT,
    quantity TEXT,
    take_profit_price TEXT,
    stop_price TEXT,
    stop_limit_price TEXT,
    take_profit_notional TEXT,
    stop_notional TEXT,
    bracket_state TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX order_lists_entry ON order_lists (entry_client_id);
CREATE INDEX order_lists_state ON order_lists (broker, bracket_state)
"""
"""List ``status``: PENDING (recorded, not answered), EXECUTING, ALL_DONE, REJECTED; a daemon
bracket's list stays PENDING until its OCO is placed."""
