"""Per-principal suspensions and revocations in SQLite: order admission refusing a suspended or revoked
principal (and only it), the service the dashboard calls, and the revoking transaction that cancels the
principal's schedules and removes its alerts' actions together with the tokens."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from decimal import Decimal as D
from pathlib import Path

import pytest

from alerts import Alert, alert_row
from brokers.models import ListRequest, OrderRequest
from brokers.orders.admission import admit_in
from brokers.orders.args import OrderInputError
from brokers.orders.guard import SafetyLimits
from brokers.orders.list_store import claim_bracket_in
from brokers.suspensions import (
    SUSPENDED_MESSAGE,
    PrincipalRevoked,
    Suspension,
    SuspensionService,
    SuspensionStore,
    TradingSuspended,
    cancel_principal_open,
)
from daemon import ALL_MIGRATIONS
from mcp_bridge import OAuthStore, RefreshRow, TokenStore
from storage import Database
from tests.brokers.test_order_guard import PricedBroker, make_service

LIMITS = SafetyLimits(max_order_notional=D(1_000_000), max_daily_notional=D(10_000_000))
LIMIT_BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "chartgen.db")
    await database.migrate(ALL_MIGRATIONS)
    try:
        yield database
    finally:
        await database.close()


async def _orders(db: Database) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM orders")
    assert row is not None
    return int(row[0])


async def test_a_suspended_principal_is_refused_others_trade_and_unsuspend_restores(db: Database) -> None:
    broker = PricedBroker()
    service = make_service(db, broker, LIMITS)
    suspensions = SuspensionService(SuspensionStore(db), lambda p: cancel_principal_open(service, p))
    answer = await suspensions.suspend("tok_bad", by="cli:op", reason="probe")
    assert answer["suspended"] and answer["principal"] == "tok_bad" and answer["by"] == "cli:op"
    (row,) = await suspensions.list()
    assert isinstance(row, Suspension) and (row.principal, row.by, row.reason) == ("tok_bad", "cli:op", "probe")

    with pytest.raises(TradingSuspended) as refused:
        await service.place_order(LIMIT_BUY, owner="tok_bad")
    assert SUSPENDED_MESSAGE in str(refused.value)
    with pytest.raises(OrderInputError, match=SUSPENDED_MESSAGE):  # the guard's dry run refuses too
        await service.guard.evaluate(OrderRequest(**{**_req(LIMIT_BUY), "owner": "tok_bad"}))
    assert await _orders(db) == 0 and broker.placed == []  # nothing recorded, nothing sent
    assert (await service.place_order(LIMIT_BUY, owner="tok_good"))["status"] == "Open"  # others trade

    assert (await suspensions.unsuspend("tok_bad", by="cli:op"))["was_suspended"] is True
    assert await suspensions.list() == []
    assert (await service.place_order(LIMIT_BUY, owner="tok_bad"))["status"] == "Open"


def _req(args: dict[str, object]) -> dict[str, object]:
    from brokers.orders.args import parse_order

    return {**parse_order(args), "client_order_id": "probe-1"}


async def test_suspend_with_cancel_open_cancels_only_that_principals_open_orders(db: Database) -> None:
    broker = PricedBroker()
    service = make_service(db, broker, LIMITS)
    mine = await service.place_order(LIMIT_BUY, owner="tok_bad")
    theirs = await service.place_order(LIMIT_BUY, owner="tok_good")
    suspensions = SuspensionService(SuspensionStore(db), lambda p: cancel_principal_open(service, p))
    answer = await suspensions.suspend("tok_bad", by="cli:op", cancel_open=True)
    assert answer["cancel_open"]["orders_cancelled"] == 1 and answer["cancel_open"]["failures"] == []
    assert (await service.store.get(mine["order_id"])).status == "CANCELED"  # type: ignore[union-attr]
    assert (await service.store.get(theirs["order_id"])).status == "NEW"  # type: ignore[union-attr]


async def test_admission_refuses_a_revoked_principal_but_a_filled_entrys_exit_is_exempt(db: Database) -> None:
    now = time.time()

    def step(conn: object) -> None:
        import sqlite3

        assert isinstance(conn, sqlite3.Connection)
        conn.execute("INSERT INTO revoked_principals (principal, revoked_at) VALUES ('tok_gone', ?)", (now,))
        req = OrderRequest("BTCUSDT", "BUY", "LIMIT", quantity=D("0.01"), price=D(60000), client_order_id="x-1")
        with pytest.raises(PrincipalRevoked):
            admit_in(conn, "fake", _owned(req, "tok_gone"), D(600), now, daily_limit=None, since=0)
        # an entry filled before the revoke: its exit OCO is claimed and its legs recorded all the same
        entry = _owned(OrderRequest("BTCUSDT", "BUY", "MARKET", quantity=D("0.01"), client_order_id="e-1"), "tok_gone")
        conn.execute(
            "INSERT INTO orders (client_order_id, broker, symbol, side, type, quantity, status, created_at,"
            " updated_at, owner) VALUES ('e-1', 'fake', 'BTCUSDT', 'BUY', 'MARKET', '0.01', 'FILLED', ?, ?, ?)",
            (now, now, entry.owner),
        )
        conn.execute(
            "INSERT INTO order_lists (list_client_id, broker, kind, symbol, side, owner, status, entry_client_id,"
            " quantity, take_profit_price, stop_price, take_profit_notional, stop_notional, bracket_state,"
            " created_at, updated_at) VALUES ('b-1', 'fake', 'OCO', 'BTCUSDT', 'SELL', 'tok_gone', 'PENDING',"
            " 'e-1', '0.01', '70000', '60000', '700', '600', 'waiting', ?, ?)",
            (now, now),
        )
        exit_oco = ListRequest(
            "OCO",
            "BTCUSDT",
            "b-1",
            take_profit=_leg("b-1-tp", "LIMIT_MAKER", price=D(70000)),
            stop=_leg("b-1-sl", "STOP_LOSS", stop_price=D(60000)),
            owner="tok_gone",
        )
        assert claim_bracket_in(conn, "fake", exit_oco, now) is True

    await db.run_transaction(step)
    row = await db.fetchone("SELECT bracket_state FROM order_lists WHERE list_client_id = 'b-1'")
    assert row is not None and row[0] == "claimed"


def _owned(req: OrderRequest, owner: str) -> OrderRequest:
    from dataclasses import replace

    return replace(req, owner=owner)


def _leg(cid: str, kind: str, **prices: D) -> OrderRequest:
    return OrderRequest("BTCUSDT", "SELL", kind, quantity=D("0.01"), client_order_id=cid, owner="tok_gone", **prices)


async def _arm(db: Database, tokens: TokenStore, name: str) -> str:
    """A trading token with an active schedule and an armed action alert; its principal."""
    _, info = await tokens.create(name, scopes=["charts", "alerts", "trade"])
    now = time.time()
    await db.execute(
        "INSERT INTO schedules (id, owner, order_args, every, status, created_at, updated_at)"
        " VALUES (?, ?, ?, '1s', 'active', ?, ?)",
        (f"s-{name}", info.principal, json.dumps(LIMIT_BUY), now, now),
    )
    alert = Alert(
        id=f"00000000-0000-4000-8000-{len(name):012d}",
        principal=info.principal,
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=70000.0,
        created_at=now,
        action={"place_order": LIMIT_BUY},
    )
    row = alert_row(alert)
    await db.execute(
        "INSERT INTO alerts (id, principal, symbol, interval, kind, record, created_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        row,
    )
    return info.principal


async def test_revoking_a_token_cancels_its_schedules_and_actions_in_the_same_transaction(db: Database) -> None:
    tokens = TokenStore(db)
    bad, good = await _arm(db, tokens, "bad"), await _arm(db, tokens, "good")
    done = await tokens.revoke_all("bad")
    assert [t.principal for t in done.tokens] == [bad]
    assert done.stopped.principals == [bad] and done.stopped.schedules == ["s-bad"]
    assert len(done.stopped.alert_actions) == 1 and "1 schedule(s) cancelled" in done.stopped.lines()[0]
    rows = {r["id"]: r["status"] for r in await db.fetchall("SELECT id, status FROM schedules")}
    assert rows == {"s-bad": "cancelled", "s-good": "active"}
    records = {r["principal"]: json.loads(r["record"]) for r in await db.fetchall("SELECT * FROM alerts")}
    assert "action" not in records[bad] and records[good]["action"] is not None  # the alert stays, plain
    assert await db.fetchone("SELECT 1 FROM revoked_principals WHERE principal = ?", (bad,)) is not None
    assert await db.fetchone("SELECT 1 FROM revoked_principals WHERE principal = ?", (good,)) is None


async def test_a_failing_revocation_stops_nothing(db: Database) -> None:
    """One transaction: when a step fails, the tokens stay active and the schedules and actions stay."""
    tokens = TokenStore(db)
    bad = await _arm(db, tokens, "bad")
    await db.execute("DROP TABLE revoked_principals")  # the marking step fails
    with pytest.raises(Exception, match="revoked_principals"):
        await tokens.revoke_all("bad")
    assert [t.active for t in await tokens.list()] == [True]
    row = await db.fetchone("SELECT status FROM schedules WHERE owner = ?", (bad,))
    assert row is not None and row[0] == "active"


async def test_an_oauth_grant_revoked_stops_its_principal_and_a_new_grant_clears_it(db: Database) -> None:
    store = OAuthStore(db)
    now = time.time()
    await db.execute(
        "INSERT INTO schedules (id, owner, order_args, every, status, created_at, updated_at)"
        " VALUES ('s-o', 'oauth:c1', ?, '1s', 'active', ?, ?)",
        (json.dumps(LIMIT_BUY), now, now),
    )
    async with db.transaction() as tx:
        await store.insert_refresh(tx, "refresh-1", RefreshRow("c1", "oauth:c1", ["trade"], None, now + 3600))
    stopped = await store.revoke_grant("c1")
    assert stopped.principals == ["oauth:c1"] and stopped.schedules == ["s-o"]
    assert await db.fetchone("SELECT 1 FROM revoked_principals WHERE principal = 'oauth:c1'") is not None
    async with db.transaction() as tx:  # the operator approves the client again: a new grant
        await store.insert_refresh(tx, "refresh-2", RefreshRow("c1", "oauth:c1", ["trade"], None, now + 3600))
    assert await db.fetchone("SELECT 1 FROM revoked_principals WHERE principal = 'oauth:c1'") is None


async def test_names_resolve_to_principals(db: Database) -> None:
    tokens = TokenStore(db)
    _, info = await tokens.create("laptop", scopes=["trade"])
    assert await tokens.principals_named("laptop") == [info.principal]
    assert await tokens.principals_named(info.id) == [info.principal]
    assert await tokens.principals_named("nobody") == []
