"""Order lists in SQLite: the ``order_lists`` table (migration 3) and the list / bracket transactions.

Owns three one-transaction steps, each run on the database thread with the daily limit summed
and the rows inserted together (so concurrent admissions are serialized, as in
:mod:`brokers.orders.admission`):

- :func:`admit_list_in` — an OCO or OTOCO: the list row and the intents of all its legs;
- :func:`admit_bracket_in` — an entry order and its pending bracket (the OCO the daemon places
  once the entry fills), counted with the entry at admission;
- :func:`claim_bracket_in` — the claim of a waiting bracket whose entry has filled: its legs'
  intents are inserted (at the values admitted with the entry, dated with the bracket, so they
  are not counted again) and the bracket moves to ``claimed`` before anything is sent, so it is
  placed at most once; a crash after the claim is settled by looking the list up by its client id;
- :func:`rearm_bracket_in` — the undoing of a claim whose send the exchange refused for its order
  rate (HTTP 429, -1015: nothing reached the book): back to ``waiting``, its legs' never-sent
  intents removed, so the next claim inserts them again and the daily sum counts the bracket's
  reservation, not its legs.

Each step checks the operator's halt switch (:func:`brokers.halt.check_not_halted`) first; the two
admissions also refuse a suspended or revoked principal (:func:`brokers.suspensions.check_principal_in`),
the claim of a filled entry's exit does not (it only reduces a position).
Leg rows carry ``list_client_id`` and ``leg`` (working, take_profit, stop); the daily sum counts a
list's take-profit and stop legs once, at the larger value (:func:`brokers.orders.admission.daily_used`).
Lists learnt from the exchange (placed elsewhere) have no owner.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from brokers.halt import check_not_halted
from brokers.models import TERMINAL, ExchangeList, ListRequest, OrderRequest
from brokers.orders.admission import INSERT_INTENT, Admission, daily_used, intent_params
from brokers.suspensions import check_principal_in
from storage import Database

INSERT_LEG = (
    "INSERT INTO orders (client_order_id, broker, symbol, side, type, time_in_force, quantity, quote_quantity,"
    " price, status, created_at, updated_at, owner, notional, stop_price, trailing_delta, list_client_id, leg)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, 'PENDING_SUBMIT', ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_LIST = (
    "INSERT INTO order_lists (list_client_id, broker, kind, symbol, side, owner, status, entry_client_id, quantity,"
    " take_profit_price, stop_price, stop_limit_price, take_profit_notional, stop_notional, bracket_state,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
LIVE_LIST_STATUSES = ("PENDING", "EXECUTING")


def _t(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


def _leg_params(broker: str, req: OrderRequest, leg: str, notional: Decimal | None, now: float) -> tuple[Any, ...]:
    return (
        req.client_order_id, broker, req.symbol, req.side, req.type, req.time_in_force, _t(req.quantity),
        _t(req.price), now, now, req.owner, _t(notional), _t(req.stop_price), req.trailing_delta,
        req.list_client_id, leg,
    )  # fmt: skip


def legs_of(req: ListRequest) -> list[tuple[OrderRequest, str]]:
    """The list's orders with their roles, working order first."""
    legs = [(req.take_profit, "take_profit"), (req.stop, "stop")]
    return ([(req.working, "working")] if req.working is not None else []) + legs


def role_of(order_type: str, kind: str) -> str | None:
    """A learnt leg's role from its type (None when the type is not known)."""
    if order_type in ("STOP_LOSS", "STOP_LOSS_LIMIT"):
        return "stop"
    if order_type in ("TAKE_PROFIT", "TAKE_PROFIT_LIMIT") or (order_type == "LIMIT_MAKER" and kind == "OCO"):
        return "take_profit"
    if order_type in ("LIMIT", "LIMIT_MAKER"):
        return "working"
    return None


@dataclass(frozen=True, slots=True)
class ListRow:
    list_client_id: str
    broker: str
    kind: str
    symbol: str
    side: str | None
    owner: str | None
    status: str
    exchange_list_id: str | None
    entry_client_id: str | None
    quantity: Decimal | None
    take_profit_price: Decimal | None
    stop_price: Decimal | None
    stop_limit_price: Decimal | None
    take_profit_notional: Decimal | None
    stop_notional: Decimal | None
    bracket_state: str | None
    """None: not a daemon bracket; waiting, claimed, placed, void, rejected."""
    created_at: float
    updated_at: float


def _dec(v: Any) -> Decimal | None:
    return None if v is None else Decimal(v)


def _list_row(r: Any) -> ListRow:
    return ListRow(
        list_client_id=r["list_client_id"], broker=r["broker"], kind=r["kind"], symbol=r["symbol"], side=r["side"],
        owner=r["owner"], status=r["status"], exchange_list_id=r["exchange_list_id"],
        entry_client_id=r["entry_client_id"], quantity=_dec(r["quantity"]),
        take_profit_price=_dec(r["take_profit_price"]), stop_price=_dec(r["stop_price"]),
        stop_limit_price=_dec(r["stop_limit_price"]), take_profit_notional=_dec(r["take_profit_notional"]),
        stop_notional=_dec(r["stop_notional"]), bracket_state=r["bracket_state"],
        created_at=float(r["created_at"]), updated_at=float(r["updated_at"]),
    )  # fmt: skip


def _taken(conn: sqlite3.Connection, list_client_id: str, order_ids: list[str]) -> bool:
    if conn.execute("SELECT 1 FROM order_lists WHERE list_client_id = ?", (list_client_id,)).fetchone():
        return True
    marks = ",".join("?" * len(order_ids))
    return conn.execute(f"SELECT 1 FROM orders WHERE client_order_id IN ({marks})", order_ids).fetchone() is not None


def admit_list_in(
    conn: sqlite3.Connection,
    broker: str,
    req: ListRequest,
    notionals: dict[str, Decimal],
    counted: Decimal,
    now: float,
    *,
    daily_limit: Decimal | None,
    since: float,
) -> Admission:
    """Inside the caller's transaction: refuse used ids or a daily-limit breach (``counted`` is what the
    list adds: its working order plus its larger exit leg), else insert the list and all its legs."""
    check_not_halted(conn)  # the operator's halt switch (brokers.halt): raises TradingHalted
    check_principal_in(conn, req.owner)  # suspended / revoked principal (brokers.suspensions)
    legs = legs_of(req)
    if _taken(conn, req.list_client_id, [leg.client_order_id for leg, _ in legs]):
        return Admission(False, Decimal(0), duplicate=True)
    used = Decimal(0)
    if daily_limit is not None:
        used = daily_used(conn, broker, since)
        if used + counted > daily_limit:
            return Admission(False, used)
    conn.execute(
        INSERT_LIST,
        (req.list_client_id, broker, req.kind, req.symbol, req.stop.side, req.owner, None,
         _t(req.stop.quantity), _t(req.take_profit.price or req.take_profit.stop_price),
         _t(req.stop.stop_price), _t(req.stop.price), _t(notionals.get(req.take_profit.client_order_id)),
         _t(notionals.get(req.stop.client_order_id)), None, now, now),
    )  # fmt: skip
    for leg, role in legs:
        conn.execute(INSERT_LEG, _leg_params(broker, leg, role, notionals.get(leg.client_order_id), now))
    return Admission(True, used)


@dataclass(frozen=True, slots=True)
class BracketPlan:
    """A bracket to record with its entry: the exit OCO's ids, prices and admitted leg values."""

    list_client_id: str
    side: str
    quantity: Decimal
    take_profit_price: Decimal
    stop_price: Decimal
    stop_limit_price: Decimal | None
    take_profit_notional: Decimal
    stop_notional: Decimal

    @property
    def reserved(self) -> Decimal:
        return max(self.take_profit_notional, self.stop_notional)


def admit_bracket_in(
    conn: sqlite3.Connection,
    broker: str,
    entry: OrderRequest,
    entry_notional: Decimal,
    plan: BracketPlan,
    now: float,
    *,
    daily_limit: Decimal | None,
    since: float,
) -> Admission:
    """Inside the caller's transaction: the entry intent and its waiting bracket, counted together."""
    check_not_halted(conn)  # the operator's halt switch (brokers.halt): raises TradingHalted
    check_principal_in(conn, entry.owner)  # suspended / revoked principal (brokers.suspensions)
    if _taken(conn, plan.list_client_id, [entry.client_order_id]):
        return Admission(False, Decimal(0), duplicate=True)
    used = Decimal(0)
    if daily_limit is not None:
        used = daily_used(conn, broker, since)
        if used + entry_notional + plan.reserved > daily_limit:
            return Admission(False, used)
    conn.execute(INSERT_INTENT, intent_params(broker, entry, entry_notional, now))
    conn.execute(
        INSERT_LIST,
        (plan.list_client_id, broker, "OCO", entry.symbol, plan.side, entry.owner, entry.client_order_id,
         str(plan.quantity), str(plan.take_profit_price), str(plan.stop_price), _t(plan.stop_limit_price),
         str(plan.take_profit_notional), str(plan.stop_notional), "waiting", now, now),
    )  # fmt: skip
    return Admission(True, used)


def claim_bracket_in(conn: sqlite3.Connection, broker: str, req: ListRequest, now: float) -> bool:
    """Inside the caller's transaction: claim a waiting bracket whose entry is done with something filled
    (FILLED, or cancelled / expired after a partial fill) and insert its legs."""
    row = conn.execute(
        "SELECT l.bracket_state, l.created_at, l.take_profit_notional, l.stop_notional, o.status, o.executed_qty"
        " FROM order_lists l JOIN orders o ON o.client_order_id = l.entry_client_id WHERE l.list_client_id = ?",
        (req.list_client_id,),
    ).fetchone()
    done_with_fills = row is not None and (row[4] == "FILLED" or (row[4] in TERMINAL and bool(_dec(row[5]))))
    if row is None or row[0] != "waiting" or not done_with_fills:
        return False
    check_not_halted(conn)  # halted: the bracket stays waiting; reconciliation places it after the resume
    # no principal check: the exit of a filled entry only reduces a position (brokers/suspensions.py)
    created = float(row[1])
    values = {"take_profit": _dec(row[2]), "stop": _dec(row[3])}
    for leg, role in legs_of(req):
        if conn.execute("SELECT 1 FROM orders WHERE client_order_id = ?", (leg.client_order_id,)).fetchone():
            continue
        conn.execute(INSERT_LEG, _leg_params(broker, leg, role, values.get(role), created))
    conn.execute(
        "UPDATE order_lists SET bracket_state = 'claimed', updated_at = ? WHERE list_client_id = ?",
        (now, req.list_client_id),
    )
    return True


def rearm_bracket_in(conn: sqlite3.Connection, list_client_id: str, now: float) -> bool:
    """Inside the caller's transaction: a ``claimed`` bracket the exchange did not place (a rate-limit
    refusal) goes back to ``waiting`` and its legs' ``PENDING_SUBMIT`` intents are deleted; False (and
    nothing changed) when it is not a claimed bracket still pending."""
    moved = conn.execute(
        "UPDATE order_lists SET bracket_state = 'waiting', updated_at = ?"
        " WHERE list_client_id = ? AND bracket_state = 'claimed' AND status = 'PENDING'",
        (now, list_client_id),
    ).rowcount
    if not moved:
        return False
    conn.execute("DELETE FROM orders WHERE list_client_id = ? AND status = 'PENDING_SUBMIT'", (list_client_id,))
    return True


class ListStore:
    """The ``order_lists`` rows and the list membership of order rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def admit_list(self, broker: str, req: ListRequest, notionals: dict[str, Decimal], counted: Decimal,
                         now: float, *, daily_limit: Decimal | None, since: float) -> Admission:  # fmt: skip
        return await self.db.run_transaction(
            lambda c: admit_list_in(c, broker, req, notionals, counted, now, daily_limit=daily_limit, since=since),
            durable=True,
        )

    async def admit_bracket(self, broker: str, entry: OrderRequest, entry_notional: Decimal, plan: BracketPlan,
                            now: float, *, daily_limit: Decimal | None, since: float) -> Admission:  # fmt: skip
        return await self.db.run_transaction(
            lambda c: admit_bracket_in(
                c, broker, entry, entry_notional, plan, now, daily_limit=daily_limit, since=since
            ),
            durable=True,
        )

    async def claim_bracket(self, broker: str, req: ListRequest, now: float) -> bool:
        return await self.db.run_transaction(lambda c: claim_bracket_in(c, broker, req, now), durable=True)

    async def rearm_bracket(self, list_client_id: str, now: float) -> bool:
        """:func:`rearm_bracket_in` in one transaction."""
        return await self.db.run_transaction(lambda c: rearm_bracket_in(c, list_client_id, now), durable=True)

    async def get(self, list_client_id: str) -> ListRow | None:
        r = await self.db.fetchone("SELECT * FROM order_lists WHERE list_client_id = ?", (list_client_id,))
        return None if r is None else _list_row(r)

    async def bracket_of(self, entry_client_id: str) -> ListRow | None:
        r = await self.db.fetchone("SELECT * FROM order_lists WHERE entry_client_id = ?", (entry_client_id,))
        return None if r is None else _list_row(r)

    async def brackets_of(self, entry_ids: list[str]) -> dict[str, ListRow]:
        """The brackets of these entries, by entry client id."""
        if not entry_ids:
            return {}
        marks = ",".join("?" * len(entry_ids))
        rows = await self.db.fetchall(f"SELECT * FROM order_lists WHERE entry_client_id IN ({marks})", entry_ids)
        return {r["entry_client_id"]: _list_row(r) for r in rows}

    async def leg_ids(self, list_client_id: str) -> list[str]:
        rows = await self.db.fetchall("SELECT client_order_id FROM orders WHERE list_client_id = ?", (list_client_id,))
        return [r["client_order_id"] for r in rows]

    async def with_state(self, broker: str, *states: str) -> list[ListRow]:
        marks = ",".join("?" * len(states))
        rows = await self.db.fetchall(
            f"SELECT * FROM order_lists WHERE broker = ? AND bracket_state IN ({marks}) ORDER BY created_at",
            (broker, *states),
        )
        return [_list_row(r) for r in rows]

    async def unresolved(self, broker: str) -> list[ListRow]:
        """Lists not known to be done, except daemon brackets that have not been sent yet."""
        rows = await self.db.fetchall(
            "SELECT * FROM order_lists WHERE broker = ? AND status IN ('PENDING', 'EXECUTING')"
            " AND (bracket_state IS NULL OR bracket_state = 'placed') ORDER BY created_at",
            (broker,),
        )
        return [_list_row(r) for r in rows]

    async def by_ids(self, ids: set[str]) -> dict[str, ListRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(f"SELECT * FROM order_lists WHERE list_client_id IN ({marks})", tuple(ids))
        return {r["list_client_id"]: _list_row(r) for r in rows}

    async def set_state(
        self, list_client_id: str, now: float, *, status: str | None = None, bracket_state: str | None = None,
        exchange_list_id: str | None = None,
    ) -> None:  # fmt: skip
        """Move a list forward: a done list (ALL_DONE, REJECTED, VOID) is never reopened."""
        await self.db.execute(
            "UPDATE order_lists SET status = CASE WHEN status IN ('ALL_DONE', 'REJECTED', 'VOID') THEN status"
            " ELSE COALESCE(?, status) END, bracket_state = COALESCE(?, bracket_state),"
            " exchange_list_id = COALESCE(?, exchange_list_id), updated_at = ? WHERE list_client_id = ?",
            (status, bracket_state, exchange_list_id, now, list_client_id),
        )

    async def learn(self, broker: str, lst: ExchangeList, now: float) -> bool:
        """Record the exchange's view of a list: insert it (no owner) when unknown, and mark its legs'
        membership; returns whether it was new."""
        status = "REJECTED" if lst.list_order_status == "REJECT" else ("ALL_DONE" if lst.done else "EXECUTING")
        kind = "OTOCO" if lst.contingency_type == "OTO" else lst.contingency_type
        async with self.db.transaction() as tx:
            async with tx.execute("SELECT 1 FROM order_lists WHERE list_client_id = ?", (lst.list_client_id,)) as cur:
                known = await cur.fetchone() is not None
            if not known:
                await tx.execute(
                    "INSERT INTO order_lists (list_client_id, broker, kind, symbol, owner, status, exchange_list_id,"
                    " created_at, updated_at) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                    (lst.list_client_id, broker, kind, lst.symbol, status, lst.exchange_list_id, now, now),
                )
            else:
                await tx.execute(
                    "UPDATE order_lists SET status = CASE WHEN status IN ('ALL_DONE', 'REJECTED', 'VOID') THEN status"
                    " ELSE ? END, exchange_list_id = COALESCE(exchange_list_id, ?), updated_at = ?"
                    " WHERE list_client_id = ?",
                    (status, lst.exchange_list_id, now, lst.list_client_id),
                )
            for o in lst.orders:
                await tx.execute(
                    "UPDATE orders SET list_client_id = COALESCE(list_client_id, ?), leg = COALESCE(leg, ?)"
                    " WHERE client_order_id = ?",
                    (lst.list_client_id, role_of(o.type, kind), o.client_order_id),
                )
        return not known
