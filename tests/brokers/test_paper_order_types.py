"""The paper broker's conditional orders and order lists at engine prices (PaperBroker.on_price).

Same rules as the simulator (brokers/trigger_rules.py): stops refused when they would trigger
immediately, untriggered stops holding their funds, trailing stops following the peak, OCO legs
expiring each other, OTOCO legs working once the entry fills, cancelling a leg cancels its list,
and the trigger / trailing state surviving a restart (SQLite).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.filters import SymbolRules
from brokers.models import ExchangeList, ExchangeOrder, ListRequest, OrderRejected, OrderRequest
from brokers.orders.lists import oco_request
from brokers.paper.broker import MIGRATIONS, PaperBroker
from simulator import symbol_info
from storage import Database

D = Decimal
RULES = SymbolRules.from_exchange_info(symbol_info("BTCUSDT", 65000.0))
START = {"USDT": D(100000), "BTC": D(1)}


class Rig:
    """A paper broker on one database, its engine price, and what its handlers received."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.price = D(65000)
        self.updates: list[ExchangeOrder] = []
        self.lists: list[ExchangeList] = []

        async def rules(symbol: str) -> SymbolRules | None:
            return RULES if symbol == "BTCUSDT" else None

        async def price(symbol: str) -> Decimal | None:
            return self.price

        async def on_update(order: ExchangeOrder) -> None:
            self.updates.append(order)

        async def on_list(lst: ExchangeList) -> None:
            self.lists.append(lst)

        self.broker = PaperBroker(db, rules=rules, price=price, starting_balances=START)
        self.broker.set_event_handler(on_update)
        self.broker.set_list_handler(on_list)

    async def tick(self, *prices: str) -> None:
        for p in prices:
            self.price = D(p)
            await self.broker.on_price("BTCUSDT", self.price)

    async def balance(self, asset: str) -> tuple[Decimal, Decimal]:
        b = next((b for b in await self.broker.balances() if b.asset == asset), None)
        return (D(0), D(0)) if b is None else (b.free, b.locked)

    def last(self, cid: str) -> ExchangeOrder:
        return [u for u in self.updates if u.client_order_id == cid][-1]


async def open_rig(path: Path | str) -> Rig:
    db = await Database.open(path)
    await db.migrate([MIGRATIONS])
    rig = Rig(db)
    await rig.broker.start()
    return rig


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await open_rig(":memory:")
    try:
        yield r
    finally:
        await r.db.close()


def order(cid: str, side: str, otype: str, **kw: object) -> OrderRequest:
    return OrderRequest("BTCUSDT", side, otype, cid, quantity=D("0.01"), **kw)  # type: ignore[arg-type]


def test_paper_says_what_it_takes() -> None:
    assert {"STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"} <= PaperBroker.order_types
    assert PaperBroker.list_kinds == {"OCO", "OTOCO"}


async def test_a_stop_loss_sell_waits_then_fills_as_a_market_order(rig: Rig) -> None:
    placed = await rig.broker.place(order("sl", "SELL", "STOP_LOSS", stop_price=D(64000)))
    assert placed.status == "NEW" and not placed.triggered and placed.stop_price == D(64000)
    assert await rig.balance("BTC") == (D("0.99"), D("0.01"))
    assert "BTCUSDT" in rig.broker.resting_symbols()
    await rig.tick("64500")
    assert rig.updates == []
    await rig.tick("63980")
    filled = rig.last("sl")
    assert filled.status == "FILLED" and filled.triggered
    assert filled.fills[0].price == D("63948.01")  # 63,980 less the 0.05 % slippage
    assert await rig.balance("BTC") == (D("0.99"), D(0))


async def test_refusals_use_binances_codes(rig: Rig) -> None:
    with pytest.raises(OrderRejected, match=r"Order would trigger immediately\.") as exc:
        await rig.broker.place(order("x1", "SELL", "STOP_LOSS", stop_price=D(65000)))
    assert exc.value.code == -2010
    with pytest.raises(OrderRejected, match="Filter failure: TRAILING_DELTA") as exc:
        await rig.broker.place(order("x2", "BUY", "TAKE_PROFIT", trailing_delta=5))
    assert exc.value.code == -1013
    for i in range(5):
        await rig.broker.place(order(f"ok{i}", "SELL", "STOP_LOSS", stop_price=D(60000 + i)))
    with pytest.raises(OrderRejected, match="Filter failure: MAX_NUM_ALGO_ORDERS") as exc:
        await rig.broker.place(order("x3", "SELL", "STOP_LOSS", stop_price=D(59000)))
    assert exc.value.code == -2010


async def test_a_trailing_stop_limit_follows_the_peak(rig: Rig) -> None:
    req = order("tr", "SELL", "STOP_LOSS_LIMIT", trailing_delta=100, price=D(60000), time_in_force="GTC")
    assert (await rig.broker.place(req)).trailing_delta == 100
    await rig.tick("65500", "66000", "65400", "65340.01")
    assert rig.updates == []
    await rig.tick("65340")
    assert rig.last("tr").status == "FILLED" and rig.last("tr").fills[0].price == D(65340)


async def test_trailing_and_triggered_state_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "paper.db"
    first = await open_rig(path)
    await first.broker.place(order("trail", "SELL", "STOP_LOSS", trailing_delta=100))
    req = order("sll", "BUY", "STOP_LOSS_LIMIT", stop_price=D(66000), price=D(65900), time_in_force="GTC")
    await first.broker.place(req)
    await first.tick("66100")  # the trailing peak moves to 66,100; the stop-limit triggers and rests
    assert first.last("sll").triggered and first.last("sll").status == "NEW"
    await first.db.close()
    second = await open_rig(path)
    try:
        assert second.broker.resting_symbols() == ["BTCUSDT"]
        await second.tick("65500")  # below 66,100 by less than 1 %; at or below the rested limit
        assert second.last("sll").status == "FILLED" and second.last("sll").fills[0].price == D(65900)
        assert [u for u in second.updates if u.client_order_id == "trail"] == []
        await second.tick("65439")  # 66,100 × 0.99: only a remembered peak makes this trigger
        assert second.last("trail").status == "FILLED"
    finally:
        await second.db.close()


async def test_an_otoco_survives_a_restart(tmp_path: Path) -> None:
    first = await open_rig(tmp_path / "paper.db")
    entry = order("e", "BUY", "LIMIT", price=D(64000), time_in_force="GTC")
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(66000))
    sl = order("sl", "SELL", "STOP_LOSS", stop_price=D(63000))
    await first.broker.place_list(ListRequest("OTOCO", "BTCUSDT", "r", tp, sl, working=entry))
    await first.tick("63990")  # the entry fills, the OCO legs go to work
    await first.db.close()
    second = await open_rig(tmp_path / "paper.db")
    try:
        assert [lst.list_client_id for lst in await second.broker.open_lists()] == ["r"]
        await second.tick("62000")
        assert second.last("sl").status == "FILLED" and second.last("tp").status == "EXPIRED"
        assert second.lists[-1].done and await second.broker.open_lists() == []
    finally:
        await second.db.close()


async def test_an_oco_stop_fill_expires_the_take_profit(rig: Rig) -> None:
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(67000))
    sl = order("sl", "SELL", "STOP_LOSS", stop_price=D(63000))
    placed = await rig.broker.place_list(ListRequest("OCO", "BTCUSDT", "oco", tp, sl))
    assert placed.contingency_type == "OCO" and not placed.done
    assert [o.status for o in placed.orders] == ["NEW", "NEW"]
    assert await rig.balance("BTC") == (D("0.99"), D("0.01"))  # locked once
    assert [lst.list_client_id for lst in await rig.broker.open_lists()] == ["oco"]
    await rig.tick("62950")
    assert rig.last("tp").status == "EXPIRED" and rig.last("sl").status == "FILLED"
    assert rig.lists[-1].done and rig.lists[-1].list_client_id == "oco"
    assert await rig.broker.open_lists() == []
    assert await rig.balance("BTC") == (D("0.99"), D(0))
    done = await rig.broker.query_list("oco")
    assert done is not None and done.done


async def test_a_buy_oco_from_oco_request_takes_profit_below(rig: Rig) -> None:
    req = oco_request(
        symbol="BTCUSDT", side="BUY", quantity=D("0.01"), take_profit=D(64000), stop=D(66000), stop_limit=None,
        list_client_id="boco", ids=("btp", "bsl"), owner=None,
    )  # fmt: skip
    await rig.broker.place_list(req)
    assert await rig.balance("USDT") == (D(100000) - D(660), D(660))
    await rig.tick("63900")
    assert rig.last("btp").status == "FILLED" and rig.last("btp").fills[0].price == D(63900)
    assert rig.last("bsl").status == "EXPIRED"
    assert await rig.balance("USDT") == (D(100000) - D(639), D(0))


async def test_oco_prices_are_checked(rig: Rig) -> None:
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(67000))
    sl = order("sl", "SELL", "STOP_LOSS", stop_price=D(65500))
    with pytest.raises(OrderRejected, match="relationship of the prices") as exc:
        await rig.broker.place_list(ListRequest("OCO", "BTCUSDT", "bad", tp, sl))
    assert exc.value.code == -2010
    assert await rig.broker.open_orders() == [] and await rig.balance("BTC") == (D(1), D(0))


async def test_otoco_legs_work_once_the_entry_fills(rig: Rig) -> None:
    entry = order("entry", "BUY", "LIMIT", price=D(64000), time_in_force="GTC")
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(66000))
    sl = order("sl", "SELL", "STOP_LOSS", stop_price=D(63000))
    placed = await rig.broker.place_list(ListRequest("OTOCO", "BTCUSDT", "oto", tp, sl, working=entry))
    assert placed.contingency_type == "OTO"
    assert {o.client_order_id: o.status for o in placed.orders} == {
        "entry": "NEW", "tp": "PENDING_NEW", "sl": "PENDING_NEW",
    }  # fmt: skip
    await rig.tick("65500")
    assert rig.updates == []
    await rig.tick("63990")
    assert rig.last("entry").status == "FILLED"
    assert rig.last("tp").status == "NEW" and rig.last("sl").status == "NEW"
    assert rig.lists[-1].contingency_type == "OCO" and not rig.lists[-1].done
    await rig.tick("66100")
    assert rig.last("tp").status == "FILLED" and rig.last("sl").status == "EXPIRED"
    assert rig.lists[-1].done
    assert await rig.balance("BTC") == (D(1) + D("0.00999") - D("0.01"), D(0))


async def test_cancelling_a_leg_cancels_the_list(rig: Rig) -> None:
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(67000))
    sl = order("sl", "SELL", "STOP_LOSS_LIMIT", stop_price=D(63000), price=D(62900), time_in_force="GTC")
    await rig.broker.place_list(ListRequest("OCO", "BTCUSDT", "c", tp, sl))
    cancelled = await rig.broker.cancel("BTCUSDT", "sl")
    assert cancelled.status == "CANCELED" and rig.last("tp").status == "CANCELED"
    assert (await rig.broker.query_list("c")).done  # type: ignore[union-attr]
    assert await rig.balance("BTC") == (D(1), D(0))
    with pytest.raises(OrderRejected):
        await rig.broker.cancel_list("BTCUSDT", "c")


async def test_cancel_list_cancels_pending_legs_too(rig: Rig) -> None:
    entry = order("e", "BUY", "LIMIT", price=D(64000), time_in_force="GTC")
    tp = order("tp", "SELL", "LIMIT_MAKER", price=D(66000))
    sl = order("sl", "SELL", "STOP_LOSS", stop_price=D(63000))
    await rig.broker.place_list(ListRequest("OTOCO", "BTCUSDT", "o", tp, sl, working=entry))
    done = await rig.broker.cancel_list("BTCUSDT", "o")
    assert done.done and {o.status for o in done.orders} == {"CANCELED"}
    assert await rig.balance("USDT") == (D(100000), D(0))


@settings(max_examples=25, deadline=None)
@given(ticks=st.lists(st.integers(61_000, 69_000), min_size=1, max_size=12))
def test_an_oco_fills_at_most_one_leg_and_keeps_the_books(ticks: list[int]) -> None:
    """Whatever the prices, at most one leg fills, nothing stays locked once the list is done and
    the base asset is conserved (sold at most once)."""

    async def scenario() -> None:
        rig = await open_rig(":memory:")
        try:
            tp = order("tp", "SELL", "LIMIT_MAKER", price=D(67000))
            sl = order("sl", "SELL", "STOP_LOSS_LIMIT", stop_price=D(63000), price=D(62500), time_in_force="GTC")
            await rig.broker.place_list(ListRequest("OCO", "BTCUSDT", "p", tp, sl))
            await rig.tick(*(str(t) for t in ticks))
            legs = {o.client_order_id: o.status for o in (await rig.broker.query_list("p")).orders}  # type: ignore[union-attr]
            assert list(legs.values()).count("FILLED") <= 1
            free, locked = await rig.balance("BTC")
            if "FILLED" in legs.values():
                assert (free, locked) == (D("0.99"), D(0))
            else:
                assert free + locked == D(1) and free >= D("0.99")
        finally:
            await rig.db.close()

    asyncio.run(scenario())
