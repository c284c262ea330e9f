"""CcxtBroker through ccxt's binance class against the simulator: the same order flows as the other brokers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from brokers.ccxt.broker import CcxtBroker, build_exchange
from brokers.models import Actor, InsufficientBalance, OrderRejected, OrderRequest
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator
from storage import Database

ADMIN = Actor(None, admin=True)


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", symbols=["BTCUSDT", "ETHUSDT"])
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def service(sim: RunningSimulator) -> AsyncIterator[OrderService]:
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    api = f"{sim.url}/api/v3"
    exchange = build_exchange(
        "binance", api_key=DEFAULT_API_KEY, secret=DEFAULT_API_SECRET, urls={"public": api, "private": api}
    )
    broker = CcxtBroker(exchange)
    svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
    svc.unknown_lookup_delays_s = (0.0,)
    try:
        yield svc
    finally:
        await broker.close()
        await db.close()


async def test_ccxt_broker_places_fills_rests_cancels_and_refuses(service: OrderService, sim: RunningSimulator) -> None:
    """Market buy fills; a limit rests and is cancelled; an oversized buy is refused as insufficient balance."""
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    filled = await service.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01})
    assert filled["status"] == "Filled" and filled["fill_price"] == 65000.0
    positions = await service.get_positions()  # fills inside the order answer carry no side of their own
    assert [(p["symbol"], p["side"]) for p in positions] == [("BTCUSDT", "buy")]
    assert positions[0]["quantity"] == pytest.approx(0.01 * 0.999)  # the 0.1 % fee was paid in BTC
    rest = await service.place_order(
        {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}
    )
    assert rest["status"] == "Open"
    assert await service.cancel_order(rest["order_id"], actor=ADMIN) == {"ok": True}
    orders = {o["id"]: o["state"] for o in await service.get_orders("all", actor=ADMIN)}
    assert orders == {filled["order_id"]: "Filled", rest["order_id"]: "Cancelled"}
    with pytest.raises(InsufficientBalance):
        await service.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 1})
    on_exchange = {o.client_order_id for o in sim.exchange.account.orders.values()}
    assert {filled["order_id"], rest["order_id"]} <= on_exchange


async def test_reconciliation_learns_fills_that_happened_while_nobody_listened(
    service: OrderService, sim: RunningSimulator
) -> None:
    """A resting order fills on the exchange; reconciliation (ccxt has no user stream here) reports it Filled."""
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    rest = await service.place_order(
        {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 64000}
    )
    sim.exchange.trade("BTCUSDT", 63900.0, 0.01)
    await service.reconcile()
    states = {o["id"]: o for o in await service.get_orders("all", actor=ADMIN)}
    assert states[rest["order_id"]]["state"] == "Filled" and states[rest["order_id"]]["fill_price"] == 64000.0
    positions = await service.get_positions()
    assert positions[0]["symbol"] == "BTCUSDT" and positions[0]["quantity"] == pytest.approx(0.01 * 0.999)


async def test_binance_class_looks_up_by_client_id_buys_by_cost_and_reads_trades_since(
    service: OrderService, sim: RunningSimulator
) -> None:
    """Through ccxt's unified calls: fetch_order by clientOrderId (None when unknown), a quote-amount market
    buy (create_market_buy_order_with_cost), and fetch_my_trades with ``since`` after the first pass."""
    broker = service.broker
    assert isinstance(broker, CcxtBroker)
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    bought = await service.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "market", "quote_quantity": 650})
    assert bought["status"] == "Filled" and bought["filled_quantity"] == pytest.approx(0.01)
    found = await broker.query("BTCUSDT", bought["order_id"])
    assert found is not None and (found.client_order_id, found.status) == (bought["order_id"], "FILLED")
    assert await broker.query("BTCUSDT", "never-sent-0001") is None
    with pytest.raises(OrderRejected, match="quote amount only for market buys"):
        await broker.place(OrderRequest("BTCUSDT", "SELL", "MARKET", "sell-by-cost-1", quote_quantity=Decimal(100)))
    urls: list[str] = []
    send = broker.exchange.fetch

    async def spy(url: str, method: str = "GET", headers: Any = None, body: Any = None) -> Any:
        urls.append(url)
        return await send(url, method, headers, body)

    broker.exchange.fetch = spy
    (fill,) = await broker.trades("BTCUSDT", from_id=999)
    assert (fill.client_order_id, fill.side, fill.quantity) == (bought["order_id"], "BUY", Decimal("0.01"))
    assert [f.trade_id for f in await broker.trades("BTCUSDT", from_id=999)] == [fill.trade_id]  # stored once anyway
    first, second = [u for u in urls if "/myTrades" in u]
    assert "fromId" not in first + second and "startTime" not in first
    assert f"startTime={fill.time_ms}" in second
