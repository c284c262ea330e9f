"""BinanceBroker + OrderService against the simulator: stop orders, OCO, OTOCO and brackets as Binance
documents them (rest-api.md, user-data-stream.md), and the parsing of their REST answers and events.

Prices move through the simulator's control API (``POST /sim/v1/price``); the service learns the
outcome from reconciliation (deterministic: no waiting on the stream), or from the user stream
where a test says so (waiting on the event itself, never on a sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from decimal import Decimal as D
from typing import Any

import aiohttp
import pytest

from brokers.binance.broker import BinanceBroker, order_from_rest
from brokers.binance.lists import list_from_event, list_from_rest, list_params
from brokers.binance.user_stream import UserStream, UserStreamEnded, execution_to_update
from brokers.models import Actor, ExchangeList
from brokers.orders.brackets import bracket_ids
from brokers.orders.lists import oco_request
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator
from storage import Database

ALICE = Actor("alice")
QTY = 0.002


@pytest.fixture
async def service(sim: RunningSimulator) -> AsyncIterator[OrderService]:
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await broker.sync_time()
    svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
    try:
        yield svc
    finally:
        await broker.close()
        await db.close()


async def move(sim: RunningSimulator, price: float) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": str(price)}) as resp:
            assert resp.status == 200, await resp.text()


async def orders(svc: OrderService) -> dict[str, dict[str, Any]]:
    return {o["id"]: o for o in await svc.get_orders("all", actor=ALICE)}


async def buy_base(svc: OrderService) -> None:
    """More than the tests sell: the buy's commission is taken in BTC."""
    out = await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": QTY * 2}, owner="alice")
    assert out["status"] == "Filled"


# --- against the simulator ---------------------------------------------------------------------
async def test_a_stop_loss_sell_triggers_and_fills_after_the_price_falls(
    service: OrderService, sim: RunningSimulator
) -> None:
    await buy_base(service)
    out = await service.place_order(
        {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "stop_price": 64000, "quantity": QTY,
         "client_order_id": "sl-1"}, owner="alice",
    )  # fmt: skip
    assert out["status"] == "Open"
    listed = (await orders(service))["sl-1"]
    assert (listed["state"], listed["triggered"], listed["stop_price"]) == ("Open", False, 64000.0)
    await move(sim, 63900)
    await service.reconcile()
    listed = (await orders(service))["sl-1"]
    assert (listed["state"], listed["triggered"]) == ("Filled", True)
    assert listed["filled_quantity"] == QTY


async def test_a_triggered_stop_limit_that_has_not_filled_shows_as_open_and_triggered(
    service: OrderService, sim: RunningSimulator
) -> None:
    await buy_base(service)
    await service.place_order(
        {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss_limit", "stop_price": 64000, "price": 64500,
         "quantity": QTY, "client_order_id": "sll-1"}, owner="alice",
    )  # fmt: skip
    await move(sim, 63900)
    await service.reconcile()
    listed = (await orders(service))["sll-1"]
    assert (listed["state"], listed["triggered"], listed["time_in_force"]) == ("Open", True, "GTC")


async def test_an_oco_stop_fill_cancels_the_take_profit_and_both_show_in_get_orders(
    service: OrderService, sim: RunningSimulator
) -> None:
    await buy_base(service)
    out = await service.lists.place_oco(
        {"symbol": "BTCUSDT", "side": "sell", "quantity": QTY, "take_profit_price": 70000, "stop_price": 60000},
        owner="alice",
    )
    assert out["kind"] == "OCO" and out["list_status"] == "EXECUTING"
    tp, sl = (leg["order_id"] for leg in out["legs"])
    assert [leg["state"] for leg in out["legs"]] == ["Open", "Open"]
    await move(sim, 59000)
    await service.reconcile()
    listed = await orders(service)
    assert listed[sl]["state"] == "Filled" and listed[sl]["triggered"] is True
    assert listed[tp]["state"] == "Cancelled"
    for cid, role in ((tp, "take_profit"), (sl, "stop")):
        assert (listed[cid]["list_id"], listed[cid]["list_kind"], listed[cid]["leg"]) == (out["list_id"], "OCO", role)
    row = await service.lists.store.get(out["list_id"])
    assert row is not None and row.status == "ALL_DONE"


async def test_cancel_order_with_a_list_id_cancels_both_legs(service: OrderService, sim: RunningSimulator) -> None:
    await buy_base(service)
    out = await service.lists.place_oco(
        {"symbol": "BTCUSDT", "side": "sell", "quantity": QTY, "take_profit_price": 70000, "stop_price": 60000,
         "stop_limit_price": 59900}, owner="alice",
    )  # fmt: skip
    assert await service.cancel_order(out["list_id"], actor=ALICE) == {"ok": True, "list_id": out["list_id"]}
    listed = await orders(service)
    assert {listed[leg["order_id"]]["state"] for leg in out["legs"]} == {"Cancelled"}
    assert await service.broker.open_lists() == []  # type: ignore[attr-defined]


async def test_a_market_entry_with_a_bracket_gets_its_oco_from_the_daemon(
    service: OrderService, sim: RunningSimulator
) -> None:
    out = await service.place_order(
        {"symbol": "BTCUSDT", "side": "buy", "quantity": QTY, "client_order_id": "bk-m1",
         "bracket": {"take_profit": 70000, "stop_loss": 60000}}, owner="alice",
    )  # fmt: skip
    list_id, tp_id, sl_id = bracket_ids("bk-m1")
    assert out["status"] == "Filled" and out["bracket"]["state"] == "placed"
    assert {leg["quantity"] for leg in out["bracket"]["legs"]} == {0.00199}  # 0.002 less the 0.1% fee in BTC
    exchange_lists = await service.broker.open_lists()  # type: ignore[attr-defined]
    assert [lst.list_client_id for lst in exchange_lists] == [list_id]
    await service.reconcile()
    listed = await orders(service)
    assert (listed[tp_id]["state"], listed[sl_id]["state"]) == ("Open", "Open")
    assert listed["bk-m1"]["bracket"] == {"list_id": list_id, "state": "placed"}


async def test_a_limit_entry_with_a_bracket_is_one_otoco_whose_exit_works_after_the_fill(
    service: OrderService, sim: RunningSimulator
) -> None:
    """A sell entry (its fee is in USDT, so the exit can buy back the same quantity) with a buy exit."""
    await buy_base(service)
    out = await service.place_order(
        {"symbol": "BTCUSDT", "side": "sell", "type": "limit", "price": 66000, "quantity": QTY,
         "client_order_id": "bk-l1", "bracket": {"take_profit": 60000, "stop_loss": 70000}}, owner="alice",
    )  # fmt: skip
    list_id, tp_id, sl_id = bracket_ids("bk-l1")
    assert out["bracket"]["kind"] == "OTOCO" and out["bracket"]["list_id"] == list_id
    await move(sim, 66100)
    await service.reconcile()
    listed = await orders(service)
    assert listed["bk-l1"]["state"] == "Filled"
    assert (listed[tp_id]["state"], listed[sl_id]["state"]) == ("Open", "Open")
    assert listed[sl_id]["list_kind"] == "OTOCO"


async def test_a_cancelled_entry_never_gets_its_oco(service: OrderService, sim: RunningSimulator) -> None:
    service.broker.list_kinds = frozenset({"OCO"})  # type: ignore[misc]  # the daemon's own bracket path
    out = await service.place_order(
        {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 64000, "quantity": QTY,
         "client_order_id": "bk-c1", "bracket": {"take_profit": 70000, "stop_loss": 60000}}, owner="alice",
    )  # fmt: skip
    assert out["bracket"]["state"] == "waiting"
    await service.cancel_order("bk-c1", actor=ALICE)
    await move(sim, 63000)
    await service.reconcile()
    assert await service.broker.open_lists() == []  # type: ignore[attr-defined]
    row = await service.lists.store.get(bracket_ids("bk-c1")[0])
    assert row is not None and row.bracket_state == "void"


async def test_list_status_events_reach_the_list_handler(service: OrderService, sim: RunningSimulator) -> None:
    """With the user stream running, the OCO's ALL_DONE listStatus arrives after the stop fills."""
    broker = service.broker
    assert isinstance(broker, BinanceBroker)
    await buy_base(service)
    subscribed, done = asyncio.Event(), asyncio.Event()

    async def on_list(lst: ExchangeList) -> None:
        await service.lists.on_list_update(lst)
        if lst.done:
            done.set()

    async def on_resubscribed() -> None:
        subscribed.set()

    async with aiohttp.ClientSession() as session:
        stream = UserStream(
            session, f"{sim.ws_url}/ws-api/v3", api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET,
            on_order=service.on_update, on_list=on_list, on_resubscribed=on_resubscribed,
            time_offset_ms=lambda: int(broker._client.timestamp_offset),
        )  # fmt: skip

        async def supervised() -> None:
            with contextlib.suppress(UserStreamEnded):
                await stream.run()

        task = asyncio.create_task(supervised())
        try:
            async with asyncio.timeout(10):
                await subscribed.wait()
            out = await service.lists.place_oco(
                {"symbol": "BTCUSDT", "side": "sell", "quantity": QTY, "take_profit_price": 70000,
                 "stop_price": 60000}, owner="alice",
            )  # fmt: skip
            await move(sim, 59000)
            async with asyncio.timeout(10):
                await done.wait()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    row = await service.lists.store.get(out["list_id"])
    assert row is not None and row.status == "ALL_DONE"


# --- parsing, offline ---------------------------------------------------------------------------
def test_rest_answers_carry_stop_fields_membership_and_the_trigger() -> None:
    base = {"symbol": "BTCUSDT", "clientOrderId": "a", "status": "NEW", "side": "SELL", "type": "STOP_LOSS",
            "origQty": "1", "executedQty": "0", "cummulativeQuoteQty": "0", "price": "0", "orderId": 7}  # fmt: skip
    untriggered = order_from_rest({**base, "stopPrice": "60000.00", "trailingDelta": 150, "workingTime": -1})
    assert (untriggered.stop_price, untriggered.trailing_delta, untriggered.triggered) == (D(60000), 150, False)
    assert order_from_rest({**base, "stopPrice": "60000", "workingTime": 1700000000000}).triggered is True
    assert order_from_rest({**base, "type": "LIMIT", "workingTime": 1}).triggered is False


def test_execution_reports_and_list_status_events_are_parsed() -> None:
    e = {"e": "executionReport", "s": "BTCUSDT", "c": "a", "S": "SELL", "o": "STOP_LOSS_LIMIT", "q": "1",
         "p": "59900", "P": "60000", "d": 200, "X": "NEW", "x": "NEW", "z": "0", "Z": "0", "i": 3, "g": 9,
         "W": 1700000000000}  # fmt: skip
    update = execution_to_update(e)
    assert (update.stop_price, update.trailing_delta, update.triggered) == (D(60000), 200, True)
    assert execution_to_update({k: v for k, v in e.items() if k != "W"}).triggered is False
    lst = list_from_event(
        {"e": "listStatus", "s": "BTCUSDT", "g": 2, "c": "OCO", "l": "ALL_DONE", "L": "ALL_DONE", "C": "L1",
         "T": 1, "O": [{"s": "BTCUSDT", "i": 17, "c": "x"}, {"s": "BTCUSDT", "i": 18, "c": "y"}]}
    )  # fmt: skip
    assert lst.done and lst.list_client_id == "L1" and [o.client_order_id for o in lst.orders] == ["x", "y"]
    assert {o.status for o in lst.orders} == {""}  # ids only: nothing is applied from them
    cancelled = list_from_rest(
        {"listClientOrderId": "L1", "contingencyType": "OCO", "listStatusType": "ALL_DONE",
         "listOrderStatus": "ALL_DONE", "symbol": "BTCUSDT", "orderListId": 0,
         "orders": [{"symbol": "BTCUSDT", "orderId": 2, "clientOrderId": "x"}],
         "orderReports": [{**{"symbol": "BTCUSDT", "side": "SELL", "type": "STOP_LOSS", "origQty": "1",
                              "executedQty": "0", "cummulativeQuoteQty": "0", "status": "CANCELED", "orderId": 2},
                           "origClientOrderId": "x", "clientOrderId": "cancel-1", "stopPrice": "1"}]},
        order_from_rest,
    )  # fmt: skip
    assert cancelled.orders[0].client_order_id == "x" and cancelled.orders[0].status == "CANCELED"
    assert cancelled.orders[0].list_client_id == "L1"


def test_legs_map_to_above_and_below_by_side() -> None:
    sell = oco_request(symbol="BTCUSDT", side="SELL", quantity=D("0.5"), take_profit=D(70000), stop=D(60000),
                       stop_limit=D(59900), list_client_id="L", ids=("t", "s"), owner=None)  # fmt: skip
    p = list_params(sell)
    assert (p["aboveType"], p["abovePrice"], p["belowType"], p["belowStopPrice"], p["belowPrice"]) == (
        "LIMIT_MAKER", "70000", "STOP_LOSS_LIMIT", "60000", "59900",
    )  # fmt: skip
    assert p["belowTimeInForce"] == "GTC" and "aboveTimeInForce" not in p and p["quantity"] == "0.5"
    buy = oco_request(symbol="BTCUSDT", side="BUY", quantity=D(1), take_profit=D(60000), stop=D(70000),
                      stop_limit=None, list_client_id="L", ids=("t", "s"), owner=None)  # fmt: skip
    p = list_params(buy)
    assert (p["aboveType"], p["aboveStopPrice"], p["belowType"], p["belowStopPrice"], p["belowPrice"]) == (
        "STOP_LOSS", "70000", "TAKE_PROFIT_LIMIT", "60000", "60000",
    )  # fmt: skip
