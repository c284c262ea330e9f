"""The order tracker's SQLite tables: orders (keyed by our clientOrderId) and fills (by trade id).

An order row is written *before* its request is sent (status PENDING_SUBMIT), so a crash
between "recorded" and "answered" leaves a row that reconciliation resolves by asking the
exchange — the order is never sent twice.  Status only moves forward: an update that
would take a terminal order back to an open state is ignored.  Fills are keyed by
(broker, symbol, trade id), so a fill seen from the stream, from the order answer and from
reconciliation is stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from brokers.models import OPEN, TERMINAL, ExchangeOrder, Fill, OrderRequest
from config.database import Database, Migrations

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
    ),
)

_RANK = {"PENDING_SUBMIT": 0, "UNKNOWN": 1, "NEW": 2, "PARTIALLY_FILLED": 3}


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

    async def record_intent(self, broker: str, req: OrderRequest, now: float) -> None:
        """Write the order as PENDING_SUBMIT before anything is sent (raises if the id exists)."""
        async with self.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO orders (client_order_id, broker, symbol, side, type, time_in_force, quantity,"
                " quote_quantity, price, status, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'PENDING_SUBMIT', ?, ?)",
                (
                    req.client_order_id,
                    broker,
                    req.symbol,
                    req.side,
                    req.type,
                    req.time_in_force,
                    _s(req.quantity),
                    _s(req.quote_quantity),
                    _s(req.price),
                    now,
                    now,
                ),
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
        """Store fills (from reconciliation); returns the ones not seen before."""
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
                    new.append(f)
        return new

    async def notional_since(self, broker: str, since: float) -> Decimal:
        """Traded (or, for unfilled orders, ordered) value of orders created since ``since``, rejected ones excluded."""
        rows = await self.db.fetchall(
            "SELECT executed_qty, cumulative_quote, quantity, price FROM orders"
            " WHERE broker = ? AND created_at >= ? AND status != 'REJECTED'",
            (broker, since),
        )
        total = Decimal(0)
        for r in rows:
            if Decimal(r["executed_qty"]) > 0:
                total += Decimal(r["cumulative_quote"])
            elif r["quantity"] is not None and r["price"] is not None:
                total += Decimal(r["quantity"]) * Decimal(r["price"])
        return total

    async def get(self, client_order_id: str) -> OrderRow | None:
        r = await self.db.fetchone("SELECT * FROM orders WHERE client_order_id = ?", (client_order_id,))
        return None if r is None else _row(r)

    async def orders(self, broker: str, *, open_only: bool = False, limit: int = 500) -> list[OrderRow]:
        if open_only:
            marks = ",".join("?" * len(OPEN))
            rows = await self.db.fetchall(
                f"SELECT * FROM orders WHERE broker = ? AND status IN ({marks}) ORDER BY created_at DESC LIMIT ?",
                (broker, *sorted(OPEN), limit),
            )
        else:
            rows = await self.db.fetchall(
                "SELECT * FROM orders WHERE broker = ? ORDER BY created_at DESC LIMIT ?", (broker, limit)
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
        return [
            Fill(
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
            for r in rows
        ]

    async def last_trade_ids(self, broker: str) -> dict[str, int]:
        rows = await self.db.fetchall(
            "SELECT symbol, MAX(trade_id) AS last FROM fills WHERE broker = ? GROUP BY symbol", (broker,)
        )
        return {r["symbol"]: int(r["last"]) for r in rows}

    async def symbols(self, broker: str) -> list[str]:
        rows = await self.db.fetchall("SELECT DISTINCT symbol FROM orders WHERE broker = ?", (broker,))
        return [r["symbol"] for r in rows]
