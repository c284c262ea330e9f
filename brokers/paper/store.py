"""The paper broker's SQLite tables and the SQL that reads and writes them.

Owns the ``brokers.paper.broker`` migrations (step 1: balances, orders, trades; step 2: the stop and
trailing state of conditional orders — ``stop_price``, ``trailing_delta``, ``triggered``,
``tracking``, ``extreme`` — the funds each open order holds (``reserved``), list membership and
the ``paper_lists`` table), and the conversions from rows to the broker models.  No trading
rules live here (see :mod:`brokers.paper.account`, :mod:`brokers.paper.stops` and :mod:`brokers.paper.lists`).
Every function takes the open transaction (an aiosqlite :class:`~aiosqlite.Connection`) and reads
rows as :class:`sqlite3.Row`; :func:`order_row` and :func:`list_row` are for rows that must exist (a
missing one is a broken invariant: :class:`LookupError`), :func:`find_order` and :func:`find_list` for
rows that may not.
"""

from __future__ import annotations

import time
from decimal import Decimal
from sqlite3 import Row

from aiosqlite import Connection

from brokers.models import ExchangeList, ExchangeOrder, Fill, OrderRequest
from storage import Migrations

MIGRATIONS = Migrations(
    "brokers.paper.broker",
    (
        (
            1,
            """
            CREATE TABLE paper_balances (asset TEXT PRIMARY KEY, free TEXT NOT NULL, locked TEXT NOT NULL);
            CREATE TABLE paper_orders (
                client_order_id TEXT PRIMARY KEY,
                order_id INTEGER NOT NULL,
                symbol TEXT NOT NULL,
                side TEXT NOT NULL,
                type TEXT NOT NULL,
                time_in_force TEXT,
                quantity TEXT NOT NULL,
                price TEXT,
                status TEXT NOT NULL,
                executed_qty TEXT NOT NULL DEFAULT '0',
                cumulative_quote TEXT NOT NULL DEFAULT '0',
                created_ms INTEGER NOT NULL,
                updated_ms INTEGER NOT NULL
            );
            CREATE TABLE paper_trades (
                trade_id INTEGER PRIMARY KEY AUTOINCREMENT,
                client_order_id TEXT NOT NULL,
                symbol TEXT NOT NULL,
                side TEXT NOT NULL,
                quantity TEXT NOT NULL,
                price TEXT NOT NULL,
                commission TEXT NOT NULL,
                commission_asset TEXT NOT NULL,
                time_ms INTEGER NOT NULL
            )
            """,
        ),
        (
            2,
            """
            ALTER TABLE paper_orders ADD COLUMN stop_price TEXT;
            ALTER TABLE paper_orders ADD COLUMN trailing_delta INTEGER;
            ALTER TABLE paper_orders ADD COLUMN list_client_id TEXT;
            ALTER TABLE paper_orders ADD COLUMN triggered INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE paper_orders ADD COLUMN tracking INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE paper_orders ADD COLUMN extreme TEXT;
            ALTER TABLE paper_orders ADD COLUMN reserved TEXT;
            CREATE INDEX paper_orders_open ON paper_orders (symbol, status);
            CREATE TABLE paper_lists (
                list_client_id TEXT PRIMARY KEY,
                list_id INTEGER NOT NULL,
                kind TEXT NOT NULL,
                symbol TEXT NOT NULL,
                contingency TEXT NOT NULL,
                status_type TEXT NOT NULL,
                order_status TEXT NOT NULL,
                working_id TEXT,
                take_profit_id TEXT NOT NULL,
                stop_id TEXT NOT NULL,
                created_ms INTEGER NOT NULL,
                updated_ms INTEGER NOT NULL
            )
            """,
        ),
    ),
)

OPEN_STATUSES = ("NEW", "PARTIALLY_FILLED")
_ORDER_COLUMNS = frozenset(
    {
        "status", "executed_qty", "cumulative_quote", "updated_ms", "triggered", "tracking", "extreme", "reserved",
    }
)  # fmt: skip
_LIST_COLUMNS = frozenset({"contingency", "status_type", "order_status", "updated_ms"})
Column = Decimal | bool | int | str | None
"""A value :func:`update_order` / :func:`update_list` writes (a Decimal as text, a bool as 0/1)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def text(x: Decimal | None) -> str | None:
    return None if x is None else str(x)


async def balance(tx: Connection, asset: str) -> tuple[Decimal, Decimal]:
    async with tx.execute("SELECT free, locked FROM paper_balances WHERE asset = ?", (asset,)) as cur:
        row = await cur.fetchone()
    return (Decimal(row["free"]), Decimal(row["locked"])) if row else (Decimal(0), Decimal(0))


async def set_balance(tx: Connection, asset: str, free: Decimal, locked: Decimal) -> None:
    await tx.execute(
        "INSERT INTO paper_balances (asset, free, locked) VALUES (?, ?, ?)"
        " ON CONFLICT (asset) DO UPDATE SET free = excluded.free, locked = excluded.locked",
        (asset, str(free), str(locked)),
    )


async def insert_order(
    tx: Connection,
    req: OrderRequest,
    qty: Decimal,
    status: str,
    now: int,
    *,
    reserved: Decimal = Decimal(0),
    tracking: bool = False,
    extreme: Decimal | None = None,
) -> int:
    order_id = await _scalar(tx, "SELECT COALESCE(MAX(order_id), 0) + 1 AS n FROM paper_orders")
    await tx.execute(
        "INSERT INTO paper_orders (client_order_id, order_id, symbol, side, type, time_in_force, quantity, price,"
        " status, created_ms, updated_ms, stop_price, trailing_delta, list_client_id, tracking, extreme, reserved)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            req.client_order_id, order_id, req.symbol, req.side, req.type, req.time_in_force, str(qty),
            text(req.price), status, now, now, text(req.stop_price), req.trailing_delta, req.list_client_id,
            int(tracking), text(extreme), str(reserved),
        ),
    )  # fmt: skip
    return order_id


async def update_order(tx: Connection, client_order_id: str, **fields: Column) -> None:
    """Set columns of one order (``status``, ``reserved``, ``tracking``, ``extreme``, …)."""
    assert fields and set(fields) <= _ORDER_COLUMNS, fields
    values = [str(v) if isinstance(v, Decimal) else (int(v) if isinstance(v, bool) else v) for v in fields.values()]
    sets = ", ".join(f"{k} = ?" for k in fields)
    await tx.execute(f"UPDATE paper_orders SET {sets} WHERE client_order_id = ?", (*values, client_order_id))


async def find_order(tx: Connection, client_order_id: str) -> Row | None:
    async with tx.execute("SELECT * FROM paper_orders WHERE client_order_id = ?", (client_order_id,)) as cur:
        return await cur.fetchone()


async def order_row(tx: Connection, client_order_id: str) -> Row:
    """An order that must exist (one this account placed: a list's leg, an open order's id)."""
    row = await find_order(tx, client_order_id)
    if row is None:
        raise LookupError(f"paper order {client_order_id} is not in paper_orders")
    return row


async def open_stop_count(tx: Connection, symbol: str, stop_types: frozenset[str]) -> int:
    """How many of ``symbol``'s orders of ``stop_types`` are open and untriggered (status NEW)."""
    placeholders = ", ".join("?" for _ in stop_types)
    return await _scalar(
        tx,
        f"SELECT COUNT(*) AS n FROM paper_orders WHERE symbol = ? AND status = 'NEW' AND type IN ({placeholders})",
        (symbol, *sorted(stop_types)),
    )


async def insert_trade(tx: Connection, fill: Fill) -> int:
    cur = await tx.execute(
        "INSERT INTO paper_trades (client_order_id, symbol, side, quantity, price, commission,"
        " commission_asset, time_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            fill.client_order_id, fill.symbol, fill.side, str(fill.quantity), str(fill.price), str(fill.commission),
            fill.commission_asset, fill.time_ms,
        ),
    )  # fmt: skip
    return int(cur.lastrowid or 0)


def reserved_of(row: Row) -> Decimal:
    """The funds an open order holds (quote for a BUY, base for a SELL); rows from before step 2
    hold a LIMIT order's ``quantity × price`` or ``quantity``."""
    if row["reserved"] is not None:
        return Decimal(row["reserved"])
    if row["status"] not in OPEN_STATUSES:
        return Decimal(0)
    qty = Decimal(row["quantity"])
    return qty * Decimal(row["price"]) if row["side"] == "BUY" else qty


def request_of(row: Row) -> OrderRequest:
    return OrderRequest(
        symbol=row["symbol"],
        side=row["side"],
        type=row["type"],
        client_order_id=row["client_order_id"],
        quantity=Decimal(row["quantity"]),
        price=None if row["price"] is None else Decimal(row["price"]),
        time_in_force=row["time_in_force"],
        stop_price=None if row["stop_price"] is None else Decimal(row["stop_price"]),
        trailing_delta=row["trailing_delta"],
        list_client_id=row["list_client_id"],
    )


def exchange_order(row: Row, fills: tuple[Fill, ...] = ()) -> ExchangeOrder:
    return ExchangeOrder(
        symbol=row["symbol"],
        client_order_id=row["client_order_id"],
        status=row["status"],
        side=row["side"],
        type=row["type"],
        orig_qty=Decimal(row["quantity"]),
        executed_qty=Decimal(row["executed_qty"]),
        cumulative_quote=Decimal(row["cumulative_quote"]),
        price=None if row["price"] is None else Decimal(row["price"]),
        exchange_order_id=str(row["order_id"]),
        time_in_force=row["time_in_force"],
        update_time_ms=int(row["updated_ms"]),
        fills=fills,
        stop_price=None if row["stop_price"] is None else Decimal(row["stop_price"]),
        trailing_delta=row["trailing_delta"],
        list_client_id=row["list_client_id"],
        triggered=bool(row["triggered"]),
    )


def fill_of(r: Row) -> Fill:
    return Fill(
        int(r["trade_id"]), r["symbol"], r["side"], r["client_order_id"], Decimal(r["quantity"]),
        Decimal(r["price"]), Decimal(r["commission"]), r["commission_asset"], int(r["time_ms"]),
    )  # fmt: skip


# --- order lists -------------------------------------------------------------------------
async def insert_list(
    tx: Connection, *, list_client_id: str, kind: str, symbol: str, contingency: str, working_id: str | None,
    take_profit_id: str, stop_id: str, now: int,
) -> int:  # fmt: skip
    list_id = await _scalar(tx, "SELECT COALESCE(MAX(list_id), 0) + 1 AS n FROM paper_lists")
    await tx.execute(
        "INSERT INTO paper_lists (list_client_id, list_id, kind, symbol, contingency, status_type, order_status,"
        " working_id, take_profit_id, stop_id, created_ms, updated_ms)"
        " VALUES (?, ?, ?, ?, ?, 'EXEC_STARTED', 'EXECUTING', ?, ?, ?, ?, ?)",
        (list_client_id, list_id, kind, symbol, contingency, working_id, take_profit_id, stop_id, now, now),
    )
    return list_id


async def update_list(tx: Connection, list_client_id: str, **fields: Column) -> None:
    assert fields and set(fields) <= _LIST_COLUMNS, fields
    sets = ", ".join(f"{k} = ?" for k in fields)
    await tx.execute(f"UPDATE paper_lists SET {sets} WHERE list_client_id = ?", (*fields.values(), list_client_id))


async def find_list(tx: Connection, list_client_id: str) -> Row | None:
    async with tx.execute("SELECT * FROM paper_lists WHERE list_client_id = ?", (list_client_id,)) as cur:
        return await cur.fetchone()


async def list_row(tx: Connection, list_client_id: str) -> Row:
    """A list that must exist (one this account placed)."""
    row = await find_list(tx, list_client_id)
    if row is None:
        raise LookupError(f"paper list {list_client_id} is not in paper_lists")
    return row


async def open_lists(tx: Connection) -> list[Row]:
    async with tx.execute("SELECT * FROM paper_lists WHERE status_type != 'ALL_DONE' ORDER BY list_id") as cur:
        return list(await cur.fetchall())


async def _scalar(tx: Connection, sql: str, params: tuple[str, ...] = ()) -> int:
    """The ``n`` of a one-row aggregate query (a next id, a count)."""
    async with tx.execute(sql, params) as cur:
        row = await cur.fetchone()
    assert row is not None  # an aggregate always answers one row
    return int(row["n"])


async def list_view(tx: Connection, row: Row) -> ExchangeList:
    """The list with its legs (working first, then take-profit and stop) as the broker models say."""
    ids = [i for i in (row["working_id"], row["take_profit_id"], row["stop_id"]) if i]
    legs = []
    for cid in ids:
        leg = await find_order(tx, cid)
        if leg is not None:
            legs.append(exchange_order(leg))
    return ExchangeList(
        symbol=row["symbol"],
        list_client_id=row["list_client_id"],
        contingency_type=row["contingency"],
        list_status_type=row["status_type"],
        list_order_status=row["order_status"],
        orders=tuple(legs),
        exchange_list_id=str(row["list_id"]),
        transaction_time_ms=int(row["updated_ms"]),
    )
