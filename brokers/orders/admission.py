"""Admitting an order intent: what an order counts against the daily limit, and the check-and-insert.

:func:`admit_in` runs inside the caller's transaction on the database thread: it refuses a
used client order id or a daily-limit breach, else inserts the intent (PENDING_SUBMIT), so
the sum and the insert are one serialized step and concurrent orders cannot all pass a
limit only one of them fits under.  It takes a plain connection so a later order path can
commit an intent together with its own rows (an alert firing, a schedule run).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from brokers.halt import check_not_halted
from brokers.models import TERMINAL, OrderRequest
from brokers.suspensions import check_principal_in


def _text(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


INSERT_INTENT = (
    "INSERT INTO orders (client_order_id, broker, symbol, side, type, time_in_force, quantity,"
    " quote_quantity, price, status, created_at, updated_at, owner, notional, stop_price, trailing_delta,"
    " list_client_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'PENDING_SUBMIT', ?, ?, ?, ?, ?, ?, ?)"
)
DAILY_SQL = (
    "SELECT status, executed_qty, cumulative_quote, quantity, price, notional, list_client_id, leg FROM orders"
    " WHERE broker = ? AND created_at >= ? AND status != 'REJECTED'"
)
BRACKETS_RESERVED_SQL = (
    "SELECT take_profit_notional, stop_notional FROM order_lists"
    " WHERE broker = ? AND created_at >= ? AND bracket_state = 'waiting'"
)


def intent_params(broker: str, req: OrderRequest, notional: Decimal | None, now: float) -> tuple[Any, ...]:
    return (
        req.client_order_id,
        broker,
        req.symbol,
        req.side,
        req.type,
        req.time_in_force,
        _text(req.quantity),
        _text(req.quote_quantity),
        _text(req.price),
        now,
        now,
        req.owner,
        _text(notional),
        _text(req.stop_price),
        req.trailing_delta,
        req.list_client_id,
    )


def committed_value(
    status: str,
    executed_qty: str,
    cumulative_quote: str,
    quantity: str | None,
    price: str | None,
    notional: str | None,
) -> Decimal:
    """What one order counts against the daily limit.

    Rejected: nothing.  Finished with fills: what it traded.  Otherwise (pending, open, or
    finished unfilled): the larger of what it traded so far and the value it was admitted at
    (for a row without one, quantity × limit price).
    """
    if status == "REJECTED":
        return Decimal(0)
    traded = Decimal(cumulative_quote)
    if status in TERMINAL and Decimal(executed_qty) > 0:
        return traded
    if notional is not None:
        reserved = Decimal(notional)
    elif quantity is not None and price is not None:
        reserved = Decimal(quantity) * Decimal(price)
    else:
        reserved = Decimal(0)
    return max(traded, reserved)


def daily_used(conn: sqlite3.Connection, broker: str, since: float) -> Decimal:
    """Today's committed value: every order's :func:`committed_value`, where the take-profit and
    stop legs of one order list count once together (the larger of the two — only one of an OCO
    pair can fill), plus the OCO reserved by each daemon bracket still waiting for its entry's fill
    (its larger leg; once placed its legs count instead, at the same value — never both)."""
    total = Decimal(0)
    pairs: dict[str, Decimal] = {}
    for r in conn.execute(DAILY_SQL, (broker, since)).fetchall():
        value = committed_value(r[0], r[1], r[2], r[3], r[4], r[5])
        if r[6] is not None and r[7] in ("take_profit", "stop"):
            pairs[r[6]] = max(pairs.get(r[6], Decimal(0)), value)
        else:
            total += value
    for tp, sl in conn.execute(BRACKETS_RESERVED_SQL, (broker, since)).fetchall():
        total += max(Decimal(tp or 0), Decimal(sl or 0))
    return total + sum(pairs.values(), Decimal(0))


@dataclass(frozen=True, slots=True)
class Admission:
    """The outcome of :func:`admit_in`: recorded, or why not (with today's committed value before it)."""

    recorded: bool
    used: Decimal
    duplicate: bool = False


def admit_in(
    conn: sqlite3.Connection,
    broker: str,
    req: OrderRequest,
    notional: Decimal,
    now: float,
    *,
    daily_limit: Decimal | None,
    since: float,
) -> Admission:
    """Inside the caller's transaction: refuse a used client order id or a daily-limit breach, else insert.

    ``conn`` is the database thread's sqlite3 connection with a transaction open
    (:meth:`~storage.sqlite.Database.run_transaction`), so the sum and the insert are one step.
    """
    check_not_halted(conn)  # the operator's halt switch (brokers.halt): raises TradingHalted
    check_principal_in(conn, req.owner)  # suspended / revoked principal (brokers.suspensions)
    if conn.execute("SELECT 1 FROM orders WHERE client_order_id = ?", (req.client_order_id,)).fetchone():
        return Admission(False, Decimal(0), duplicate=True)
    used = Decimal(0)
    if daily_limit is not None:
        used = daily_used(conn, broker, since)
        if used + notional > daily_limit:
            return Admission(False, used)
    conn.execute(INSERT_INTENT, intent_params(broker, req, notional, now))
    return Admission(True, used)
