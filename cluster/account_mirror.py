"""The exchange account as a cluster's fronts see it: the order leader mirrors the account's balances
and the state of its orders into PostgreSQL; fronts answer ``get_balance`` and ``get_orders`` from it.

Fronts hold no exchange keys, so they cannot ask the exchange.  The holder of the order lease —
which has the keys — refreshes the mirror every :data:`MIRROR_S` (:meth:`AccountMirror.refresh`,
a job of ``chartgen leader``): the account's balances (``GET /api/v3/account``, weight 20), and for
every order of the account's intents the leader last saw open (``NEW``, ``PARTIALLY_FILLED``), its
state now — the symbol's open orders (weight 6 per symbol), and the order itself for one no longer
open (weight 4) — written into the intent's answer.  So an answer is what the exchange said when the
mirror was last refreshed: every reply says as of when (``as_of``), and a front refuses to answer
from a balance snapshot older than :data:`STALE_S` (the leader is down or cannot reach the
exchange) rather than present it as current.

:class:`AccountView` is the fronts' side: ``get_orders`` lists the caller's orders placed through
the cluster (every principal's for an admin token) with the single node's fields, ``get_balance``
the snapshot, ``get_positions`` the positions replayed from the mirrored fills
(cluster/account_fills.py).  Orders placed outside the cluster are not listed (they show in the
balances, and their trades in the positions, as on a single node).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC
from decimal import Decimal
from typing import Any

import asyncpg
import orjson
import structlog

from brokers import (
    OPEN,
    Actor,
    Balance,
    BinanceBroker,
    ExchangeOrder,
    FeeRates,
    OrderInputError,
    OrderRefused,
    SafetyLimits,
    rates_json,
    rates_of,
)
from cluster.account_fills import FILLS_MIGRATION, FillsMirror, positions
from cluster.intent_listing import intent_listing
from cluster.list_intents import leg_listings, refresh_lists
from cluster.orders import ORDER_JSON, REQUEST_JSON
from storage import Migrations, PostgresDatabase, StorageUnavailable, unreachable_as

log = structlog.get_logger(__name__)

MIRROR_S = 10.0
"""How often the leader refreshes the mirror."""
STALE_S = 60.0
"""A balance snapshot older than this is not answered (the leader or the exchange is away)."""

ACCOUNT_MIGRATIONS = Migrations(
    "cluster_account",
    (
        (
            1,
            """
            CREATE TABLE cluster_account_balances (
                account TEXT NOT NULL,
                asset TEXT NOT NULL,
                free NUMERIC NOT NULL,
                locked NUMERIC NOT NULL,
                PRIMARY KEY (account, asset)
            );
            CREATE TABLE cluster_account_mirror (
                account TEXT PRIMARY KEY,
                broker TEXT NOT NULL,
                refreshed_at TIMESTAMPTZ NOT NULL
            )
            """,
        ),
        (2, FILLS_MIGRATION),
        (3, "ALTER TABLE cluster_account_mirror ADD COLUMN guard TEXT"),
        (4, "ALTER TABLE cluster_account_mirror ADD COLUMN fees TEXT"),
    ),
)


class AccountMirror:
    """The leader's side: :meth:`refresh` writes the account's balances and its orders' states."""

    def __init__(self, db: PostgresDatabase, broker: BinanceBroker, account: str, *, limits: SafetyLimits) -> None:
        self.db = db
        self.broker = broker
        self.account = account
        self.limits = limits
        """The leader's guard rails (its own, never a default), published with each refresh for the
        fronts' trade_simulate."""
        self.fills = FillsMirror(broker, account)
        self.refreshes = 0

    async def refresh(self) -> int:
        """One refresh (balances, then the orders last seen open); returns how many orders changed.
        An exchange or PostgreSQL failure raises (the job logs it; the snapshot keeps its time)."""
        balances = await self.broker.balances()
        rows = await self.db.fetch(  # only the orders last seen open: the placed ones pile up over time
            "SELECT client_order_id, answer FROM cluster_order_intents WHERE account = $1 AND state = 'placed'"
            " AND answer::jsonb -> 'order' ->> 'status' = ANY($2::text[])",
            self.account,
            sorted(OPEN),
        )
        seen_open: list[ExchangeOrder] = []
        for r in rows:
            order = _order_of(r["answer"])
            if order is not None and order.status in OPEN:
                seen_open.append(order)
        open_by_symbol: dict[str, dict[str, ExchangeOrder]] = {}

        async def open_in(symbol: str) -> dict[str, ExchangeOrder]:  # one request per symbol and refresh
            if symbol not in open_by_symbol:
                open_by_symbol[symbol] = {o.client_order_id: o for o in await self.broker.open_orders(symbol)}
            return open_by_symbol[symbol]

        now_open: dict[str, ExchangeOrder] = {}
        for symbol in sorted({o.symbol for o in seen_open}):
            now_open |= await open_in(symbol)
        changed: list[ExchangeOrder] = []
        for order in seen_open:
            current = now_open.get(order.client_order_id) or await self.broker.query(
                order.symbol, order.client_order_id
            )
            if current is not None and _changed(order, current):
                changed.append(current)
        lists = await refresh_lists(self.db, self.broker, self.account, open_in)
        with unreachable_as("account mirror not refreshed", self.db.where):
            async with self.db.transaction() as conn:
                await conn.execute("DELETE FROM cluster_account_balances WHERE account = $1", self.account)
                await conn.executemany(
                    "INSERT INTO cluster_account_balances (account, asset, free, locked) VALUES ($1, $2, $3, $4)",
                    [(self.account, b.asset, b.free, b.locked) for b in balances if b.free or b.locked],
                )
                await conn.execute(
                    "INSERT INTO cluster_account_mirror (account, broker, refreshed_at, guard, fees)"
                    " VALUES ($1, $2, clock_timestamp(), $3, $4) ON CONFLICT (account) DO UPDATE"
                    " SET broker = excluded.broker, refreshed_at = excluded.refreshed_at, guard = excluded.guard,"
                    " fees = excluded.fees",
                    self.account,
                    self.broker.name,
                    guard_json(self.limits),
                    None if self.broker.account_rates is None else rates_json(self.broker.account_rates),
                )
                answers = [
                    (o.client_order_id, orjson.dumps({"order": ORDER_JSON.dump_python(o)}, default=str).decode())
                    for o in changed
                ]  # as the leader writes them
                await conn.executemany(
                    "UPDATE cluster_order_intents SET answer = $2 WHERE client_order_id = $1 AND state = 'placed'",
                    answers + lists,
                )
        writes = await self.fills.collect(self.db)  # after the orders' new states: their executed quantities
        with unreachable_as("account mirror's fills not refreshed", self.db.where):
            async with self.db.transaction() as conn:
                await self.fills.write(conn, writes)
        self.refreshes += 1
        if changed or lists:
            log.info("account_mirror_orders", changed=len(changed), open=len(seen_open), lists_changed=len(lists))
        return len(changed) + len(lists)


def _order_of(answer: str | None) -> ExchangeOrder | None:
    body = orjson.loads(answer) if answer else {}
    return ORDER_JSON.validate_python(body["order"]) if body.get("order") is not None else None


def _changed(old: ExchangeOrder, new: ExchangeOrder) -> bool:
    return (old.status, old.executed_qty, old.cumulative_quote) != (new.status, new.executed_qty, new.cumulative_quote)


class AccountView:
    """The fronts' side: get_orders and get_balance from the mirror (see the module docstring)."""

    def __init__(self, db: PostgresDatabase, account: str, *, stale_s: float = STALE_S) -> None:
        self.db = db
        self.account = account
        self.stale_s = stale_s

    async def get_orders(self, filter_: object, *, actor: Actor) -> list[dict[str, Any]]:
        """``actor``'s orders placed through the cluster (everyone's for an admin), newest first;
        ``filter_`` "open" or "all"."""
        if actor.principal is None and not actor.admin:
            return []
        with unreachable_as("orders not read", self.db.where):
            rows = await self.db.fetch(
                "SELECT i.client_order_id, i.kind, i.request, i.state, i.answer, i.created_at, i.answered_at,"
                " m.refreshed_at, x.client_order_id AS exit_id, x.state AS exit_state FROM cluster_order_intents i"
                " LEFT JOIN cluster_account_mirror m ON m.account = i.account"
                " LEFT JOIN cluster_order_intents x ON x.entry_client_order_id = i.client_order_id"
                " WHERE i.account = $1 AND ($2 OR i.owner = $3) ORDER BY i.created_at DESC LIMIT 500",
                self.account,
                actor.admin,
                actor.principal,
            )
        listed = [x for r in rows for x in (leg_listings(r) if r["kind"] == "list" else [_listing(r)])]
        if filter_ == "open":
            listed = [x for x in listed if x["status"] in OPEN]
        return listed

    async def get_balance(self) -> dict[str, Any]:
        mirror, balances = await self._balances()
        return {
            "broker": mirror["broker"],
            "balances": [
                {"asset": b.asset, "free": float(b.free), "locked": float(b.locked), "total": float(b.total)}
                for b in balances
            ],
            "as_of": mirror["refreshed_at"].astimezone(UTC).isoformat(),
        }

    async def balances(self) -> list[Balance]:
        """The mirrored balances, exact (refused when the snapshot is stale, as get_balance)."""
        return (await self._balances())[1]

    async def _balances(self) -> tuple[asyncpg.Record, list[Balance]]:
        with unreachable_as("balances not read", self.db.where):
            async with self.db.transaction() as conn:
                mirror = await self._snapshot(conn)
                rows = await conn.fetch(
                    "SELECT asset, free, locked FROM cluster_account_balances WHERE account = $1 ORDER BY asset",
                    self.account,
                )
        return mirror, [Balance(asset=r["asset"], free=Decimal(r["free"]), locked=Decimal(r["locked"])) for r in rows]

    async def get_positions(self) -> list[dict[str, Any]]:
        """The account's positions from the mirrored fills (cluster/account_fills.py), marked at the
        prices of the last refresh (each entry's ``as_of``)."""
        with unreachable_as("positions not read", self.db.where):
            async with self.db.transaction() as conn:
                mirror = await self._snapshot(conn)
                return await positions(conn, self.account, mirror["refreshed_at"])

    async def guard_rails(self) -> SafetyLimits:
        """The order leader's guard rails as of its last refresh; OrderRefused when they cannot be
        read (no fresh snapshot, or a leader that does not publish them): fail closed."""
        try:
            with unreachable_as("guard rails not read", self.db.where):
                async with self.db.transaction() as conn:
                    mirror = await self._snapshot(conn)
        except (OrderInputError, StorageUnavailable) as exc:
            raise OrderRefused(f"the order leader's guard rails could not be read: {exc}") from None
        if mirror["guard"] is None:
            raise OrderRefused(
                "the order leader's guard rails could not be read: its snapshot of the account carries none"
                " (a leader older than this front); upgrade chartgen leader"
            )
        return guard_of(mirror["guard"])

    async def fee_rates(self) -> FeeRates | None:
        """The account's commission rates (its tier's, brokers/commission.py) as of the leader's last
        refresh; None when the snapshot is missing or stale, or carries none."""
        try:
            with unreachable_as("fees not read", self.db.where):
                async with self.db.transaction() as conn:
                    mirror = await self._snapshot(conn)
        except (OrderInputError, StorageUnavailable):
            return None
        if mirror["fees"] is None:
            return None
        rates = rates_of(mirror["fees"])
        return dataclasses.replace(rates, source=f"{rates.source}, from the order leader's mirror")

    async def _snapshot(self, conn: asyncpg.Connection) -> asyncpg.Record:
        """The mirror's row, refused when there is none or it is older than ``stale_s``."""
        mirror = await conn.fetchrow(
            "SELECT broker, refreshed_at, guard, fees,"
            " EXTRACT(EPOCH FROM clock_timestamp() - refreshed_at) AS age_s"
            " FROM cluster_account_mirror WHERE account = $1",
            self.account,
        )
        if mirror is None:
            raise OrderInputError(
                f"no snapshot of account {self.account!r} yet: the order leader (chartgen leader) writes one"
                f" every {MIRROR_S:g} s; check chartgen cluster status"
            )
        if float(mirror["age_s"]) > self.stale_s:
            raise OrderInputError(
                f"the snapshot of account {self.account!r} is {float(mirror['age_s']):.0f} s old (the order"
                f" leader refreshes it every {MIRROR_S:g} s): the leader or the exchange is away; try again later"
            )
        return mirror


def guard_json(limits: SafetyLimits) -> str:
    def plain(x: Decimal | None) -> str | None:
        return None if x is None else format(x, "f")

    return orjson.dumps(
        {
            "max_order_notional": plain(limits.max_order_notional),
            "max_daily_notional": plain(limits.max_daily_notional),
            "allowed_symbols": sorted(limits.allowed_symbols),
        }
    ).decode()


def guard_of(text: str) -> SafetyLimits:
    body = orjson.loads(text)

    def dec(x: str | None) -> Decimal | None:
        return None if x is None else Decimal(x)

    return SafetyLimits(
        max_order_notional=dec(body["max_order_notional"]),
        max_daily_notional=dec(body["max_daily_notional"]),
        allowed_symbols=frozenset(body["allowed_symbols"]),
    )


def _listing(r: asyncpg.Record) -> dict[str, Any]:
    """One get_orders entry from an intent: the single node's listing (brokers/orders/views.py) of
    the order as the mirror last saw it."""
    req = REQUEST_JSON.validate_json(r["request"])
    body: dict[str, Any] = orjson.loads(r["answer"]) if r["answer"] else {}
    order = ORDER_JSON.validate_python(body["order"]) if body.get("order") is not None else None
    status = order.status if order is not None else ("REJECTED" if r["state"] == "rejected" else "PENDING_SUBMIT")
    listing = intent_listing(req, order, status, r, body)
    if r["exit_id"] is not None:  # a bracket's entry (cluster/bracket_exits.py): its exit, as a single node lists it
        state = "claimed" if r["exit_state"] in ("sending", "unknown") else r["exit_state"]
        listing["bracket"] = {"list_id": r["exit_id"], "state": state}
    return listing
