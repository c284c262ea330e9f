"""Order lists and brackets above the broker: guard rails on every leg (daily counted once), one
transaction for all legs, a bracket's OCO placed exactly once after its entry fills (and never after
a cancel), list cancels, membership in get_orders, migration step 3 — against an in-memory exchange."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal as D
from types import SimpleNamespace

import pytest

from brokers.ccxt.broker import CcxtBroker
from brokers.ccxt.stops import order_shape
from brokers.models import Actor, OrderRejected, OrderRequest, OutcomeUnknown
from brokers.orders.args import OrderInputError
from brokers.orders.brackets import bracket_ids
from brokers.orders.guard import OrderRefused
from brokers.orders.lists import oco_request
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from storage import Database
from tests.brokers.fake_list_broker import FakeListBroker
from tests.brokers.test_order_service import Clock

ALICE = Actor("alice")
ADMIN = Actor(None, admin=True)
OCO = {"symbol": "BTCUSDT", "side": "sell", "quantity": 0.01, "take_profit_price": 70000, "stop_price": 60000}


@pytest.fixture
async def db() -> AsyncIterator[Database]:
    database = await Database.open(":memory:")
    await database.migrate([MIGRATIONS])
    try:
        yield database
    finally:
        await database.close()


def service(db: Database, broker: object | None = None, limits: SafetyLimits | None = None) -> OrderService:
    return OrderService(
        broker or FakeListBroker(),  # type: ignore[arg-type]
        OrderStore(db),
        limits=limits or SafetyLimits(None, None),
        clock=Clock(),
    )


def by_id(orders: list[dict]) -> dict[str, dict]:  # type: ignore[type-arg]
    return {o["id"]: o for o in orders}


# --- migration --------------------------------------------------------------------------------
async def test_migration_3_adds_the_columns_and_the_lists_table_to_an_existing_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A version-2 database with an order keeps it; the order is untriggered and in no list."""
    path = tmp_path / "orders.db"
    old = await Database.open(str(path))
    v2 = type(MIGRATIONS)(MIGRATIONS.package, MIGRATIONS.steps[:2])
    await old.migrate([v2])
    await old.execute(
        "INSERT INTO orders (client_order_id, broker, symbol, side, type, status, created_at, updated_at)"
        " VALUES ('old-1', 'b', 'BTCUSDT', 'BUY', 'MARKET', 'FILLED', 1, 1)"
    )
    await old.close()
    db = await Database.open(str(path))
    try:
        await db.migrate([MIGRATIONS])
        row = await OrderStore(db).get("old-1")
        assert row is not None and row.status == "FILLED"
        assert (row.stop_price, row.trailing_delta, row.list_client_id, row.leg, row.triggered) == (
            None, None, None, None, False,
        )  # fmt: skip
        cols = {r["name"] for r in await db.fetchall("PRAGMA table_info(order_lists)")}
        assert {"list_client_id", "kind", "symbol", "owner", "status", "entry_client_id", "bracket_state"} <= cols
    finally:
        await db.close()


# --- guard on legs ------------------------------------------------------------------------------
async def test_an_oco_counts_once_at_its_larger_leg_against_the_daily_limit(db: Database) -> None:
    """0.1 BTC: take-profit 7000 (at 70000), stop 6500 (market 65000 > stop): counted 7000, not 13500."""
    svc = service(db, limits=SafetyLimits(D(10000), D(14000)))
    out = await svc.lists.place_oco({**OCO, "quantity": 0.1}, owner="alice")
    assert out["kind"] == "OCO" and [leg["leg"] for leg in out["legs"]] == ["take_profit", "stop"]
    assert await svc.store.notional_since("fake-lists", 0) == D(7000)
    await svc.lists.place_oco({**OCO, "quantity": 0.1}, owner="alice")  # 14000: still fits
    with pytest.raises(OrderRefused, match=r"over the daily limit 14000"):
        await svc.lists.place_oco({**OCO, "quantity": 0.01}, owner="alice")


async def test_every_leg_passes_the_filters_and_the_per_order_limit_before_anything_is_recorded(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker, limits=SafetyLimits(D(1000), None))
    with pytest.raises(OrderInputError, match=r"stop_price: .*tick"):
        await svc.lists.place_oco({**OCO, "stop_price": "60000.005"}, owner="alice")
    with pytest.raises(OrderRefused, match=r"exceeds the per-order limit 1000"):
        await svc.lists.place_oco({**OCO, "quantity": 0.1}, owner="alice")
    assert broker.placed_lists == [] and await svc.get_orders("all", actor=ADMIN) == []


async def test_an_unpriceable_leg_is_refused(db: Database) -> None:
    broker = FakeListBroker(price=None)  # type: ignore[arg-type]
    svc = service(db, broker)
    with pytest.raises(OrderRefused, match=r"no price for BTCUSDT"):
        await svc.lists.place_oco(OCO, owner="alice")
    with pytest.raises(OrderRefused, match=r"no price for BTCUSDT"):
        await svc.place_order({"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "stop_price": 60000,
                               "quantity": 0.01})  # fmt: skip
    assert broker.placed_lists == [] and broker.placed == []


async def test_an_oco_must_straddle_the_last_price(db: Database) -> None:
    svc = service(db)
    with pytest.raises(OrderInputError, match=r"a sell OCO needs take_profit_price > last price 65000 > stop_price"):
        await svc.lists.place_oco({**OCO, "stop_price": 66000, "take_profit_price": 67000}, owner="alice")


async def test_a_bracket_counts_its_exit_with_the_entry_and_not_again_when_placed(db: Database) -> None:
    """Market buy 0.1 (6500) + exit OCO (larger leg 7000 at 70000) = 13500, before and after the fill."""
    broker = FakeListBroker()
    svc = service(db, broker, limits=SafetyLimits(D(10000), D(13600)))
    args = {"symbol": "BTCUSDT", "side": "buy", "quantity": 0.1, "bracket": {"take_profit": 70000, "stop_loss": 60000}}
    out = await svc.place_order(args, owner="alice")
    assert out["status"] == "Filled" and out["bracket"]["state"] == "placed"
    assert await svc.store.notional_since("fake-lists", 0) == D(13500)
    with pytest.raises(OrderRefused, match=r"daily limit"):
        await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.002}, owner="alice")


async def test_a_bracket_over_the_daily_limit_records_nothing(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker, limits=SafetyLimits(D(10000), D(10000)))
    args = {"symbol": "BTCUSDT", "side": "buy", "quantity": 0.1, "bracket": {"take_profit": 70000, "stop_loss": 60000}}
    with pytest.raises(OrderRefused, match=r"value 13500 \(the entry and the larger exit leg\)"):
        await svc.place_order(args, owner="alice")
    assert broker.placed == [] and await svc.get_orders("all", actor=ADMIN) == []


# --- lists: fills, cancels, membership ------------------------------------------------------------
async def test_an_oco_stop_fill_cancels_the_take_profit_and_both_show_their_membership(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker)
    out = await svc.lists.place_oco(OCO, owner="alice")
    list_id = out["list_id"]
    tp, sl = (leg["order_id"] for leg in out["legs"])
    orders = by_id(await svc.get_orders("all", actor=ALICE))
    assert orders[sl]["triggered"] is False and orders[sl]["state"] == "Open" and orders[sl]["stop_price"] == 60000
    await broker.move(D(59990))
    orders = by_id(await svc.get_orders("all", actor=ALICE))
    assert orders[sl]["state"] == "Filled" and orders[sl]["triggered"] is True
    assert orders[tp]["state"] == "Cancelled"
    for cid, role in ((tp, "take_profit"), (sl, "stop")):
        assert (orders[cid]["list_id"], orders[cid]["list_kind"], orders[cid]["leg"]) == (list_id, "OCO", role)
    assert (await svc.lists.store.get(list_id)).status == "ALL_DONE"  # type: ignore[union-attr]


async def test_cancel_order_with_a_list_id_or_a_leg_cancels_the_whole_list(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker)
    first = await svc.lists.place_oco(OCO, owner="alice")
    assert await svc.cancel_order(first["list_id"], actor=ALICE) == {"ok": True, "list_id": first["list_id"]}
    second = await svc.lists.place_oco(OCO, owner="alice")
    await svc.cancel_order(second["legs"][0]["order_id"], actor=ALICE)
    states = {o["id"]: o["state"] for o in await svc.get_orders("all", actor=ALICE)}
    assert set(states.values()) == {"Cancelled"} and len(states) == 4
    with pytest.raises(OrderInputError, match=r"invalid transition: Done"):
        await svc.cancel_order(first["list_id"], actor=ALICE)
    with pytest.raises(OrderInputError, match=r"order not found"):
        await svc.cancel_order(second["list_id"], actor=Actor("bob"))


async def test_a_list_placed_elsewhere_is_learnt_without_an_owner(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker)
    req = oco_request(symbol="BTCUSDT", side="SELL", quantity=D("0.01"), take_profit=D(70000), stop=D(60000),
                      stop_limit=None, list_client_id="web-1", ids=("web-1a", "web-1b"), owner=None)  # fmt: skip
    await broker.place_list(req)
    counts = await svc.reconcile()
    assert counts["lists_learned"] == 1 and counts["learned"] == 2
    row = await svc.lists.store.get("web-1")
    assert row is not None and row.owner is None and row.kind == "OCO"
    assert await svc.get_orders("all", actor=ALICE) == []
    assert {o["leg"] for o in await svc.get_orders("all", actor=ADMIN)} == {"take_profit", "stop"}


async def _fresh_db() -> Database:
    d = await Database.open(":memory:")
    await d.migrate([MIGRATIONS])
    return d


# --- brackets ------------------------------------------------------------------------------------
BRACKET = {"take_profit": 70000, "stop_loss": 60000}


async def test_a_market_entry_that_fills_gets_its_oco_exactly_once(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker)
    out = await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "client_order_id": "e1",
                                 "bracket": BRACKET}, owner="alice")  # fmt: skip
    list_id, tp_id, sl_id = bracket_ids("e1")
    assert out["bracket"]["list_id"] == list_id and out["bracket"]["state"] == "placed"
    assert broker.placed_lists == [list_id]
    assert {leg["order_id"] for leg in out["bracket"]["legs"]} == {tp_id, sl_id}
    await svc.on_update(broker.orders["e1"])  # the same fill again (stream, reconciliation)
    await svc.reconcile()
    assert broker.placed_lists == [list_id]
    legs = broker.lists[list_id]
    assert (legs.take_profit.side, legs.take_profit.quantity, legs.stop.stop_price) == ("SELL", D("0.01"), D(60000))
    orders = by_id(await svc.get_orders("all", actor=ALICE))
    assert orders["e1"]["bracket"] == {"list_id": list_id, "state": "placed"}


async def test_a_limit_entry_goes_as_one_otoco_and_its_exit_works_after_the_fill(db: Database) -> None:
    broker = FakeListBroker()
    svc = service(db, broker)
    entry = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 64000, "quantity": 0.01}
    out = await svc.place_order({**entry, "client_order_id": "e2", "bracket": BRACKET}, owner="alice")
    list_id = bracket_ids("e2")[0]
    assert out["order_id"] == "e2" and out["bracket"]["kind"] == "OTOCO" and broker.placed == []
    assert [leg["leg"] for leg in out["bracket"]["legs"]] == ["working", "take_profit", "stop"]
    assert [leg["state"] for leg in out["bracket"]["legs"]] == ["Open", "Pending", "Pending"]
    await broker.move(D(63990))
    orders = by_id(await svc.get_orders("all", actor=ALICE))
    assert orders["e2"]["state"] == "Filled"
    assert orders[bracket_ids("e2")[2]]["state"] == "Open" and orders[bracket_ids("e2")[2]]["triggered"] is False
    assert broker.placed_lists == [list_id]


async def test_a_cancelled_entry_never_gets_its_oco(db: Database) -> None:
    broker = FakeListBroker()
    broker.list_kinds = frozenset({"OCO"})  # no OTOCO: the daemon places the exit itself
    svc = service(db, broker)
    entry = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 64000, "quantity": 0.01}
    out = await svc.place_order({**entry, "client_order_id": "e3", "bracket": BRACKET}, owner="alice")
    assert out["status"] == "Open" and out["bracket"]["state"] == "waiting"
    assert await svc.cancel_order("e3", actor=ALICE) == {"ok": True}
    await broker.move(D(63000))
    await svc.reconcile()
    assert broker.placed_lists == []
    assert (await svc.lists.store.get(bracket_ids("e3")[0])).bracket_state == "void"  # type: ignore[union-attr]


async def test_a_crash_between_claim_and_send_is_finished_by_lookup(db: Database) -> None:
    """The send's answer is lost: the bracket stays claimed; reconciliation finds the list by its client id
    (accepted) — no second send; or does not find it and sends it once."""
    for accepted in (True, False):
        d = await _fresh_db()
        broker = FakeListBroker()
        broker.fail_list_with, broker.accept_on_failure = OutcomeUnknown("timeout"), accepted
        svc = service(d, broker)
        out = await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "client_order_id": "e4",
                                     "bracket": BRACKET}, owner="alice")  # fmt: skip
        list_id = bracket_ids("e4")[0]
        assert out["bracket"]["state"] == "claimed"
        broker.fail_list_with = None
        await svc.reconcile()
        assert broker.placed_lists == [list_id] * (1 if accepted else 2)
        row = await svc.lists.store.get(list_id)
        assert row is not None and row.bracket_state == "placed" and row.status == "EXECUTING"
        await svc.reconcile()
        assert len(broker.placed_lists) == (1 if accepted else 2)
        await d.close()


async def test_a_refused_exit_is_recorded_as_rejected_and_not_retried(db: Database) -> None:
    broker = FakeListBroker()
    broker.fail_list_with = OrderRejected("Binance: Order would immediately trigger. (code -2010)")
    svc = service(db, broker)
    await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "client_order_id": "e5",
                           "bracket": BRACKET}, owner="alice")  # fmt: skip
    broker.fail_list_with = None
    await svc.reconcile()
    row = await svc.lists.store.get(bracket_ids("e5")[0])
    assert row is not None and row.bracket_state == "rejected" and len(broker.placed_lists) == 1


# --- venues without lists or stops -------------------------------------------------------------------
def _ccxt(has: dict[str, bool]) -> CcxtBroker:
    return CcxtBroker(SimpleNamespace(id="kraken", has=has))


async def test_ccxt_refuses_lists_and_undeclared_stop_types_naming_the_exchange(db: Database) -> None:
    svc = service(db, _ccxt({}))
    with pytest.raises(OrderInputError, match=r"ccxt:kraken does not support OCO order lists"):
        await svc.lists.place_oco(OCO, owner="alice")
    with pytest.raises(OrderInputError, match=r"ccxt:kraken does not support OCO order lists"):
        await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "bracket": BRACKET})
    with pytest.raises(OrderInputError, match=r"ccxt:kraken does not support stop_loss orders"):
        await svc.place_order(
            {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "stop_price": 1, "quantity": 1}
        )
    assert await svc.get_orders("all", actor=ADMIN) == []


def test_ccxt_stop_params_are_the_unified_ones_and_only_where_declared() -> None:
    ex = SimpleNamespace(id="binance", has={"createStopLossOrder": True, "createTakeProfitOrder": True})
    req = OrderRequest("BTCUSDT", "SELL", "STOP_LOSS_LIMIT", "x", quantity=D(1), price=D(59900), stop_price=D(60000))
    assert order_shape(ex, req) == ("limit", 59900.0, {"stopLossPrice": 60000.0})
    tp = OrderRequest("BTCUSDT", "SELL", "TAKE_PROFIT", "y", quantity=D(1), stop_price=D(70000))
    assert order_shape(ex, tp) == ("market", None, {"takeProfitPrice": 70000.0})
    trailing = OrderRequest("BTCUSDT", "SELL", "STOP_LOSS", "z", quantity=D(1), trailing_delta=150)
    with pytest.raises(OrderRejected, match=r"binance through ccxt has no trailing orders"):
        order_shape(ex, trailing)
    ex.has["createTrailingPercentOrder"] = True
    assert order_shape(ex, trailing) == ("market", None, {"trailingPercent": 1.5, "stopLossOrTakeProfit": "stopLoss"})
    with pytest.raises(OrderRejected, match=r"kraken through ccxt does not support stop_loss_limit orders"):
        order_shape(SimpleNamespace(id="kraken", has={}), req)
    assert CcxtBroker(ex).order_types >= {"STOP_LOSS", "TAKE_PROFIT_LIMIT"}
    assert _ccxt({}).order_types == {"MARKET", "LIMIT", "LIMIT_MAKER"}


async def test_the_tools_place_an_oco_list_it_and_cancel_it_by_its_list_id(db: Database) -> None:
    """Through the tool router with the trade scope: place_oco, get_orders (membership), cancel_order(list id)."""
    import json

    from mcp_bridge import Services, ToolRouter

    router = ToolRouter(Services(charts=None, orders=service(db)))  # type: ignore[arg-type]
    trade = frozenset({"trade"})

    async def call(tool: str, args: dict[str, object]) -> object:
        result = await router.call(tool, args, "tok_a", trade)
        text = result.content[0].text  # type: ignore[union-attr]
        return text if result.is_error else json.loads(text)

    placed = await call("place_oco", OCO)
    assert isinstance(placed, dict) and placed["kind"] == "OCO" and len(placed["legs"]) == 2
    listed = await call("get_orders", {"filter": "open"})
    assert isinstance(listed, list) and {o["list_id"] for o in listed} == {placed["list_id"]}
    assert {o["triggered"] for o in listed if o["leg"] == "stop"} == {False}
    assert await call("cancel_order", {"order_id": placed["list_id"]}) == {"ok": True, "list_id": placed["list_id"]}
    assert await call("get_orders", {"filter": "open"}) == []
    refused = await call("place_oco", {**OCO, "stop_price": 80000})
    assert refused == "take_profit_price must be above stop_price for a sell OCO (it exits a long position)"


async def test_a_lost_oco_answer_is_settled_by_looking_the_list_up_never_by_resending(db: Database) -> None:
    """OutcomeUnknown on place_list: the legs stay Pending; reconciliation finds the list (accepted) and
    applies it, or — never received — rejects the list and its legs after the grace period. No re-send."""
    for accepted in (True, False):
        d = await _fresh_db()
        broker = FakeListBroker()
        broker.fail_list_with, broker.accept_on_failure = OutcomeUnknown("timeout"), accepted
        svc = service(d, broker)
        out = await svc.lists.place_oco(OCO, owner="alice")
        assert "note" in out and {leg["state"] for leg in out["legs"]} == {"Pending"}
        broker.fail_list_with = None
        svc._clock.now += 60  # type: ignore[attr-defined]  # past the grace period
        await svc.reconcile()
        await svc.reconcile()
        states = {o["state"] for o in await svc.get_orders("all", actor=ALICE)}
        row = await svc.lists.store.get(out["list_id"])
        assert row is not None
        if accepted:
            assert states == {"Open"} and row.status == "EXECUTING"
        else:
            assert states == {"Rejected"} and row.status == "REJECTED"
        assert broker.placed_lists == [out["list_id"]]
        await d.close()
