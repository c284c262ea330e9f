"""Partial fills through our brokers: the Binance broker against the simulator's book (an order's
answer and its stream reports stored once, positions and trade_execute's legs from what filled),
brackets sized on what an entry filled, and the paper broker's one size rule (brokers/paper/broker.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.binance.broker import BinanceBroker
from brokers.binance.user_stream import UserStream, UserStreamEnded
from brokers.filters import SymbolRules
from brokers.models import Actor, ExchangeOrder, OrderRequest
from brokers.orders.brackets import bracket_ids, exit_quantity
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from brokers.orders.trade_legs import ServiceLegs, place_leg
from brokers.paper.broker import MIGRATIONS as PAPER_MIGRATIONS
from brokers.paper.broker import PaperBroker
from brokers.positions import positions_from_fills
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator, symbol_info
from storage import Database

D = Decimal
ASSETS = {"BTCUSDT": ("BTC", "USDT")}
BRACKET = {"take_profit": 90000, "stop_loss": 50000}


async def until(cond: Callable[[], Any]) -> None:
    """Poll ``cond`` (sync or async) until it is true, at most 5 s."""
    async with asyncio.timeout(5):
        while True:
            got = cond()
            if asyncio.iscoroutine(got):
                got = await got
            if got:
                return
            await asyncio.sleep(0.01)


# --- the Binance broker on the simulator ---------------------------------------------------------
@dataclass
class Venue:
    sim: RunningSimulator
    broker: BinanceBroker
    svc: OrderService
    stream: UserStream
    stream_task: asyncio.Task[None]

    async def stop_stream(self) -> None:
        self.stream_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.stream_task

    def asks(self) -> list[tuple[Decimal, Decimal]]:
        return list(self.sim.exchange.book("BTCUSDT", 5).asks)

    async def fills(self, cid: str | None = None) -> list[Any]:
        return [f for f in await self.svc.store.fills("binance", "BTCUSDT") if cid is None or f.client_order_id == cid]


@pytest.fixture
async def venue() -> AsyncIterator[Venue]:
    """A manual-clock simulator (its book stays put) with a rich account, the Binance broker and the
    order service on it, and the user stream feeding the service."""
    sim = await start_simulator(clock="manual", symbols=["BTCUSDT"], balances={"USDT": D(5_000_000), "BTC": D(100)})
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await broker.sync_time()
    svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
    subscribed = asyncio.Event()

    async def on_resubscribed() -> None:
        subscribed.set()

    async def on_order(order: ExchangeOrder) -> None:
        await svc.on_update(order)

    session = aiohttp.ClientSession()
    stream = UserStream(
        session, f"{sim.ws_url}/ws-api/v3", api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET,
        on_order=on_order, on_resubscribed=on_resubscribed,
        time_offset_ms=lambda: broker.exchange_time_ms() - int(time.time() * 1000),
    )  # fmt: skip

    async def supervised() -> None:
        while True:
            with contextlib.suppress(UserStreamEnded):
                await stream.run()

    venue = Venue(sim, broker, svc, stream, asyncio.create_task(supervised(), name="test-user-stream"))
    try:
        async with asyncio.timeout(5):
            await subscribed.wait()
        yield venue
    finally:
        await venue.stop_stream()
        await session.close()
        await broker.close()
        await db.close()
        await sim.close()


async def test_a_market_order_walking_the_book_is_stored_once_from_its_answer_and_its_reports(venue: Venue) -> None:
    """One fill per level taken, in the answer and as TRADE reports: each stored once, the position is
    what arrived (executed less the base-asset commission), and reconciliation adds nothing."""
    (p0, q0), (p1, q1), *_ = venue.asks()
    qty = q0 + (q1 / 2).quantize(D("0.00001"))
    events = venue.stream.events
    out = await venue.svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": str(qty),
                                       "client_order_id": "walk"})  # fmt: skip
    assert out["status"] == "Filled"
    answer = await venue.fills("walk")
    assert [(f.price, f.quantity) for f in answer] == [(p0, q0), (p1, qty - q0)]
    await until(lambda: venue.stream.events >= events + 1 + len(answer))  # NEW, then one TRADE per fill
    assert await venue.fills("walk") == answer
    row = await venue.svc.store.get("walk")
    assert row is not None and row.status == "FILLED" and row.executed_qty == qty
    assert row.cumulative_quote == p0 * q0 + p1 * (qty - q0)
    position = positions_from_fills(await venue.fills(), ASSETS)["BTCUSDT"]
    assert position.quantity == qty - sum(f.commission for f in answer)
    assert position.entry_price == row.cumulative_quote / qty
    counts = await venue.svc.reconcile()
    assert counts["fills"] == 0 and await venue.fills("walk") == answer


async def test_a_marketable_limit_rests_partly_filled_then_fills_by_touch_and_by_trade_through(
    venue: Venue,
) -> None:
    """A BUY limit at the best ask takes that level and rests PARTIALLY_FILLED ("Open"); a trade exactly
    at its price fills the traded quantity, one through it the rest; fills found again by
    reconciliation (myTrades names the exchange's order id) count for the order, once."""
    (p0, q0), *_ = venue.asks()
    qty = q0 + D(1)
    out = await venue.svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": str(p0),
                                       "quantity": str(qty), "client_order_id": "lim"})  # fmt: skip
    assert out["status"] == "Open"
    row = await venue.svc.store.get("lim")
    assert row is not None and row.status == "PARTIALLY_FILLED" and row.executed_qty == q0
    venue.sim.exchange.trade("BTCUSDT", float(p0), 0.4)

    async def executed(q: Decimal) -> bool:
        r = await venue.svc.store.get("lim")
        return r is not None and r.executed_qty == q

    await until(lambda: executed(q0 + D("0.4")))
    assert (await venue.svc.store.get("lim")).status == "PARTIALLY_FILLED"  # type: ignore[union-attr]
    venue.sim.exchange.trade("BTCUSDT", float(p0 - 1), 0.01)
    await until(lambda: executed(qty))
    row = await venue.svc.store.get("lim")
    assert row is not None and row.status == "FILLED" and row.cumulative_quote == qty * p0
    await venue.svc.reconcile()
    fills = await venue.fills()
    assert sorted(f.quantity for f in fills) == sorted([q0, D("0.4"), D("0.6")])
    assert {f.client_order_id for f in fills} == {"lim"}
    position = positions_from_fills(fills, ASSETS)["BTCUSDT"]
    assert position.quantity == qty - sum(f.commission for f in fills)


async def test_fills_learnt_only_by_reconciliation_count_for_their_order(venue: Venue) -> None:
    """With no stream, a resting limit touched in part then cancelled: reconciliation brings its trade from
    ``myTrades`` (which names the exchange's order id) and it is stored under our client order id, so the
    order's fees and trade_execute's report see it."""
    await venue.stop_stream()
    await venue.svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 64000,
                                 "quantity": 1, "client_order_id": "ag-quiet-0"})  # fmt: skip
    venue.sim.exchange.trade("BTCUSDT", 64000.0, 0.25)
    await venue.broker.cancel("BTCUSDT", "ag-quiet-0")  # the answer is not applied: only reconciliation learns
    await venue.svc.reconcile()
    row = await venue.svc.store.get("ag-quiet-0")
    assert row is not None and row.status == "CANCELED" and row.executed_qty == D("0.25")
    fills = await venue.fills()
    assert [(f.client_order_id, f.quantity) for f in fills] == [("ag-quiet-0", D("0.25"))]
    placed = await ServiceLegs(venue.svc).placed("ag-quiet-0")
    assert placed.outcome is not None and placed.outcome.status == "partial"
    assert placed.outcome.fees == pytest.approx(float(fills[0].commission * fills[0].price)) and placed.outcome.fees > 0
    assert await venue.svc.store.fill_gap_symbols("binance", 0) == []


async def test_an_ioc_remainder_expires_and_trade_execute_reports_the_leg_partial(venue: Venue) -> None:
    """An IOC limit taking one level: EXPIRED with what it took; the leg says partial, with its filled
    quantity, average price, fees valued in the quote asset and total cost."""
    (p0, q0), *_ = venue.asks()
    args = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": str(p0), "quantity": str(q0 + 1),
            "time_in_force": "IOC", "client_order_id": "ag-ioc-0"}  # fmt: skip
    placed = await place_leg(ServiceLegs(venue.svc), args, "alice", None)
    assert placed.exchange_status == "EXPIRED" and placed.outcome is not None
    fills = await venue.fills("ag-ioc-0")
    fees = sum(f.commission * f.price for f in fills)  # a BUY pays in the base asset
    assert placed.outcome.status == "partial" and placed.outcome.filled == float(q0)
    assert placed.outcome.price == float(p0) and placed.outcome.fees == pytest.approx(float(fees))
    assert placed.outcome.total_cost == pytest.approx(float(q0 * p0 + fees))


async def test_an_entry_that_filled_nothing_places_no_exit(venue: Venue) -> None:
    """An IOC entry below the book expires untouched: its bracket is void and no list is sent."""
    venue.broker.list_kinds = frozenset({"OCO"})  # no OTOCO: the daemon places the exit itself
    out = await venue.svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 60000,
                                       "quantity": 0.01, "time_in_force": "IOC", "client_order_id": "e0",
                                       "bracket": BRACKET}, owner="alice")  # fmt: skip
    assert out["status"] == "Cancelled"
    bracket = await venue.svc.lists.store.get(bracket_ids("e0")[0])
    assert bracket is not None and bracket.bracket_state == "void"
    assert venue.sim.exchange.requests["POST /api/v3/orderList/oco"] == 0


async def test_an_entry_that_expired_partly_filled_gets_an_exit_for_what_it_filled(venue: Venue) -> None:
    """An IOC entry taking one level, its rest expired: the exit OCO sells what arrived (the level less
    the base-asset commission, on the LOT_SIZE step), once."""
    venue.broker.list_kinds = frozenset({"OCO"})
    (p0, q0), *_ = venue.asks()
    out = await venue.svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": str(p0),
                                       "quantity": str(q0 + 1), "time_in_force": "IOC", "client_order_id": "e1",
                                       "bracket": BRACKET}, owner="alice")  # fmt: skip
    assert out["status"] == "Cancelled" and out["bracket"]["state"] == "placed"
    fee = sum(f.commission for f in await venue.fills("e1"))
    rules = await venue.broker.rules("BTCUSDT")
    assert rules is not None
    expected = ((q0 - fee) // rules.step_size) * rules.step_size
    legs = {leg["leg"]: leg for leg in out["bracket"]["legs"]}
    assert D(str(legs["take_profit"]["quantity"])) == expected == D(str(legs["stop"]["quantity"]))
    await venue.svc.reconcile()
    assert venue.sim.exchange.requests["POST /api/v3/orderList/oco"] == 1


# --- the exit size rule (brokers/orders/exits.py, a node's and a cluster's) -----------------------------------
@given(
    planned=st.decimals(D("0.00001"), D(10), places=5),
    executed=st.decimals(D(0), D(10), places=5),
    fee_rate=st.sampled_from([D(0), D("0.001"), D("0.00075")]),
    side=st.sampled_from(["BUY", "SELL"]),
)
def test_an_exit_never_trades_more_than_arrived_nor_than_planned(
    planned: Decimal, executed: Decimal, fee_rate: Decimal, side: str
) -> None:
    step = D("0.00001")
    fee = executed * fee_rate if side == "BUY" else D(0)
    qty = exit_quantity(planned, entry_side=side, executed=executed, base_fee=fee, step=step)
    assert 0 <= qty <= planned and qty <= executed - fee
    assert qty % step == 0
    assert min(planned, executed - fee) - qty < step  # rounded down by less than one step


def test_the_cluster_sizes_exits_with_the_single_nodes_rule() -> None:
    from brokers.orders import brackets, exits
    from cluster import order_leader

    assert brackets.exit_quantity is exits.exit_quantity is exit_quantity
    assert order_leader.ExitProcedure is brackets.ExitProcedure is exits.ExitProcedure


# --- the paper broker's size rule ------------------------------------------------------------------
RULES = SymbolRules.from_exchange_info(symbol_info("BTCUSDT", 65000.0))


class Paper:
    """A paper broker on one database at a settable engine price, and the updates it published."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.price = D(65000)
        self.updates: list[ExchangeOrder] = []

        async def rules(symbol: str) -> SymbolRules | None:
            return RULES

        async def price(symbol: str) -> Decimal | None:
            return self.price

        async def on_update(order: ExchangeOrder) -> None:
            self.updates.append(order)

        self.broker = PaperBroker(db, rules=rules, price=price, starting_balances={"USDT": D(100000), "BTC": D(1)})
        self.broker.set_event_handler(on_update)

    async def trade(self, price: str, quantity: str | None = None) -> None:
        self.price = D(price)
        await self.broker.on_price("BTCUSDT", self.price, None if quantity is None else D(quantity))

    async def balance(self, asset: str) -> tuple[Decimal, Decimal]:
        b = next((b for b in await self.broker.balances() if b.asset == asset), None)
        return (D(0), D(0)) if b is None else (b.free, b.locked)

    async def order(self, cid: str) -> ExchangeOrder:
        found = await self.broker.query("BTCUSDT", cid)
        assert found is not None
        return found


async def open_paper(path: str = ":memory:") -> Paper:
    db = await Database.open(path)
    await db.migrate([MIGRATIONS, PAPER_MIGRATIONS])
    paper = Paper(db)
    await paper.broker.start()
    return paper


@pytest.fixture
async def paper() -> AsyncIterator[Paper]:
    p = await open_paper()
    try:
        yield p
    finally:
        await p.db.close()


def limit(cid: str, side: str, price: str, qty: str) -> OrderRequest:
    return OrderRequest("BTCUSDT", side, "LIMIT", cid, quantity=D(qty), price=D(price), time_in_force="GTC")  # type: ignore[arg-type]


async def test_paper_a_touch_fills_the_traded_quantity_and_a_trade_through_fills_the_rest(paper: Paper) -> None:
    """Resting BUY 0.5 at 64,000: a trade of 0.2 at 64,000 fills 0.2 (PARTIALLY_FILLED, still resting,
    the lock shrunk by the filled share); a trade at 63,990 fills the other 0.3 at the limit."""
    await paper.broker.place(limit("b", "BUY", "64000", "0.5"))
    await paper.trade("64000", "0.2")
    part = await paper.order("b")
    assert part.status == "PARTIALLY_FILLED" and part.executed_qty == D("0.2") and part.cumulative_quote == D(12800)
    assert paper.updates[-1].fills[0].quantity == D("0.2")
    assert "BTCUSDT" in paper.broker.resting_symbols()
    assert await paper.balance("USDT") == (D(100000) - D(32000), D("0.3") * 64000)
    await paper.trade("63990", "0.01")  # through the limit: the rest fills, whatever the size
    done = await paper.order("b")
    assert done.status == "FILLED" and done.executed_qty == D("0.5") and done.cumulative_quote == D(32000)
    assert await paper.balance("USDT") == (D(68000), D(0))
    assert await paper.balance("BTC") == (D(1) + D("0.5") * D("0.999"), D(0))
    assert "BTCUSDT" not in paper.broker.resting_symbols()


async def test_paper_orders_at_one_price_share_a_touch_oldest_first(paper: Paper) -> None:
    await paper.broker.place(limit("first", "SELL", "66000", "0.3"))
    await paper.broker.place(limit("second", "SELL", "66000", "0.3"))
    await paper.trade("66000", "0.4")
    assert (await paper.order("first")).status == "FILLED"
    second = await paper.order("second")
    assert second.status == "PARTIALLY_FILLED" and second.executed_qty == D("0.1")
    await paper.trade("66000", "0")  # a touch of nothing fills nothing
    assert (await paper.order("second")).executed_qty == D("0.1")


async def test_paper_a_touch_without_a_size_fills_in_full(paper: Paper) -> None:
    """The engine's ticks (klines) carry no trade quantity: a touch fills the whole order, as before."""
    await paper.broker.place(limit("b", "BUY", "64000", "0.5"))
    await paper.trade("64000")
    assert (await paper.order("b")).status == "FILLED"


async def test_paper_cancelling_a_partly_filled_order_keeps_what_filled_and_frees_the_rest(paper: Paper) -> None:
    await paper.broker.place(limit("s", "SELL", "66000", "0.5"))
    await paper.trade("66000", "0.2")
    cancelled = await paper.broker.cancel("BTCUSDT", "s")
    assert cancelled.status == "CANCELED" and cancelled.executed_qty == D("0.2")
    assert await paper.balance("BTC") == (D("0.8"), D(0))
    assert await paper.balance("USDT") == (D(100000) + D("0.2") * 66000 * D("0.999"), D(0))
    assert "BTCUSDT" not in paper.broker.resting_symbols()


async def test_paper_a_partly_filled_order_still_rests_after_a_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "paper.db")
    first = await open_paper(path)
    await first.broker.place(limit("b", "BUY", "64000", "0.5"))
    await first.trade("64000", "0.2")
    await first.db.close()
    again = await open_paper(path)
    try:
        assert "BTCUSDT" in again.broker.resting_symbols()
        await again.trade("63000")
        assert (await again.order("b")).status == "FILLED"
    finally:
        await again.db.close()


@settings(max_examples=25, deadline=None)
@given(touches=st.lists(st.decimals(D(0), D("0.3"), places=3), min_size=1, max_size=6))
def test_paper_touches_fill_at_most_the_order_and_move_exactly_what_filled(touches: list[Decimal]) -> None:
    """Any run of touches at the limit: executed = min(order, sum of sizes); the status says whether
    anything is left; the quote spent is executed × limit and the lock holds the rest's worth."""

    async def run() -> None:
        p = await open_paper()
        try:
            await p.broker.place(limit("b", "BUY", "64000", "0.5"))
            for q in touches:
                await p.trade("64000", str(q))
            o = await p.order("b")
            executed = min(D("0.5"), sum(touches, D(0)))
            assert o.executed_qty == executed and o.cumulative_quote == executed * 64000
            assert o.status == ("FILLED" if executed == D("0.5") else "PARTIALLY_FILLED" if executed else "NEW")
            free, locked = await p.balance("USDT")
            assert free + locked == D(100000) - executed * 64000
            assert locked == (D("0.5") - executed) * 64000
            assert await p.balance("BTC") == (D(1) + executed * D("0.999"), D(0))
        finally:
            await p.db.close()

    asyncio.run(run())


async def test_paper_a_partly_filled_entry_cancelled_gets_an_exit_for_what_it_filled(paper: Paper) -> None:
    """A bracket on a resting paper entry (no OTOCO: the daemon's OCO): touched for 0.2 of 0.5, then
    cancelled — the exit OCO sells the 0.2 less its base-asset commission, on the LOT_SIZE step."""
    paper.broker.list_kinds = frozenset({"OCO"})
    svc = OrderService(paper.broker, OrderStore(paper.db), limits=SafetyLimits(None, None))
    paper.broker.set_list_handler(svc.lists.on_list_update)
    entry = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 64000, "quantity": 0.5}
    out = await svc.place_order({**entry, "client_order_id": "e", "bracket": BRACKET}, owner="alice")
    assert out["bracket"]["state"] == "waiting"
    await paper.trade("64000", "0.2")
    row = await svc.store.get("e")
    assert row is not None and row.status == "PARTIALLY_FILLED"
    assert (await svc.lists.store.get(bracket_ids("e")[0])).bracket_state == "waiting"  # type: ignore[union-attr]
    await svc.cancel_order("e", actor=Actor("alice"))
    bracket = await svc.lists.store.get(bracket_ids("e")[0])
    assert bracket is not None and bracket.bracket_state == "placed"
    expected = ((D("0.2") - D("0.2") * D("0.001")) // RULES.step_size) * RULES.step_size
    legs = await paper.broker.open_orders("BTCUSDT")
    assert sorted(o.orig_qty for o in legs) == [expected, expected]
