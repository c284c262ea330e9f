"""Order ownership in the order service: a principal sees and cancels its own orders, an admin every
order; someone else's order answers exactly like an unknown one; pre-ownership rows are admin-only."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from brokers.models import Actor, ExchangeOrder
from brokers.orders.args import OrderInputError
from brokers.orders.guard import SafetyLimits
from brokers.orders.service import OrderService
from brokers.orders.store import MIGRATIONS, OrderStore
from storage import Database, Migrations
from tests.brokers.test_order_guard import PricedBroker

A, B = Actor("tok_a"), Actor("tok_b")
ADMIN = Actor("tok_root", admin=True)
REST = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}


def service(db: Database, broker: PricedBroker) -> OrderService:
    return OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))


async def _refusal(svc: OrderService, order_id: str, actor: Actor) -> tuple[str, int | None]:
    with pytest.raises(OrderInputError) as info:
        await svc.cancel_order(order_id, actor=actor)
    return str(info.value).replace(order_id, "<id>"), info.value.code


async def test_a_principal_sees_and_cancels_only_its_own_orders_and_an_admin_all(order_db: Database) -> None:
    broker = PricedBroker()
    svc = service(order_db, broker)
    a = (await svc.place_order(REST, owner="tok_a"))["order_id"]
    b = (await svc.place_order({**REST, "price": 59000}, owner="tok_b"))["order_id"]
    assert [o["id"] for o in await svc.get_orders("all", actor=A)] == [a]
    assert [o["id"] for o in await svc.get_orders("open", actor=B)] == [b]
    assert {o["id"] for o in await svc.get_orders("open", actor=ADMIN)} == {a, b}

    # B cancelling A's order answers exactly as for an id that does not exist, and changes nothing
    assert await _refusal(svc, a, B) == await _refusal(svc, "no-such-order", B) == ("order not found: <id>", None)
    assert broker.cancelled == [] and [o["state"] for o in await svc.get_orders("all", actor=A)] == ["Open"]

    assert await svc.cancel_order(a, actor=A) == {"ok": True}
    assert await svc.cancel_order(b, actor=ADMIN) == {"ok": True}
    assert broker.cancelled == [a, b]
    assert [o["state"] for o in await svc.get_orders("all", actor=B)] == ["Cancelled"]


async def test_orders_without_an_owner_are_the_admins_only(order_db: Database) -> None:
    """An order learnt from the exchange (placed elsewhere) has no owner: no token but an admin lists or cancels it."""
    broker = PricedBroker()
    svc = service(order_db, broker)
    elsewhere = ExchangeOrder("BTCUSDT", "web-1", "NEW", "BUY", "LIMIT", D("0.01"), D(0), D(0), D(50000))
    broker.orders["web-1"] = elsewhere
    await svc.on_update(elsewhere)
    assert await svc.get_orders("all", actor=A) == []
    assert await svc.get_orders("all", actor=Actor(None)) == []
    assert await _refusal(svc, "web-1", A) == ("order not found: <id>", None)
    assert [o["id"] for o in await svc.get_orders("open", actor=ADMIN)] == ["web-1"]
    assert await svc.cancel_order("web-1", actor=ADMIN) == {"ok": True}


async def test_orders_from_before_the_upgrade_belong_to_nobody_after_it() -> None:
    """Migration 2 adds the owner column; rows already there keep owner NULL (admin-only), the rest still works."""
    db = await Database.open(":memory:")
    try:
        await db.migrate([Migrations(MIGRATIONS.package, MIGRATIONS.steps[:1])])
        await db.execute(
            "INSERT INTO orders (client_order_id, broker, symbol, side, type, time_in_force, quantity, price, status,"
            " created_at, updated_at) VALUES ('old-1', 'fake', 'BTCUSDT', 'BUY', 'LIMIT', 'GTC', '0.01', '60000',"
            " 'NEW', 1, 1)"
        )
        assert (await db.migrate([MIGRATIONS]))[MIGRATIONS.package] == MIGRATIONS.steps[-1][0]
        broker = PricedBroker()
        svc = service(db, broker)
        row = await svc.store.get("old-1")
        assert row is not None and row.owner is None and row.notional is None
        assert await svc.get_orders("all", actor=A) == []
        assert [o["id"] for o in await svc.get_orders("all", actor=ADMIN)] == ["old-1"]
        assert await _refusal(svc, "old-1", A) == ("order not found: <id>", None)
        # its value (quantity × price, 600) still counts against the daily limit
        assert await svc.store.notional_since("fake", 0) == D(600)
    finally:
        await db.close()


async def test_the_order_tools_act_for_the_calling_principal_and_its_admin_scope(order_db: Database) -> None:
    """Through the tool router: the caller's principal owns what it places; ``admin`` lists every order;
    a call without a principal (unauthenticated HTTP) is refused."""
    import json

    from mcp_bridge import Services, ToolRouter

    router = ToolRouter(Services(charts=None, orders=service(order_db, PricedBroker())))  # type: ignore[arg-type]
    trade, admin = frozenset({"trade"}), frozenset({"admin"})

    async def call(tool: str, args: dict[str, object], principal: str | None, scopes: frozenset[str]) -> object:
        result = await router.call(tool, args, principal, scopes)
        text = result.content[0].text  # type: ignore[union-attr]
        return text if result.is_error else json.loads(text)

    placed = await call("place_order", {**REST, "client_order_id": "mine"}, "tok_a", trade)
    assert isinstance(placed, dict) and placed["status"] == "Open"
    assert [o["id"] for o in await call("get_orders", {}, "tok_a", trade)] == ["mine"]  # type: ignore[union-attr]
    assert await call("get_orders", {}, "tok_b", trade) == []
    assert await call("cancel_order", {"order_id": "mine"}, "tok_b", trade) == "order not found: mine"
    assert [o["id"] for o in await call("get_orders", {}, "tok_root", admin)] == ["mine"]  # type: ignore[union-attr]
    refused = await call("get_orders", {}, None, trade)
    assert isinstance(refused, str) and "needs an authenticated client" in refused
