"""Order lists on a cluster (cluster/list_intents.py) with real PostgreSQL and the exchange
simulator: an OCO recorded at a front is admitted and sent once by the order leader, listed by its
legs, followed by the leader's mirror (a take-profit that fills, its stop expiring, the fills
mirrored) and cancelled whole by a leg's id; an OCO over the leader's per-order limit or with its
prices on the wrong side of the market is refused before the exchange; and a list a former leader
may have sent is settled by its ``listClientOrderId`` — found → placed, absent → rejected — never
sent again.  The exchange's own records (the simulator's lists and requests) are the oracle."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from brokers import Actor, OrderInputError, OrderRefused, OrderRequest, SafetyLimits, new_oco, parse_oco
from cluster.account_mirror import AccountMirror, AccountView
from cluster.front_orders import FrontOrders
from cluster.list_intents import LIST_REQUEST_JSON
from cluster.order_leader import OrderLeader, run_leader
from cluster.orders import OrderIntents
from storage import PostgresDatabase
from testkit.workers import real_clock_simulator, until
from tests.cluster.test_order_leader import leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

ACCOUNT = "sim"
SYMBOL = "BTCUSDT"
ALICE = Actor("alice")


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        running.exchange.trade(SYMBOL, 65000.0, 0.01)
        yield running


@contextlib.asynccontextmanager
async def leading(db: PostgresDatabase, broker: Any, **options: Any) -> AsyncIterator[tuple[OrderLeader, OrderIntents]]:
    """An order leader of ACCOUNT running in this process, and the fronts' intents; both stopped, and
    ``broker`` closed, at the end."""
    leader = OrderLeader(db, broker, account=ACCOUNT, ttl_s=2.0, **options)
    stop = asyncio.Event()
    task = asyncio.create_task(run_leader(leader, stop, idle_s=0.1))
    intents = OrderIntents(db)
    try:
        yield leader, intents
    finally:
        stop.set()
        await task
        await intents.close()
        await broker.close()


def _oco(qty: str, tp: float, stop: float) -> dict[str, Any]:
    return parse_oco(
        {
            "symbol": SYMBOL,
            "side": "sell",
            "quantity": qty,
            "take_profit_price": f"{tp:.2f}",
            "stop_price": f"{stop:.2f}",
        }
    )


def _lists_on_exchange(sim: Any) -> dict[str, Any]:
    lists = sim.exchange.order_lists
    return {client_id: lists.lists[list_id] for client_id, list_id in lists.by_client.items()}


def _on_exchange(sim: Any) -> dict[str, Any]:
    return {o.client_order_id: o for o in sim.exchange.account.orders.values()}


async def test_an_oco_at_a_front_is_sent_once_followed_and_cancelled_whole(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    _, db = cluster
    broker = await leader_broker(sim)
    price = 65000.0
    limits = SafetyLimits(Decimal(price * 0.01), None)
    async with leading(db, broker, member_id="m", limits=limits) as (leader, intents):
        mirror = AccountMirror(db, broker, ACCOUNT, limits=leader.checks.limits)
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        view = AccountView(db, ACCOUNT)
        bought = OrderRequest(SYMBOL, "BUY", "MARKET", f"buy-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.009"))
        assert (await front.place_parsed(bought, None, owner="alice"))["status"] == "Filled"

        # refused before the exchange: prices on the wrong side, a leg over the leader's per-order limit
        with pytest.raises(OrderInputError, match="take_profit_price > last price"):
            await front.place_parsed_oco(_oco("0.002", price * 0.99, price * 0.95), owner="alice")
        with pytest.raises(OrderRefused, match="per-order limit"):
            await front.place_parsed_oco(_oco("0.02", price * 1.05, price * 0.95), owner="alice")
        assert not _lists_on_exchange(sim) and sim.exchange.requests.get("POST /api/v3/orderList/oco", 0) == 0

        placed = await front.place_parsed_oco(_oco("0.004", price * 1.05, price * 0.95), owner="alice")
        list_id = placed["list_id"]
        assert (placed["kind"], placed["list_status"]) == ("OCO", "EXECUTING")
        assert [(leg["leg"], leg["state"]) for leg in placed["legs"]] == [("take_profit", "Open"), ("stop", "Open")]
        on_exchange = _lists_on_exchange(sim)
        assert list(on_exchange) == [list_id] and sim.exchange.requests["POST /api/v3/orderList/oco"] == 1
        legs = {leg["order_id"] for leg in placed["legs"]}
        assert legs <= set(_on_exchange(sim)) and all(_on_exchange(sim)[c].status == "NEW" for c in legs)
        notional = await db.fetchval("SELECT notional FROM cluster_order_intents WHERE client_order_id = $1", list_id)
        assert notional == Decimal("0.004") * Decimal(f"{price * 1.05:.2f}")  # the larger exit leg counts

        listed = [o for o in await view.get_orders("open", actor=ALICE) if o.get("list_id") == list_id]
        assert sorted((o["leg"], o["status"]) for o in listed) == [("stop", "NEW"), ("take_profit", "NEW")]
        assert await view.get_orders("all", actor=Actor("bob")) == []

        # cancelled whole through one leg's id, by the leader
        stop_leg = next(leg["order_id"] for leg in placed["legs"] if leg["leg"] == "stop")
        with pytest.raises(OrderInputError, match="order not found"):
            await front.cancel_order(stop_leg, actor=Actor("bob"))
        assert await front.cancel_order(stop_leg, actor=ALICE) == {"ok": True, "list_id": list_id}
        assert {_on_exchange(sim)[c].status for c in legs} == {"CANCELED"}
        listed = [o for o in await view.get_orders("all", actor=ALICE) if o.get("list_id") == list_id]
        assert {o["status"] for o in listed} == {"CANCELED"}
        with pytest.raises(OrderInputError, match="invalid transition: Done"):
            await front.cancel_order(list_id, actor=ALICE)

        # a take-profit that fills: the mirror follows the legs and fetches their trades
        second = await front.place_parsed_oco(_oco("0.003", price * 1.02, price * 0.97), owner="alice")
        tp_leg = next(leg["order_id"] for leg in second["legs"] if leg["leg"] == "take_profit")
        await mirror.refresh()  # both legs rest: their states come from the open orders, not a list lookup
        assert sim.exchange.requests.get("GET /api/v3/orderList", 0) == 0
        sim.exchange.trade(SYMBOL, price * 1.03, 0.01)
        assert _on_exchange(sim)[tp_leg].status == "FILLED"
        await mirror.refresh()
        listed = {
            o["leg"]: o for o in await view.get_orders("all", actor=ALICE) if o.get("list_id") == second["list_id"]
        }
        assert (listed["take_profit"]["status"], listed["stop"]["status"]) == ("FILLED", "EXPIRED")
        assert sim.exchange.requests["GET /api/v3/orderList"] == 1  # the list that changed, read once
        assert listed["take_profit"]["filled_quantity"] == 0.003
        trades = await db.fetch(
            "SELECT side, quantity FROM cluster_account_fills WHERE account = $1 AND symbol = $2", ACCOUNT, SYMBOL
        )
        assert sorted((t["side"], Decimal(t["quantity"])) for t in trades) == [
            ("BUY", Decimal("0.009")),
            ("SELL", Decimal("0.003")),
        ]


async def test_a_bracket_on_a_limit_entry_goes_out_as_one_otoco_list(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """place_order with a bracket at a front: a limit entry and its exit as one OTOCO list (the exit
    works once the entry fills, on the exchange); the entry's id cannot be used again; the mirror
    follows the entry's fill.  (Market entries: tests/cluster/test_cluster_brackets.py.)"""
    _, db = cluster
    broker = await leader_broker(sim)
    price = 65000.0
    bracket = {
        "take_profit": Decimal(f"{price * 1.05:.2f}"),
        "stop_loss": Decimal(f"{price * 0.9:.2f}"),
        "stop_limit": None,
    }

    def entry(order_type: str, cid: str) -> OrderRequest:
        limit = Decimal(f"{price * 0.98:.2f}")
        return OrderRequest(SYMBOL, "BUY", order_type, cid, quantity=Decimal("0.002"), price=limit, time_in_force="GTC")  # type: ignore[arg-type]

    # an OTOCO's exit sells the entry's quantity: the entry's base-asset fee must come from BTC already held
    await broker.place(OrderRequest(SYMBOL, "BUY", "MARKET", "bk-fee", quantity=Decimal("0.001")))
    async with leading(db, broker, member_id="m") as (leader, intents):
        mirror = AccountMirror(db, broker, ACCOUNT, limits=leader.checks.limits)
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        view = AccountView(db, ACCOUNT)
        placed = await front.place_parsed(entry("LIMIT", "bk-entry"), bracket, owner="alice")
        assert (placed["order_id"], placed["status"], placed["exchange_status"]) == ("bk-entry", "Open", "NEW")
        assert placed["bracket"]["kind"] == "OTOCO"
        assert [leg["leg"] for leg in placed["bracket"]["legs"]] == ["working", "take_profit", "stop"]
        on_exchange = _lists_on_exchange(sim)
        assert list(on_exchange) == [placed["bracket"]["list_id"]]
        assert sim.exchange.requests["POST /api/v3/orderList/otoco"] == 1
        assert _on_exchange(sim)["bk-entry"].status == "NEW"
        with pytest.raises(OrderRefused, match="already used"):
            await front.place_parsed(entry("LIMIT", "bk-entry"), None, owner="alice")

        sim.exchange.trade(SYMBOL, price * 0.97, 0.01)  # the entry fills: its exit starts working
        assert _on_exchange(sim)["bk-entry"].status == "FILLED"
        await mirror.refresh()
        legs = {o["leg"]: o for o in await view.get_orders("all", actor=ALICE)}
        assert legs["working"]["status"] == "FILLED" and legs["working"]["filled_quantity"] == 0.002
        assert (legs["take_profit"]["state"], legs["stop"]["state"]) == ("Open", "Open")

        assert await front.cancel_order("bk-entry", actor=ALICE) == {
            "ok": True,
            "list_id": placed["bracket"]["list_id"],
        }
        exits = [leg["order_id"] for leg in placed["bracket"]["legs"][1:]]
        assert {_on_exchange(sim)[c].status for c in exits} == {"CANCELED"}


async def test_a_list_a_former_leader_may_have_sent_is_settled_by_its_id(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """Two list intents left ``sending`` by a leader that died (an older fencing token): one reached
    the exchange, one did not.  The next leader waits out recvWindow, asks by listClientOrderId and
    answers placed / rejected; it sends neither."""
    _, db = cluster
    broker = await leader_broker(sim)
    await broker.place(OrderRequest(SYMBOL, "BUY", "MARKET", "buy-settle", quantity=Decimal("0.01")))
    reqs = [new_oco(_oco("0.002", 65000 * 1.05, 65000 * 0.95), Decimal(65000), "alice") for _ in range(2)]
    for req in reqs:
        await db.execute(
            "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, kind, sender_token,"
            " claimed_at) VALUES ($1, $2, 'alice', $3, 'sending', 'list', 0, clock_timestamp())",
            req.list_client_id,
            ACCOUNT,
            LIST_REQUEST_JSON.dump_json(req).decode(),
        )
    await broker.place_list(reqs[0])  # the dead leader's request that arrived
    sent = sim.exchange.requests["POST /api/v3/orderList/oco"]
    async with leading(db, broker, member_id="m2", settle_margin_s=0.2) as (_, intents):
        found, absent = [await intents.wait_answer(r.list_client_id, 30) for r in reqs]
        assert found is not None and found.state == "placed" and found.order_list is not None
        assert {o.client_order_id for o in found.order_list.orders} == {reqs[0].take_profit.client_order_id,
                                                                       reqs[0].stop.client_order_id}  # fmt: skip
        assert absent is not None and absent.state == "rejected" and "never received" in (absent.error or "")
        assert sim.exchange.requests["POST /api/v3/orderList/oco"] == sent  # nothing sent again
        assert list(_lists_on_exchange(sim)) == [reqs[0].list_client_id]
        await until(lambda: _settled(db), 10.0)


async def _settled(db: PostgresDatabase) -> bool:
    left = await db.fetchval("SELECT COUNT(*) FROM cluster_order_intents WHERE state IN ('sending', 'unknown')")
    return int(left) == 0
