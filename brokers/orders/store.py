"""The order tracker's SQLite tables: orders (keyed by our clientOrderId) and fills (by trade id).

An order row is written *before* its request is sent (status PENDING_SUBMIT), so a crash
between "recorded" and "answered" leaves a row that reconciliation resolves by asking the
exchange — the order is never sent twice.  Status only moves forward: an update that
would take a terminal order back to an open state is ignored.  Fills are keyed by
(broker, symbol, trade id), so a fill seen from the stream, from the order answer and from
reconciliation is stored once.

Ownership (migration 2): each order row names its ``owner``, the principal whose intent it
is.  Rows from before the migration, and orders learnt from the exchange (placed elsewhere),
have no owner: only an admin sees and cancels them.  The row also keeps the ``notional`` the
guard valued the order at, so an order that has not filled yet still counts against the
daily limit.  :func:`~brokers.orders.admission.admit_in` checks the daily limit and inserts the intent
in one transaction (see :meth:`OrderStore.admit_intent`), so concurrent orders cannot all pass a
limit only one of them fits under; it takes a plain connection so a future path can commit
an intent together with its own rows (an alert firing, a schedule run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from brokers.models import OPEN, TERMINAL, Actor, ExchangeOrder, Fill, OrderRequest
from brokers.orders.admission import INSERT_INTENT, Admission, admit_in, daily_used, intent_params
from brokers.orders.list_schema import MIGRATION_3
from storage import Database, Migrations

MIGRATIONS = Migrations(
    "brokers",
    (
        (
            1,
            """
            CREATE TABLE orders (
                client_order_id TEXT PRIMARY KEY,
                broker TEXT NOT NULL,
                symbol TEXT NOT NULL,
                side TEXT NOT NULL,
                type TEXT NOT NULL,
                time_in_force TEXT,
                quantity TEXT,
                quote_quantity TEXT,
                price TEXT,
                status TEXT NOT NULL,
                exchange_order_id TEXT,
                executed_qty TEXT NOT NULL DEFAULT '0',
                cumulative_quote TEXT NOT NULL DEFAULT '0',
                reject_reason TEXT,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            );
            CREATE INDEX orders_status ON orders (broker, status);
            CREATE INDEX orders_created ON orders (broker, created_at);
            CREATE TABLE fills (
                broker TEXT NOT NULL,
                symbol TEXT NOT NULL,
                trade_id INTEGER NOT NULL,
                client_order_id TEXT NOT NULL,
                side TEXT NOT NULL,
                quantity TEXT NOT NULL,
                price TEXT NOT NULL,
                commission TEXT NOT NULL,
                commission_asset TEXT NOT NULL,
                time_ms INTEGER NOT NULL,
                PRIMARY KEY (broker, symbol, trade_id)
            );
            CREATE INDEX fills_order ON fills (client_order_id)
            """,
        ),
        (
            2,
            """
            ALTER TABLE orders ADD COLUMN owner TEXT;
            ALTER TABLE orders ADD COLUMN notional TEXT;
            CREATE INDEX orders_owner ON orders (broker, owner, created_at)
            """,
        ),
        (3, MIGRATION_3),
    ),
)

_RANK = {"PENDING_SUBMIT": 0, "UNKNOWN": 1, "PENDING_NEW": 2, "NEW": 2, "PARTIALLY_FILLED": 3}


@dataclass(frozen=True, slots=True)
class OrderRow:
    client_order_id: str
    broker: str
    symbol: str
    side: str
    type: str
    time_in_force: str | None
    quantity: Decimal | None
    quote_quantity: Decimal | None
    price: Decimal | None
    status: str
    exchange_order_id: str | None
    executed_qty: Decimal
    cumulative_quote: Decimal
    reject_reason: str | None
    created_at: float
    updated_at: float
    owner: str | None = None
    """The principal whose order this is; None: the account's (admin only)."""
    notional: Decimal | None = None
    """The value the guard admitted the order at (None: not placed through the guard)."""
    stop_price: Decimal | None = None
    trailing_delta: int | None = None
    list_client_id: str | None = None
    """The order list this order is a leg of (migration 3); None: a single order."""
    leg: str | None = None
    """The leg's role in its list: working, take_profit or stop."""
    triggered: bool = False
    """A stop / take-profit order whose trigger has fired (it works on the book, or has filled)."""

    @property
    def avg_price(self) -> Decimal | None:
        return self.cumulative_quote / self.executed_qty if self.executed_qty > 0 else None


def _dec(v: Any) -> Decimal | None:
    return None if v is None else Decimal(v)


def _row(r: Any) -> OrderRow:
    return OrderRow(
        client_order_id=r["client_order_id"],
        broker=r["broker"],
        symbol=r["symbol"],
        side=r["side"],
        type=r["type"],
        time_in_force=r["time_in_force"],
        quantity=_dec(r["quantity"]),
        quote_quantity=_dec(r["quote_quantity"]),
        price=_dec(r["price"]),
        status=r["status"],
        exchange_order_id=r["exchange_order_id"],
        executed_qty=Decimal(r["executed_qty"]),
        cumulative_quote=Decimal(r["cumulative_quote"]),
        reject_reason=r["reject_reason"],
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        owner=r["owner"],
        notional=_dec(r["notional"]),
        stop_price=_dec(r["stop_price"]),
        trailing_delta=None if r["trailing_delta"] is None else int(r["trailing_delta"]),
        list_client_id=r["list_client_id"],
        leg=r["leg"],
        triggered=bool(r["triggered"]),
    )


def _s(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


def advances(old: str, new: str) -> bool:
    """Whether a status change from ``old`` to ``new`` moves forward (terminal states are final)."""
    if old in TERMINAL:
        return False
    if new in TERMINAL:
        return True
    return _RANK.get(new, 0) >= _RANK.get(old, 0)


class OrderStore:
    """Orders and fills of every broker."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record_intent(self, broker: str, req: OrderRequest, now: float, notional: Decimal | None = None) -> None:
        """Write the order as PENDING_SUBMIT before anything is sent (raises if the id exists); no limit check.

        Durable (fsynced before it returns): the order leaves the process after this commit.
        """
        async with self.db.transaction(durable=True) as tx:
            await tx.execute(INSERT_INTENT, intent_params(broker, req, notional, now))

    async def admit_intent(
        self,
        broker: str,
        req: OrderRequest,
        notional: Decimal,
        now: float,
        *,
        daily_limit: Decimal | None,
        since: float,
    ) -> Admission:
        """Check the daily limit and record the intent in one ``BEGIN IMMEDIATE`` transaction, one DB hop.

        Durable (fsynced before it returns): the order leaves the process after this commit.
        """
        return await self.db.run_transaction(
            lambda conn: admit_in(conn, broker, req, notional, now, daily_limit=daily_limit, since=since),
            durable=True,
        )

    async def set_status(self, client_order_id: str, status: str, now: float, reason: str | None = None) -> None:
        async with self.db.transaction() as tx:
            async with tx.execute("SELECT status FROM orders WHERE client_order_id = ?", (client_order_id,)) as cur:
                row = await cur.fetchone()
            if row is None or not advances(row["status"], status):
                return
            await tx.execute(
                "UPDATE orders SET status = ?, reject_reason = COALESCE(?, reject_reason), updated_at = ?"
                " WHERE client_order_id = ?",
                (status, reason, now, client_order_id),
            )

    async def apply(
        self, broker: str, update: ExchangeOrder, now: float
    ) -> tuple[OrderRow | None, str | None, list[Fill]]:
        """Apply the exchange's view: returns (row after, status before, fills that were new).

        An order the tracker did not know (placed elsewhere) is inserted.
        """
        async with self.db.transaction() as tx:
            async with tx.execute("SELECT * FROM orders WHERE client_order_id = ?", (update.client_order_id,)) as cur:
                found = await cur.fetchone()
            before = None if found is None else found["status"]
            if found is None:
                await tx.execute(
                    "INSERT INTO orders (client_order_id, broker, symbol, side, type, time_in_force, quantity,"
                    " price, status, exchange_order_id, executed_qty, cumulative_quote, reject_reason,"
                    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        update.client_order_id,
                        broker,
                        update.symbol,
                        update.side,
                        update.type,
                        update.time_in_force,
                        _s(update.orig_qty),
                        _s(update.price),
                        update.status,
                        update.exchange_order_id,
                        str(update.executed_qty),
                        str(update.cumulative_quote),
                        update.reject_reason,
                        now,
                        now,
                    ),
                )
            elif advances(before or "", update.status) or update.executed_qty > Decimal(found["executed_qty"]):
                status = update.status if advances(before or "", update.status) else before
                await tx.execute(
                    "UPDATE orders SET status = ?, exchange_order_id = COALESCE(?, exchange_order_id),"
                    " executed_qty = ?, cumulative_quote = ?, reject_reason = COALESCE(?, reject_reason),"
                    " quantity = COALESCE(quantity, ?), updated_at = ? WHERE client_order_id = ?",
                    (
                        status,
                        update.exchange_order_id,
                        str(max(update.executed_qty, Decimal(found["executed_qty"]))),
                        str(max(update.cumulative_quote, Decimal(found["cumulative_quote"]))),
                        update.reject_reason,
                        _s(update.orig_qty),
                        now,
                        update.client_order_id,
                    ),
                )
            await tx.execute(
                "UPDATE orders SET stop_price = COALESCE(stop_price, ?), trailing_delta = COALESCE(trailing_delta, ?),"
                " list_client_id = COALESCE(list_client_id, ?), triggered = MAX(triggered, ?)"
                " WHERE client_order_id = ?",
                (
                    _s(update.stop_price),
                    update.trailing_delta,
                    update.list_client_id,
                    int(update.triggered or update.executed_qty > 0),
                    update.client_order_id,
                ),
            )
            new_fills: list[Fill] = []
            for f in update.fills:
                cur = await tx.execute(
                    "INSERT OR IGNORE INTO fills (broker, symbol, trade_id, client_order_id, side, quantity, price,"
                    " commission, commission_asset, time_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        broker,
                        f.symbol,
                        f.trade_id,
                        f.client_order_id,
                        f.side,
                        str(f.quantity),
                        str(f.price),
                        str(f.commission),
                        f.commission_asset,
                        f.time_ms,
                    ),
                )
                if cur.rowcount:
                    new_fills.append(f)
            async with tx.execute("SELECT * FROM orders WHERE client_order_id = ?", (update.client_order_id,)) as cur:
                after = await cur.fetchone()
        return (None if after is None else _row(after)), before, new_fills

    async def add_fills(self, broker: str, fills: Sequence[Fill]) -> list[Fill]:
        """Store fills (from reconciliation); returns the ones not seen before.

        A fill naming no order we know by client id is matched by the exchange's order id: Binance's
        ``myTrades`` rows carry ``orderId`` only, and a fill must count for its order (its executed
        quantity, its fees, its bracket's exit)."""
        new: list[Fill] = []
        async with self.db.transaction() as tx:
            for f in fills:
                cur = await tx.execute(
                    "INSERT OR IGNORE INTO fills (broker, symbol, trade_id, client_order_id, side, quantity, price,"
                    " commission, commission_asset, time_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        broker, f.symbol, f.trade_id, f.client_order_id, f.side, str(f.quantity), str(f.price),
                        str(f.commission), f.commission_asset, f.time_ms,
                    ),
                )  # fmt: skip
                if cur.rowcount:
                    new.append(await _attribute(tx, broker, f))
        return new

    async def notional_since(self, broker: str, since: float) -> Decimal:
        """The value orders created since ``since`` count against the daily limit (see :func:`committed_value`)."""
        return await self.db.run_transaction(lambda conn: daily_used(conn, broker, since))

    async def get(self, client_order_id: str) -> OrderRow | None:
        r = await self.db.fetchone("SELECT * FROM orders WHERE client_order_id = ?", (client_order_id,))
        return None if r is None else _row(r)

    async def orders(self, broker: str, *, actor: Actor, open_only: bool = False, limit: int = 500) -> list[OrderRow]:
        """The newest orders ``actor`` may see: its own, or everyone's for an admin."""
        where, params = ["broker = ?"], [broker]
        if not actor.admin:
            if actor.principal is None:
                return []
            where.append("owner = ?")
            params.append(actor.principal)
        if open_only:
            where.append(f"status IN ({','.join('?' * len(OPEN))})")
            params.extend(sorted(OPEN))
        rows = await self.db.fetchall(
            f"SELECT * FROM orders WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT ?", (*params, limit)
        )
        return [_row(r) for r in rows]

    async def unresolved(self, broker: str) -> list[OrderRow]:
        """Orders whose final state is not known yet (to reconcile)."""
        marks = ",".join("?" * len(TERMINAL))
        rows = await self.db.fetchall(
            f"SELECT * FROM orders WHERE broker = ? AND status NOT IN ({marks}) ORDER BY created_at",
            (broker, *sorted(TERMINAL)),
        )
        return [_row(r) for r in rows]

    async def fills(self, broker: str, symbol: str | None = None) -> list[Fill]:
        sql = (
            "SELECT * FROM fills WHERE broker = ?"
            + (" AND symbol = ?" if symbol else "")
            + " ORDER BY time_ms, trade_id"
        )
        rows = await self.db.fetchall(sql, (broker, symbol) if symbol else (broker,))
        return [fill_of(r) for r in rows]

    async def last_trade_ids(self, broker: str) -> dict[str, int]:
        rows = await self.db.fetchall(
            "SELECT symbol, MAX(trade_id) AS last FROM fills WHERE broker = ? GROUP BY symbol", (broker,)
        )
        return {r["symbol"]: int(r["last"]) for r in rows}

    async def fill_gap_symbols(self, broker: str, since: float) -> list[str]:
        """Symbols with an order (created after ``since``) that executed more than its stored fills:
        its trades were missed (an answer lost, then the order learnt from a query without fills)."""
        rows = await self.db.fetchall(
            "SELECT DISTINCT o.symbol FROM orders o WHERE o.broker = ? AND o.created_at >= ?"
            " AND CAST(o.executed_qty AS REAL) > 0 AND CAST(o.executed_qty AS REAL) > 1e-12 + COALESCE("
            " (SELECT SUM(CAST(f.quantity AS REAL)) FROM fills f"
            "  WHERE f.broker = o.broker AND f.client_order_id = o.client_order_id), 0)",
            (broker, since),
        )
        return [r["symbol"] for r in rows]

    async def symbols(self, broker: str) -> list[str]:
        rows = await self.db.fetchall("SELECT DISTINCT symbol FROM orders WHERE broker = ?", (broker,))
        return [r["symbol"] for r in rows]


async def _attribute(tx: Any, broker: str, f: Fill) -> Fill:
    """A stored fill naming no order by client id, moved to the order whose exchange id it names."""
    async with tx.execute("SELECT 1 FROM orders WHERE client_order_id = ?", (f.client_order_id,)) as cur:
        if await cur.fetchone() is not None:
            return f
    async with tx.execute(
        "SELECT client_order_id FROM orders WHERE broker = ? AND symbol = ? AND exchange_order_id = ?",
        (broker, f.symbol, f.client_order_id),
    ) as cur:
        row = await cur.fetchone()
    if row is None:
        return f
    await tx.execute(
        "UPDATE fills SET client_order_id = ? WHERE broker = ? AND symbol = ? AND trade_id = ?",
        (row[0], broker, f.symbol, f.trade_id),
    )
    return dataclasses.replace(f, client_order_id=row[0])


def fill_of(r: Any) -> Fill:
    """A fill from a row of a fills table (SQLite's ``fills`` or the cluster's mirror: by column name)."""
    return Fill(
        trade_id=int(r["trade_id"]),
        symbol=r["symbol"],
        side=r["side"],
        client_order_id=r["client_order_id"],
        quantity=Decimal(r["quantity"]),
        price=Decimal(r["price"]),
        commission=Decimal(r["commission"]),
        commission_asset=r["commission_asset"],
        time_ms=int(r["time_ms"]),
    )
