"""Brackets on market entries in a cluster (cluster/bracket_exits.py) with real PostgreSQL and the
exchange simulator: the entry and its exit OCO recorded together at a front, admitted together by
the order leader, the exit sized to what the entry acquired and sent once the entry filled; an
entry refused voids its exit; while trading is halted the exit waits and goes out after the resume
(or is voided by ``cancel_order``); an exit a dead leader claimed is settled by its
``listClientOrderId`` — sent again only when the exchange never received it.  The exchange's own
records (the simulator's orders, fills, lists and request counts) are the oracle."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import orjson
import pytest

from brokers import Actor, HaltAuthority, OrderInputError, OrderRefused, OrderRequest, SafetyLimits, exit_request
from cluster import bracket_exits
from cluster.account_mirror import AccountView
from cluster.front_orders import FrontOrders
from cluster.halt import ClusterHalt
from cluster.order_leader import OrderLeader
from cluster.orders import INTENTS_CHANNEL, LIST_REQUEST_JSON, ORDER_JSON, REQUEST_JSON, OrderIntents
from storage import PostgresDatabase
from testkit.workers import until
from tests.cluster import test_cluster_lists
from tests.cluster.test_cluster_lists import ACCOUNT, SYMBOL, _lists_on_exchange, _on_exchange, leading
from tests.cluster.test_order_leader import leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

sim = test_cluster_lists.sim  # the fixture: the simulator trading BTCUSDT at 65,000
PRICE = 65000.0
ALICE = Actor("alice")
OCO_POSTS = "POST /api/v3/orderList/oco"


def _bracket(tp: float = 1.05, sl: float = 0.9) -> dict[str, Decimal | None]:
    return {"take_profit": Decimal(f"{PRICE * tp:.2f}"), "stop_loss": Decimal(f"{PRICE * sl:.2f}"), "stop_limit": None}


def _market(cid: str, qty: str = "0.002") -> OrderRequest:
    return OrderRequest(SYMBOL, "BUY", "MARKET", cid, quantity=Decimal(qty))


async def _row(db: PostgresDatabase, cid: str) -> Any:
    return await db.fetchrow("SELECT * FROM cluster_order_intents WHERE client_order_id = $1", cid)


async def test_a_market_entry_fills_and_its_exit_sells_what_it_bought_once(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    _, db = cluster
    broker = await leader_broker(sim)
    async with leading(db, broker, member_id="m") as (_leader, intents):
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        placed = await front.place_parsed(_market("mk-entry"), _bracket(), owner="alice")

        entry = _on_exchange(sim)["mk-entry"]
        assert (placed["order_id"], placed["status"], entry.status) == ("mk-entry", "Filled", "FILLED")
        bracket = placed["bracket"]
        assert (bracket["state"], bracket["kind"], bracket["list_status"]) == ("placed", "OCO", "EXECUTING")
        assert [(leg["leg"], leg["state"]) for leg in bracket["legs"]] == [("take_profit", "Open"), ("stop", "Open")]
        # the oracle: the exchange's own fills of the entry and its LOT_SIZE step
        fee = sum(Decimal(f["commission"]) for f in entry.fills if f["commissionAsset"] == "BTC")
        step = (await broker.rules(SYMBOL)).step_size  # type: ignore[union-attr]
        expected = ((Decimal("0.002") - fee) // step) * step
        assert fee > 0 and expected < Decimal("0.002")
        assert {Decimal(str(leg["quantity"])) for leg in bracket["legs"]} == {expected}
        assert list(_lists_on_exchange(sim)) == [bracket["list_id"]] and sim.exchange.requests[OCO_POSTS] == 1
        legs = {leg["order_id"] for leg in bracket["legs"]}
        assert {_on_exchange(sim)[c].orig_qty for c in legs} == {expected}

        # counted once, with the entry: the entry's value plus the larger exit leg
        entry_row, exit_row = await _row(db, "mk-entry"), await _row(db, bracket["list_id"])
        assert entry_row["notional"] > Decimal(PRICE * 0.002) and exit_row["notional"] is None
        assert exit_row["entry_client_order_id"] == "mk-entry" and exit_row["state"] == "placed"

        # get_orders lists the entry with its bracket, and the exit's legs
        listed = {o["id"]: o for o in await AccountView(db, ACCOUNT).get_orders("all", actor=ALICE)}
        assert listed["mk-entry"]["bracket"] == {"list_id": bracket["list_id"], "state": "placed"}
        assert {listed[leg["order_id"]]["list_id"] for leg in bracket["legs"]} == {bracket["list_id"]}

        # its ids are taken; the exit is cancelled whole by a leg's id, by the leader
        with pytest.raises(OrderRefused, match="already used"):
            await front.place_parsed(_market("mk-entry"), _bracket(), owner="alice")
        assert await front.cancel_order(bracket["legs"][1]["order_id"], actor=ALICE) == {
            "ok": True,
            "list_id": bracket["list_id"],
        }
        assert {_on_exchange(sim)[c].status for c in legs} == {"CANCELED"}
        assert sim.exchange.requests[OCO_POSTS] == 1


async def test_an_entry_the_leader_refuses_voids_its_exit(sim: Any, cluster: tuple[str, PostgresDatabase]) -> None:
    """The take-profit leg's value is over the per-order limit though the entry's is not: refused
    together at admission, nothing sent, the exit void (not listed by get_orders)."""
    _, db = cluster
    broker = await leader_broker(sim)
    limits = SafetyLimits(Decimal(PRICE * 0.002 * 1.02), None)
    async with leading(db, broker, member_id="m", limits=limits) as (_leader, intents):
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        with pytest.raises(OrderRefused, match="per-order limit"):
            await front.place_parsed(_market("mk-refused"), _bracket(tp=1.05), owner="alice")
        list_id = exit_request(_market("mk-refused"), _bracket(), working=False).list_client_id
        await until(lambda: _state_is(db, list_id, "void"), 10.0)
        assert "not placed" in (await _row(db, list_id))["answer"]
        assert "mk-refused" not in _on_exchange(sim) and sim.exchange.requests.get(OCO_POSTS, 0) == 0
        with pytest.raises(OrderInputError, match="Void"):
            await front.cancel_order(list_id, actor=ALICE)


async def test_while_halted_the_exit_waits_and_goes_out_after_the_resume(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """Two entries filled before a halt (their exits waiting): the halted leader sends neither exit;
    one is voided by cancel_order; after the resume the other is sent, once."""
    _, db = cluster
    broker = await leader_broker(sim)
    exits = await _filled_entries(db, broker, ["mk-h1", "mk-h2"], "waiting")
    halt = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL)
    await halt.halt(reason="test", by=HaltAuthority.token("alice", admin=False))
    leader = OrderLeader(db, broker, account=ACCOUNT, member_id="m", ttl_s=2.0)
    try:
        await leader.step()
        await leader.step()
        assert [(await _row(db, x.list_client_id))["state"] for x in exits] == ["waiting", "waiting"]
        assert sim.exchange.requests.get(OCO_POSTS, 0) == 0
        front = FrontOrders(leader_intents := OrderIntents(db), ACCOUNT)
        view = await bracket_exits.exit_view(leader_intents, ACCOUNT, exits[0], wait_s=30.0)  # halted: no wait
        assert view["state"] == "waiting" and "halted" in view["note"]
        assert await front.cancel_order(exits[0].take_profit.client_order_id, actor=ALICE) == {
            "ok": True,
            "list_id": exits[0].list_client_id,
        }
        await halt.resume(by=HaltAuthority.token("alice", admin=False))
        await leader.step()
        assert [(await _row(db, x.list_client_id))["state"] for x in exits] == ["void", "placed"]
        assert list(_lists_on_exchange(sim)) == [exits[1].list_client_id] and sim.exchange.requests[OCO_POSTS] == 1
        await leader.step()
        assert sim.exchange.requests[OCO_POSTS] == 1
        await leader_intents.close()
    finally:
        await leader.resign()
        await halt.close()
        await broker.close()


async def test_an_exit_a_dead_leader_claimed_is_settled_by_its_id_and_sent_only_if_never_received(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """Two exits left ``sending`` by a leader that died (an older fencing token): one reached the
    exchange, one did not.  The next leader waits out recvWindow and asks by listClientOrderId: the
    first is placed as found, the second armed again and sent — each list on the exchange once."""
    _, db = cluster
    broker = await leader_broker(sim)
    exits = await _filled_entries(db, broker, ["mk-d1", "mk-d2"], "sending")
    await broker.place_list(exits[0])  # the dead leader's request that arrived
    async with leading(db, broker, member_id="m2", settle_margin_s=0.2) as (_leader, _intents):
        for x in exits:
            await until(lambda x=x: _state_is(db, x.list_client_id, "placed"), 30.0)
    on_exchange = _lists_on_exchange(sim)
    assert sorted(on_exchange) == sorted(x.list_client_id for x in exits)
    assert sim.exchange.requests[OCO_POSTS] == 2  # the one that arrived, and the one sent again


async def test_an_entry_answered_without_its_fills_is_sized_from_the_mirrored_trades(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """An entry's answer from a settlement or the mirror carries no fills: its exit waits until the
    account mirror stored the entry's trades (under the exchange's order id, as myTrades names them),
    then goes out sized by their base-asset fee."""
    _, db = cluster
    broker = await leader_broker(sim)
    entry = _market("mk-nofills")
    exit_oco = exit_request(entry, _bracket(), working=False)
    filled = await broker.place(entry)
    await _record_filled(db, entry, exit_oco, ORDER_JSON.dump_python(dataclasses.replace(filled, fills=())))
    leader = OrderLeader(db, broker, account=ACCOUNT, member_id="m", ttl_s=2.0)
    try:
        await leader.step()
        assert (await _row(db, exit_oco.list_client_id))["state"] == "waiting"  # fills not known yet
        trades = [t for t in await broker.trades(SYMBOL) if t.client_order_id == filled.exchange_order_id]
        assert trades and all(t.commission_asset == "BTC" for t in trades)
        await db.executemany(
            "INSERT INTO cluster_account_fills (account, symbol, trade_id, client_order_id, side, quantity, price,"
            " commission, commission_asset, time_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            [(ACCOUNT, t.symbol, t.trade_id, t.client_order_id, t.side, t.quantity, t.price, t.commission,
              t.commission_asset, t.time_ms) for t in trades],
        )  # fmt: skip
        await leader.step()
        assert (await _row(db, exit_oco.list_client_id))["state"] == "placed"
        step = (await broker.rules(SYMBOL)).step_size  # type: ignore[union-attr]
        expected = ((Decimal("0.002") - sum(t.commission for t in trades)) // step) * step
        legs = (exit_oco.take_profit.client_order_id, exit_oco.stop.client_order_id)
        assert {_on_exchange(sim)[c].orig_qty for c in legs} == {expected}
    finally:
        await leader.resign()
        await broker.close()


async def _filled_entries(db: PostgresDatabase, broker: Any, cids: list[str], exit_state: str) -> list[Any]:
    """Market entries placed on the exchange (FILLED) and recorded with their exits in ``exit_state``
    (a dead leader's ``sending`` under token 0); the exits' requests."""
    exits = []
    for cid in cids:
        entry = _market(cid)
        exit_oco = exit_request(entry, _bracket(), working=False)
        filled = await broker.place(entry)
        await _record_filled(db, entry, exit_oco, ORDER_JSON.dump_python(filled), exit_state=exit_state)
        exits.append(exit_oco)
    return exits


async def _record_filled(
    db: PostgresDatabase, entry: OrderRequest, exit_oco: Any, order: Any, *, exit_state: str = "waiting"
) -> None:
    """An entry placed (FILLED) and its exit as a leader would have left them."""
    await db.execute(
        "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, sender_token, answer,"
        " claimed_at, answered_at) VALUES ($1, $2, 'alice', $3, 'placed', 0, $4, clock_timestamp(), clock_timestamp())",
        entry.client_order_id,
        ACCOUNT,
        REQUEST_JSON.dump_json(entry).decode(),
        orjson.dumps({"order": order}, default=str).decode(),
    )
    sending = exit_state == "sending"
    await db.execute(
        "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, kind,"
        " entry_client_order_id, sender_token, claimed_at) VALUES ($1, $2, 'alice', $3, $4, 'list', $5, $6,"
        " CASE WHEN $7 THEN clock_timestamp() END)",
        exit_oco.list_client_id,
        ACCOUNT,
        LIST_REQUEST_JSON.dump_json(exit_oco).decode(),
        exit_state,
        entry.client_order_id,
        0 if sending else None,
        sending,
    )
    await db.executemany(
        "INSERT INTO cluster_list_legs (client_order_id, list_client_order_id, leg) VALUES ($1, $2, $3)",
        [
            (exit_oco.take_profit.client_order_id, exit_oco.list_client_id, "take_profit"),
            (exit_oco.stop.client_order_id, exit_oco.list_client_id, "stop"),
        ],
    )


async def _state_is(db: PostgresDatabase, cid: str, state: str) -> bool:
    return await db.fetchval("SELECT state FROM cluster_order_intents WHERE client_order_id = $1", cid) == state
