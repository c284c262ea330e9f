"""python-binance's and ccxt's calls of the simulator's newer endpoints, answers compared with Binance's examples.

``cancel_all_open_orders`` (DELETE /api/v3/openOrders), ``cancel_replace_order``
(POST /api/v3/order/cancelReplace), ``get_symbol_ticker_window`` (GET /api/v3/ticker) and
``get_current_order_count`` (GET /api/v3/rateLimit/order) through python-binance 1.0.37's
AsyncClient, and ccxt's ``cancel_all_orders``.  The simulator's clock is manual; the clients'
clocks are offset to it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest
from binance import AsyncClient
from binance.exceptions import BinanceAPIException

from brokers.ccxt.broker import build_exchange
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator
from tests.simulator import documented as doc


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    balances = {"USDT": Decimal("100000"), "BTC": Decimal("1")}
    async with await start_simulator(clock="manual", symbols=["BTCUSDT", "ETHUSDT"], balances=balances) as running:
        yield running


@pytest.fixture
async def client(sim: RunningSimulator) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET)
    client.API_URL = f"{sim.url}/api"
    client.timestamp_offset = sim.exchange.server_time() - int(time.time() * 1000)
    try:
        yield client
    finally:
        await client.close_connection()


def bid(sim: RunningSimulator, fraction: str = "0.95") -> str:
    last = Decimal(f"{sim.exchange.markets['BTCUSDT'].last_price(sim.exchange.now_ms()):.2f}")
    return str((last * Decimal(fraction)).quantize(Decimal("0.01")))


async def rest_buy(client: AsyncClient, sim: RunningSimulator, cid: str) -> dict[str, object]:
    return await client.create_order(symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC",
                                     quantity="0.001", price=bid(sim), newClientOrderId=cid)  # fmt: skip


async def test_python_binance_cancel_all_open_orders(client: AsyncClient, sim: RunningSimulator) -> None:
    """Every open order of the symbol is cancelled; each answer has the documented keys; none left is -2011."""
    for cid in ("a", "b"):
        await rest_buy(client, sim, cid)
    answer = await client.cancel_all_open_orders(symbol="BTCUSDT")
    assert [o["origClientOrderId"] for o in answer] == ["a", "b"]
    for order in answer:
        assert order["status"] == "CANCELED"
        doc.assert_documented_keys(order, doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL)
    with pytest.raises(BinanceAPIException) as refused:
        await client.cancel_all_open_orders(symbol="BTCUSDT")
    assert refused.value.code == -2011


async def test_python_binance_cancel_replace_order(client: AsyncClient, sim: RunningSimulator) -> None:
    """Success has the documented keys; a failed cancel with STOP_ON_FAILURE raises -2022."""
    old = await rest_buy(client, sim, "old")
    answer = await client.cancel_replace_order(
        symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.002", price=bid(sim, "0.9"),
        cancelReplaceMode="STOP_ON_FAILURE", cancelOrderId=old["orderId"], newClientOrderId="new",
    )  # fmt: skip
    doc.assert_documented_keys(answer, doc.CANCEL_REPLACE)
    doc.assert_documented_keys(answer["cancelResponse"], doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL)
    doc.assert_documented_keys(answer["newOrderResponse"], doc.NEW_ORDER_FULL, doc.ORDER_CONDITIONAL)
    assert answer["newOrderResponse"]["clientOrderId"] == "new"
    with pytest.raises(BinanceAPIException) as refused:
        await client.cancel_replace_order(
            symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.002", price=bid(sim, "0.9"),
            cancelReplaceMode="STOP_ON_FAILURE", cancelOrderId=old["orderId"],
        )  # fmt: skip
    assert refused.value.code == -2022 and refused.value.status_code == 400


async def test_python_binance_get_symbol_ticker_window(client: AsyncClient, sim: RunningSimulator) -> None:
    """One symbol answers an object, ``symbols`` a list; FULL and MINI have the documented keys."""
    one = await client.get_symbol_ticker_window(symbol="BTCUSDT", windowSize="4h")
    doc.assert_documented_keys(one, doc.TICKER_FULL)
    assert one["openTime"] == (sim.exchange.now_ms() - 4 * 3_600_000) // 60_000 * 60_000
    many = await client.get_symbol_ticker_window(symbols='["BTCUSDT","ETHUSDT"]', type="MINI")
    assert [m["symbol"] for m in many] == ["BTCUSDT", "ETHUSDT"]
    for m in many:
        doc.assert_documented_keys(m, doc.TICKER_MINI)


async def test_python_binance_get_current_order_count(client: AsyncClient, sim: RunningSimulator) -> None:
    """Both ORDERS intervals, Binance's shape, counting the orders placed."""
    await rest_buy(client, sim, "one")
    counts = await client.get_current_order_count()
    for row in counts:
        doc.assert_documented_keys(row, doc.RATE_LIMIT_ORDER)
    assert [(c["interval"], c["intervalNum"], c["limit"], c["count"]) for c in counts] == [
        ("SECOND", 10, 100, 1),
        ("DAY", 1, 200000, 1),
    ]


async def test_ccxt_cancel_all_orders(sim: RunningSimulator) -> None:
    """ccxt's binance ``cancel_all_orders`` cancels the symbol's open orders through DELETE /api/v3/openOrders."""
    api = f"{sim.url}/api/v3"
    exchange = build_exchange(
        "binance", api_key=DEFAULT_API_KEY, secret=DEFAULT_API_SECRET, urls={"public": api, "private": api}
    )
    try:
        await exchange.load_markets()
        exchange.options["timeDifference"] = int(time.time() * 1000) - sim.exchange.server_time()
        for cid in ("x1", "x2"):
            await exchange.create_order("BTC/USDT", "limit", "buy", 0.001, float(bid(sim)), {"clientOrderId": cid})
        cancelled = await exchange.cancel_all_orders("BTC/USDT")
        assert sorted(o["status"] for o in cancelled) == ["canceled", "canceled"]
        assert await exchange.fetch_open_orders("BTC/USDT") == []
        assert sim.exchange.requests["DELETE /api/v3/openOrders"] == 1
    finally:
        await exchange.close()
