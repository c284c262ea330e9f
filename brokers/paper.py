"""PaperBroker: a local account that fills at the live engine's prices (the default broker).

Market orders fill at once at the engine's last price moved against you by the
configured slippage; limit orders fill at once if marketable (at the last price), else
rest with their funds locked and fill at their limit when a tick reaches it.  IOC/FOK
orders that cannot fill expire; LIMIT_MAKER orders that would take are rejected, as on
Binance.  Commission (default 0.1 %) is charged in the asset received, like Binance.
Balances, orders and trades live in SQLite, so the account survives restarts; exchange
filters come from the real exchangeInfo, so an order valid here is valid there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import structlog

from brokers.filters import SymbolRules
from brokers.models import Balance, ExchangeOrder, Fill, InsufficientBalance, OrderRejected, OrderRequest
from brokers.protocol import ExecutionHandler
from config.database import Database, Migrations

log = structlog.get_logger(__name__)

MIGRATIONS = Migrations(
    "brokers.paper",
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
    ),
)

RulesLookup = Callable[[str], Awaitable[SymbolRules | None]]
PriceLookup = Callable[[str], Awaitable[Decimal | None]]


def _now_ms() -> int:
    return int(time.time() * 1000)


class PaperBroker:
    """A simulated account on live prices, persisted in SQLite."""

    name = "paper"

    def __init__(
        self,
        db: Database,
        *,
        rules: RulesLookup,
        price: PriceLookup,
        starting_balances: dict[str, Decimal],
        fee_rate: Decimal = Decimal("0.001"),
        slippage: Decimal = Decimal("0.0005"),
    ) -> None:
        self.db = db
        self._rules = rules
        self._price = price
        self._starting = starting_balances
        self.fee_rate = fee_rate
        self.slippage = slippage
        self._handler: ExecutionHandler | None = None
        self._lock = asyncio.Lock()
        self._resting: dict[str, set[str]] = {}

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        self._handler = handler

    async def start(self) -> None:
        """Seed the starting balances on first use; load resting orders."""
        row = await self.db.fetchone("SELECT COUNT(*) AS n FROM paper_balances")
        if row is not None and int(row["n"]) == 0:
            async with self.db.transaction() as tx:
                await tx.executemany(
                    "INSERT INTO paper_balances (asset, free, locked) VALUES (?, ?, '0')",
                    [(a, str(v)) for a, v in self._starting.items()],
                )
        for r in await self.db.fetchall("SELECT client_order_id, symbol FROM paper_orders WHERE status = 'NEW'"):
            self._resting.setdefault(r["symbol"], set()).add(r["client_order_id"])

    def resting_symbols(self) -> list[str]:
        return [s for s, ids in self._resting.items() if ids]

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self._rules(symbol)

    async def last_price(self, symbol: str) -> Decimal | None:
        return await self._price(symbol)

    # --- balances --------------------------------------------------------------------
    async def _balance(self, tx: Any, asset: str) -> tuple[Decimal, Decimal]:
        async with tx.execute("SELECT free, locked FROM paper_balances WHERE asset = ?", (asset,)) as cur:
            row = await cur.fetchone()
        return (Decimal(row["free"]), Decimal(row["locked"])) if row else (Decimal(0), Decimal(0))

    async def _set_balance(self, tx: Any, asset: str, free: Decimal, locked: Decimal) -> None:
        await tx.execute(
            "INSERT INTO paper_balances (asset, free, locked) VALUES (?, ?, ?)"
            " ON CONFLICT (asset) DO UPDATE SET free = excluded.free, locked = excluded.locked",
            (asset, str(free), str(locked)),
        )

    async def balances(self) -> list[Balance]:
        rows = await self.db.fetchall("SELECT * FROM paper_balances ORDER BY asset")
        out = [Balance(r["asset"], Decimal(r["free"]), Decimal(r["locked"])) for r in rows]
        return [b for b in out if b.total != 0]

    # --- orders ----------------------------------------------------------------------
    async def place(self, req: OrderRequest) -> ExchangeOrder:
        rules = await self._rules(req.symbol)
        if rules is None:
            raise OrderRejected(f"symbol {req.symbol} is not listed", code=-32003)
        last = await self._price(req.symbol)
        if last is None:
            raise OrderRejected(f"no live price for {req.symbol} yet; try again in a moment")
        async with self._lock:
            return await self._place(req, rules, last)

    async def _place(self, req: OrderRequest, rules: SymbolRules, last: Decimal) -> ExchangeOrder:
        now = _now_ms()
        qty = req.quantity
        if req.type == "MARKET":
            fill_price = last * (1 + self.slippage) if req.side == "BUY" else last * (1 - self.slippage)
            fill_price = _to_tick(fill_price, rules.tick_size)
            if qty is None:
                assert req.quote_quantity is not None
                qty = _to_step(req.quote_quantity / fill_price, rules.step_size)
                if qty <= 0:
                    raise OrderRejected(f"quoteOrderQty {req.quote_quantity} buys less than one LOT_SIZE step")
            return await self._execute(req, rules, qty, fill_price, now, resting=False)
        assert qty is not None and req.price is not None
        marketable = last <= req.price if req.side == "BUY" else last >= req.price
        if marketable:
            if req.type == "LIMIT_MAKER":
                raise OrderRejected("Order would immediately match and take.", code=-2010)
            price = min(last, req.price) if req.side == "BUY" else max(last, req.price)
            return await self._execute(req, rules, qty, price, now, resting=False)
        if req.time_in_force in ("IOC", "FOK"):
            async with self.db.transaction() as tx:
                await self._insert_order(tx, req, qty, "EXPIRED", now)
            return self._view(req, qty, "EXPIRED", Decimal(0), Decimal(0), now, ())
        async with self.db.transaction() as tx:
            await self._reserve(tx, req, rules, qty, req.price)
            await self._insert_order(tx, req, qty, "NEW", now)
        self._resting.setdefault(req.symbol, set()).add(req.client_order_id)
        return self._view(req, qty, "NEW", Decimal(0), Decimal(0), now, ())

    async def _reserve(self, tx: Any, req: OrderRequest, rules: SymbolRules, qty: Decimal, price: Decimal) -> None:
        asset, need = (rules.quote_asset, qty * price) if req.side == "BUY" else (rules.base_asset, qty)
        free, locked = await self._balance(tx, asset)
        if free < need:
            raise InsufficientBalance(
                f"insufficient {asset} balance: the order needs {_plain(need)}, {_plain(free)} is free"
            )
        await self._set_balance(tx, asset, free - need, locked + need)

    async def _insert_order(self, tx: Any, req: OrderRequest, qty: Decimal, status: str, now: int) -> int:
        async with tx.execute("SELECT COALESCE(MAX(order_id), 0) + 1 AS n FROM paper_orders") as cur:
            row = await cur.fetchone()
        order_id = int(row["n"])
        await tx.execute(
            "INSERT INTO paper_orders (client_order_id, order_id, symbol, side, type, time_in_force, quantity, price,"
            " status, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                req.client_order_id, order_id, req.symbol, req.side, req.type, req.time_in_force, str(qty),
                None if req.price is None else str(req.price), status, now, now,
            ),
        )  # fmt: skip
        return order_id

    async def _execute(
        self, req: OrderRequest, rules: SymbolRules, qty: Decimal, price: Decimal, now: int, *, resting: bool
    ) -> ExchangeOrder:
        """Fill ``qty`` at ``price`` now: move balances, record the trade (one transaction)."""
        quote = qty * price
        async with self.db.transaction() as tx:
            base_free, base_locked = await self._balance(tx, rules.base_asset)
            quote_free, quote_locked = await self._balance(tx, rules.quote_asset)
            if req.side == "BUY":
                commission, commission_asset = qty * self.fee_rate, rules.base_asset
                if resting:
                    reserved = qty * (req.price or price)
                    quote_locked -= reserved
                    quote_free += reserved - quote
                else:
                    if quote_free < quote:
                        raise InsufficientBalance(
                            f"insufficient {rules.quote_asset} balance: the order needs about {_plain(quote)}, "
                            f"{_plain(quote_free)} is free"
                        )
                    quote_free -= quote
                base_free += qty - commission
            else:
                commission, commission_asset = quote * self.fee_rate, rules.quote_asset
                if resting:
                    base_locked -= qty
                else:
                    if base_free < qty:
                        raise InsufficientBalance(
                            f"insufficient {rules.base_asset} balance: the order sells {_plain(qty)}, "
                            f"{_plain(base_free)} is free"
                        )
                    base_free -= qty
                quote_free += quote - commission
            await self._set_balance(tx, rules.base_asset, base_free, base_locked)
            await self._set_balance(tx, rules.quote_asset, quote_free, quote_locked)
            if resting:
                await tx.execute(
                    "UPDATE paper_orders SET status = 'FILLED', executed_qty = ?, cumulative_quote = ?, updated_ms = ?"
                    " WHERE client_order_id = ?",
                    (str(qty), str(quote), now, req.client_order_id),
                )
            else:
                await self._insert_order(tx, req, qty, "FILLED", now)
                await tx.execute(
                    "UPDATE paper_orders SET executed_qty = ?, cumulative_quote = ? WHERE client_order_id = ?",
                    (str(qty), str(quote), req.client_order_id),
                )
            cur = await tx.execute(
                "INSERT INTO paper_trades (client_order_id, symbol, side, quantity, price, commission,"
                " commission_asset, time_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    req.client_order_id,
                    req.symbol,
                    req.side,
                    str(qty),
                    str(price),
                    str(commission),
                    commission_asset,
                    now,
                ),
            )
            trade_id = int(cur.lastrowid or 0)
        fill = Fill(trade_id, req.symbol, req.side, req.client_order_id, qty, price, commission, commission_asset, now)
        return self._view(req, qty, "FILLED", qty, quote, now, (fill,))

    def _view(
        self,
        req: OrderRequest,
        qty: Decimal,
        status: str,
        executed: Decimal,
        quote: Decimal,
        now: int,
        fills: tuple[Fill, ...],
    ) -> ExchangeOrder:
        return ExchangeOrder(
            symbol=req.symbol,
            client_order_id=req.client_order_id,
            status=status,
            side=req.side,
            type=req.type,
            orig_qty=qty,
            executed_qty=executed,
            cumulative_quote=quote,
            price=req.price,
            time_in_force=req.time_in_force,
            update_time_ms=now,
            fills=fills,
        )

    async def on_price(self, symbol: str, price: Decimal) -> None:
        """A trade at ``price``: fill resting limit orders it reaches (at their limit price)."""
        ids = self._resting.get(symbol)
        if not ids:
            return
        rows = await self.db.fetchall(
            "SELECT * FROM paper_orders WHERE symbol = ? AND status = 'NEW' ORDER BY created_ms", (symbol,)
        )
        rules = await self._rules(symbol)
        if rules is None:
            return
        for r in rows:
            limit = Decimal(r["price"])
            if (r["side"] == "BUY" and price <= limit) or (r["side"] == "SELL" and price >= limit):
                req = _request_of(r)
                async with self._lock:
                    update = await self._execute(req, rules, Decimal(r["quantity"]), limit, _now_ms(), resting=True)
                ids.discard(req.client_order_id)
                if self._handler is not None:
                    await self._handler(update)

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        async with self._lock, self.db.transaction() as tx:
            async with tx.execute(
                "SELECT * FROM paper_orders WHERE client_order_id = ? AND symbol = ?", (client_order_id, symbol)
            ) as cur:
                row = await cur.fetchone()
            if row is None or row["status"] != "NEW":
                raise OrderRejected("Unknown order sent.", code=-2011)
            req = _request_of(row)
            rules = await self._rules(symbol)
            assert rules is not None
            qty, price = Decimal(row["quantity"]), Decimal(row["price"])
            asset, amount = (rules.quote_asset, qty * price) if req.side == "BUY" else (rules.base_asset, qty)
            free, locked = await self._balance(tx, asset)
            await self._set_balance(tx, asset, free + amount, locked - amount)
            now = _now_ms()
            await tx.execute(
                "UPDATE paper_orders SET status = 'CANCELED', updated_ms = ? WHERE client_order_id = ?",
                (now, client_order_id),
            )
        self._resting.get(symbol, set()).discard(client_order_id)
        return self._view(req, qty, "CANCELED", Decimal(0), Decimal(0), now, ())

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        row = await self.db.fetchone(
            "SELECT * FROM paper_orders WHERE client_order_id = ? AND symbol = ?", (client_order_id, symbol)
        )
        return None if row is None else _exchange_order(row)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        sql = "SELECT * FROM paper_orders WHERE status = 'NEW'" + (" AND symbol = ?" if symbol else "")
        rows = await self.db.fetchall(sql, (symbol,) if symbol else ())
        return [_exchange_order(r) for r in rows]

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        rows = await self.db.fetchall(
            "SELECT * FROM paper_trades WHERE symbol = ? AND trade_id >= ? ORDER BY trade_id", (symbol, from_id or 0)
        )
        return [
            Fill(
                int(r["trade_id"]), r["symbol"], r["side"], r["client_order_id"], Decimal(r["quantity"]),
                Decimal(r["price"]), Decimal(r["commission"]), r["commission_asset"], int(r["time_ms"]),
            )
            for r in rows
        ]  # fmt: skip


def _request_of(row: Any) -> OrderRequest:
    return OrderRequest(
        symbol=row["symbol"],
        side=row["side"],
        type=row["type"],
        client_order_id=row["client_order_id"],
        quantity=Decimal(row["quantity"]),
        price=None if row["price"] is None else Decimal(row["price"]),
        time_in_force=row["time_in_force"],
    )


def _exchange_order(row: Any) -> ExchangeOrder:
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
    )


def _to_tick(price: Decimal, tick: Decimal) -> Decimal:
    return (price / tick).to_integral_value() * tick if tick > 0 else price


def _to_step(qty: Decimal, step: Decimal) -> Decimal:
    from decimal import ROUND_FLOOR

    return (qty / step).to_integral_value(rounding=ROUND_FLOOR) * step if step > 0 else qty


def _plain(x: Decimal) -> str:
    return format(x.normalize(), "f")
