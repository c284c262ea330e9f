"""The account's fills and positions as a cluster's fronts see them: the order leader mirrors the
account's trades (Binance ``myTrades``) in the symbols the cluster traded, and each such symbol's
price; fronts replay the fills into positions (brokers/positions.py, the single node's cost basis).

The single node stores the trades of every symbol it holds orders in and replays them; so does this,
with the trades kept in PostgreSQL (``cluster_account_fills``, keyed by trade id, so a trade fetched
twice is stored once).  ``myTrades`` weighs 20 per call, so the leader does not fetch every symbol
every refresh: :meth:`FillsMirror.refresh` compares, per symbol, the executed quantity of the
cluster's orders as their answers and the account mirror last recorded them with the quantity it
had when it last fetched (``executed_seen``), and fetches from the last stored trade id only where
they differ — a fill the cluster made is fetched within one mirror refresh of being seen.  Every
refresh also reads the price of each symbol with fills (``ticker/price``, weight 2), the mark a
front values positions at (``as_of``: the refresh).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg

from brokers import Broker, Fill, fill_of, positions_from_fills
from storage import PostgresDatabase

FILLS_MIGRATION = """
    CREATE TABLE cluster_account_fills (
        account TEXT NOT NULL,
        symbol TEXT NOT NULL,
        trade_id BIGINT NOT NULL,
        client_order_id TEXT NOT NULL,
        side TEXT NOT NULL,
        quantity NUMERIC NOT NULL,
        price NUMERIC NOT NULL,
        commission NUMERIC NOT NULL,
        commission_asset TEXT NOT NULL,
        time_ms BIGINT NOT NULL,
        PRIMARY KEY (account, symbol, trade_id)
    );
    CREATE TABLE cluster_account_symbols (
        account TEXT NOT NULL,
        symbol TEXT NOT NULL,
        base_asset TEXT NOT NULL,
        quote_asset TEXT NOT NULL,
        executed_seen NUMERIC NOT NULL,
        mark NUMERIC,
        PRIMARY KEY (account, symbol)
    )
"""

PAGE = 1000
"""``myTrades``' page size; a symbol whose fetch fills a page is fetched again from the next id."""
MAX_PAGES = 10
"""Pages fetched per symbol per refresh; the rest come at the next refresh (executed_seen unchanged)."""


@dataclass(frozen=True, slots=True)
class NewFills:
    """A page of the exchange's trades of one symbol, to insert (those already mirrored are skipped)."""

    fills: list[Fill]


@dataclass(frozen=True, slots=True)
class SymbolSeen:
    """A symbol's assets and the executed quantity whose trades the mirror now holds."""

    symbol: str
    base_asset: str
    quote_asset: str
    executed_seen: Decimal


@dataclass(frozen=True, slots=True)
class SymbolMark:
    """A symbol's price at this refresh (None: the venue had none)."""

    symbol: str
    mark: Decimal | None


MirrorWrite = NewFills | SymbolSeen | SymbolMark
"""One write :meth:`FillsMirror.collect` prepares and :meth:`FillsMirror.write` applies."""


class FillsMirror:
    """The leader's side: which symbols need their trades fetched, fetching them, writing them."""

    def __init__(self, broker: Broker, account: str) -> None:
        self.broker = broker
        self.account = account
        self.fetched = 0
        """Trades fetched from the exchange (new or not), for tests and logs."""

    async def collect(self, db: PostgresDatabase) -> list[MirrorWrite]:
        """Read the cluster's executed quantities and the symbols' state; fetch what changed from the
        exchange.  Returns the writes :meth:`write` applies in the mirror's transaction."""
        executed = {
            r["symbol"]: Decimal(r["executed"])
            for r in await db.fetch(
                "SELECT request::jsonb ->> 'symbol' AS symbol, COALESCE(SUM(CASE WHEN kind = 'list' THEN"
                " (SELECT SUM((o ->> 'executed_qty')::numeric)"
                "  FROM jsonb_array_elements(answer::jsonb -> 'list' -> 'orders') AS o)"  # an order list's legs
                " ELSE (answer::jsonb -> 'order' ->> 'executed_qty')::numeric END), 0) AS executed"
                " FROM cluster_order_intents WHERE account = $1 AND state = 'placed' GROUP BY 1",
                self.account,
            )
        }
        known = {
            r["symbol"]: r
            for r in await db.fetch(
                "SELECT s.symbol, s.base_asset, s.quote_asset, s.executed_seen, (SELECT MAX(trade_id)"
                " FROM cluster_account_fills f WHERE f.account = s.account AND f.symbol = s.symbol) AS last_trade"
                " FROM cluster_account_symbols s WHERE s.account = $1",
                self.account,
            )
        }
        writes: list[MirrorWrite] = []
        for symbol, qty in sorted(executed.items()):
            seen = known.get(symbol)
            if seen is not None and Decimal(seen["executed_seen"]) == qty:
                continue
            if seen is None:
                rules = await self.broker.rules(symbol)
                if rules is None:
                    continue  # delisted: nothing to value it against
                base, quote = rules.base_asset, rules.quote_asset
            else:
                base, quote = seen["base_asset"], seen["quote_asset"]
            last = None if seen is None else seen["last_trade"]
            complete = False
            for _ in range(MAX_PAGES):
                page = await self.broker.trades(symbol, None if last is None else int(last) + 1)
                self.fetched += len(page)
                writes.append(NewFills(page))
                if page:
                    last = max(f.trade_id for f in page)
                if len(page) < PAGE:
                    complete = True
                    break
            seen_qty = qty if complete else (Decimal(0) if seen is None else Decimal(seen["executed_seen"]))
            writes.append(SymbolSeen(symbol, base, quote, seen_qty))
        for symbol in sorted(set(known) | {w.symbol for w in writes if isinstance(w, SymbolSeen)}):
            writes.append(SymbolMark(symbol, await self.broker.last_price(symbol)))
        return writes

    async def write(self, conn: asyncpg.Connection, writes: list[MirrorWrite]) -> None:
        """Apply :meth:`collect`'s writes inside the caller's transaction."""
        for w in writes:
            if isinstance(w, NewFills):
                await conn.executemany(
                    "INSERT INTO cluster_account_fills (account, symbol, trade_id, client_order_id, side, quantity,"
                    " price, commission, commission_asset, time_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                    " ON CONFLICT DO NOTHING",
                    [_fill_row(self.account, f) for f in w.fills],
                )
            elif isinstance(w, SymbolSeen):
                await conn.execute(
                    "INSERT INTO cluster_account_symbols (account, symbol, base_asset, quote_asset, executed_seen)"
                    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account, symbol) DO UPDATE"
                    " SET executed_seen = excluded.executed_seen",
                    self.account,
                    w.symbol,
                    w.base_asset,
                    w.quote_asset,
                    w.executed_seen,
                )
            else:
                await conn.execute(
                    "UPDATE cluster_account_symbols SET mark = $3 WHERE account = $1 AND symbol = $2",
                    self.account,
                    w.symbol,
                    w.mark,
                )


def _fill_row(account: str, f: Fill) -> tuple[str, str, int, str, str, Decimal, Decimal, Decimal, str, int]:
    return (account, f.symbol, f.trade_id, f.client_order_id, f.side, f.quantity, f.price, f.commission,
            f.commission_asset, f.time_ms)  # fmt: skip


async def positions(conn: asyncpg.Connection, account: str, as_of: datetime) -> list[dict[str, Any]]:
    """The account's positions from the mirrored fills, in the single node's shape (get_positions),
    each valued at the mirrored price with ``as_of`` (when the mirror was refreshed)."""
    symbols = {
        r["symbol"]: r
        for r in await conn.fetch(
            "SELECT symbol, base_asset, quote_asset, mark FROM cluster_account_symbols WHERE account = $1", account
        )
    }
    fills = [
        fill_of(r)
        for r in await conn.fetch(
            "SELECT * FROM cluster_account_fills WHERE account = $1 ORDER BY time_ms, trade_id", account
        )
    ]
    assets = {s: (r["base_asset"], r["quote_asset"]) for s, r in symbols.items()}
    stamp = as_of.astimezone(UTC).isoformat()
    out = []
    for symbol, pos in sorted(positions_from_fills(fills, assets).items()):
        if pos.listed:
            mark = symbols[symbol]["mark"] if symbol in symbols else None
            out.append({**pos.listing(None if mark is None else Decimal(mark)), "as_of": stamp})
    return out
