"""The simulator's conditional orders and order lists, over signed REST and the WS-API user stream.

STOP_LOSS / TAKE_PROFIT (…_LIMIT) with stopPrice and/or trailingDelta, OCO / OTO / OTOCO lists,
Binance's refusals (would trigger immediately, OCO prices, TRAILING_DELTA, MAX_NUM_ALGO_ORDERS)
and the executionReport / listStatus events.  Prices move only by ``/sim/v1/price`` trades or a
manual ``/sim/v1/advance`` (the clock is manual), so every run is the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from simulator.app import RunningSimulator
from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET
from tests.simulator.conftest import funded_simulator, get_json, post_json

Event = dict[str, Any]


class Signed:
    """Signed REST calls to the simulator (HMAC over the query string, timestamp from its clock)."""

    def __init__(self, sim: RunningSimulator, http: aiohttp.ClientSession) -> None:
        self.sim, self.http = sim, http

    async def call(self, method: str, path: str, **params: Any) -> tuple[int, Any]:
        params["timestamp"] = self.sim.exchange.server_time()
        query = urlencode({k: str(v) for k, v in params.items()})
        sig = hmac.new(DEFAULT_API_SECRET.encode(), query.encode(), hashlib.sha256).hexdigest()
        url = f"{self.sim.url}{path}?{query}&signature={sig}"
        async with self.http.request(method, url, headers={"X-MBX-APIKEY": DEFAULT_API_KEY}) as r:
            return r.status, await r.json()

    async def ok(self, method: str, path: str, **params: Any) -> Any:
        status, body = await self.call(method, path, **params)
        assert status == 200, body
        return body

    async def price(self, price: str, symbol: str = "BTCUSDT") -> None:
        await post_json(self.http, f"{self.sim.url}/sim/v1/price", {"symbol": symbol, "price": price})

    async def best_bid(self, symbol: str = "BTCUSDT") -> str:
        """The book's best bid now (a sell that took part of it leaves that level on top)."""
        _, _, book = await get_json(self.http, f"{self.sim.url}/api/v3/depth", symbol=symbol, limit=5)
        return str(book["bids"][0][0])

    async def balance(self, asset: str) -> tuple[Decimal, Decimal]:
        account = await self.ok("GET", "/api/v3/account")
        row = next(b for b in account["balances"] if b["asset"] == asset)
        return Decimal(row["free"]), Decimal(row["locked"])


class UserStream:
    """The WS-API user-data subscription; :meth:`until` reads events until one matches."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.seen: list[Event] = []

    async def until(self, pred: Callable[[Event], bool], within_s: float = 5.0) -> Event:
        for event in self.seen:
            if pred(event):
                self.seen.remove(event)
                return event
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), within_s)
            event = msg.get("event")
            if event is None:
                continue
            if pred(event):
                return event
            self.seen.append(event)


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    async with await funded_simulator() as running:
        yield running


@pytest.fixture
async def api(sim: RunningSimulator) -> AsyncIterator[Signed]:
    async with aiohttp.ClientSession() as http:
        signed = Signed(sim, http)
        await signed.price("65000")
        yield signed


@pytest.fixture
async def stream(sim: RunningSimulator, api: Signed) -> AsyncIterator[UserStream]:
    async with api.http.ws_connect(f"{sim.ws_url}/ws-api/v3") as ws:
        params = {"apiKey": DEFAULT_API_KEY, "timestamp": sim.exchange.server_time()}
        payload = "&".join(f"{k}={params[k]}" for k in sorted(params))
        params["signature"] = hmac.new(DEFAULT_API_SECRET.encode(), payload.encode(), hashlib.sha256).hexdigest()
        await ws.send_json({"id": 1, "method": "userDataStream.subscribe.signature", "params": params})
        answer = await asyncio.wait_for(ws.receive_json(), 5)
        assert answer["status"] == 200, answer
        yield UserStream(ws)


def report(cid: str, x: str) -> Callable[[Event], bool]:
    return lambda e: e.get("e") == "executionReport" and e["c"] == cid and e["x"] == x


def list_status(l_type: str) -> Callable[[Event], bool]:
    return lambda e: e.get("e") == "listStatus" and e["l"] == l_type


async def test_exchange_info_lists_the_stop_types_and_their_filters(api: Signed) -> None:
    _, _, info = await get_json(api.http, f"{api.sim.url}/api/v3/exchangeInfo", symbol="BTCUSDT")
    (sym,) = info["symbols"]
    assert {"STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"} <= set(sym["orderTypes"])
    kinds = {f["filterType"] for f in sym["filters"]}
    assert {"TRAILING_DELTA", "PERCENT_PRICE_BY_SIDE", "MAX_NUM_ALGO_ORDERS"} <= kinds
    assert sym["ocoAllowed"] and sym["otoAllowed"] and sym["allowTrailingStop"]


async def test_a_stop_loss_sell_waits_then_fills_when_a_trade_reaches_it(api: Signed, stream: UserStream) -> None:
    placed = await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS", quantity="0.01",
        stopPrice="64000", newClientOrderId="sl-1", newOrderRespType="RESULT",
    )  # fmt: skip
    assert placed["status"] == "NEW" and placed["workingTime"] == -1 and placed["stopPrice"] == "64000.00000000"
    new = await stream.until(report("sl-1", "NEW"))
    assert new["P"] == "64000.00000000" and new["w"] is False and "W" not in new and new["g"] == -1
    assert await api.balance("BTC") == (Decimal("0.99"), Decimal("0.01"))
    await api.price("64500")
    order = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="sl-1")
    assert order["status"] == "NEW" and order["isWorking"] is False
    await api.price("63990")
    trade = await stream.until(report("sl-1", "TRADE"))
    # a triggered STOP_LOSS sells as MARKET: into the best bid below the trade that triggered it
    assert trade["X"] == "FILLED" and trade["L"] == await api.best_bid() and trade["W"] > 0
    assert Decimal(trade["L"]) < Decimal("63990")
    order = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="sl-1")
    assert order["status"] == "FILLED" and order["executedQty"] == "0.01000000"
    assert await api.balance("BTC") == (Decimal("0.99"), Decimal("0"))


async def test_a_stop_that_would_trigger_immediately_is_refused(api: Signed) -> None:
    for kind, side, stop in (
        ("STOP_LOSS", "SELL", "65000"),
        ("TAKE_PROFIT", "SELL", "64000"),
        ("STOP_LOSS", "BUY", "64000"),
    ):
        for path in ("/api/v3/order", "/api/v3/order/test"):
            status, body = await api.call(
                "POST", path, symbol="BTCUSDT", side=side, type=kind, quantity="0.01", stopPrice=stop
            )
            assert status == 400 and body == {"code": -2010, "msg": "Order would trigger immediately."}
    assert await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT") == []
    test_order = {"symbol": "BTCUSDT", "side": "SELL", "type": "STOP_LOSS", "quantity": "0.01", "stopPrice": "60000"}
    assert await api.ok("POST", "/api/v3/order/test", **test_order) == {}
    assert await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT") == []


async def test_a_trailing_stop_follows_the_peak_and_triggers_on_the_reversal(api: Signed, stream: UserStream) -> None:
    """trailingDelta 100 (1 %) without a stop price: tracks from 65,000, peak 66,000, fires at 65,340."""
    placed = await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS", quantity="0.01",
        trailingDelta="100", newClientOrderId="trail-1", newOrderRespType="RESULT",
    )  # fmt: skip
    assert placed["trailingDelta"] == 100 and placed["trailingTime"] > 0
    new = await stream.until(report("trail-1", "NEW"))
    assert new["d"] == 100
    for price in ("65500", "66000", "65400", "65340.01"):
        await api.price(price)
    assert (await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="trail-1"))["status"] == "NEW"
    await api.price("65340")
    trade = await stream.until(report("trail-1", "TRADE"))
    assert trade["L"] == await api.best_bid() and Decimal(trade["L"]) < Decimal("65340")
    assert trade["X"] == "FILLED" and trade["d"] == 100


async def test_trailing_delta_out_of_range_is_refused(api: Signed) -> None:
    for delta in ("5", "2001"):
        status, body = await api.call(
            "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS_LIMIT", timeInForce="GTC",
            quantity="0.01", price="64000", trailingDelta=delta,
        )  # fmt: skip
        assert status == 400 and body == {"code": -1013, "msg": "Filter failure: TRAILING_DELTA"}


async def test_a_triggered_stop_limit_rests_on_the_book_until_its_price(api: Signed, stream: UserStream) -> None:
    await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="STOP_LOSS_LIMIT", timeInForce="GTC",
        quantity="0.01", price="65900", stopPrice="66000", newClientOrderId="sll-1",
    )  # fmt: skip
    assert await api.balance("USDT") == (Decimal("100000") - Decimal("659"), Decimal("659"))
    await api.price("66100")
    working = await stream.until(lambda e: report("sll-1", "NEW")(e) and e["w"] is True)
    assert working["W"] > 0
    order = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="sll-1")
    assert order["status"] == "NEW" and order["isWorking"] is True and order["workingTime"] > 0
    await api.price("65800")
    trade = await stream.until(report("sll-1", "TRADE"))
    assert trade["L"] == "65900.00000000" and trade["m"] is True


async def test_the_price_path_triggers_stops_as_the_clock_advances(sim: RunningSimulator, api: Signed) -> None:
    market = sim.exchange.markets["BTCUSDT"]
    now = sim.exchange.now_ms()
    p0, p1 = Decimal(f"{market.last_price(now):.2f}"), Decimal(f"{market.last_price(now + 3_600_000):.2f}")
    assert p0 != p1
    stop = ((p0 + p1) / 2).quantize(Decimal("0.01"))
    side = "SELL" if p1 < p0 else "BUY"
    await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side=side, type="STOP_LOSS", quantity="0.01",
        stopPrice=str(stop), newClientOrderId="path-1",
    )  # fmt: skip
    await post_json(api.http, f"{sim.url}/sim/v1/advance", {"seconds": 3600})
    order = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="path-1")
    assert order["status"] == "FILLED"


async def test_oco_stop_leg_fill_expires_the_take_profit_leg(api: Signed, stream: UserStream) -> None:
    body = await api.ok(
        "POST", "/api/v3/orderList/oco", symbol="BTCUSDT", side="SELL", quantity="0.01", listClientOrderId="oco-1",
        aboveType="LIMIT_MAKER", abovePrice="67000", aboveClientOrderId="oco-tp",
        belowType="STOP_LOSS_LIMIT", belowStopPrice="63000", belowPrice="62900", belowTimeInForce="GTC",
        belowClientOrderId="oco-sl",
    )  # fmt: skip
    assert body["contingencyType"] == "OCO" and body["listStatusType"] == "EXEC_STARTED"
    reports = {r["clientOrderId"]: r for r in body["orderReports"]}
    assert reports["oco-sl"]["workingTime"] == -1 and reports["oco-sl"]["stopPrice"] == "63000.00000000"
    assert reports["oco-tp"]["workingTime"] > 0 and {r["orderListId"] for r in reports.values()} == {
        body["orderListId"]
    }
    assert await api.balance("BTC") == (Decimal("0.99"), Decimal("0.01"))  # locked once for both legs
    started = await stream.until(list_status("EXEC_STARTED"))
    assert started["C"] == "oco-1" and started["c"] == "OCO" and len(started["O"]) == 2
    await api.price("62950")
    expired = await stream.until(report("oco-tp", "EXPIRED"))
    trade = await stream.until(report("oco-sl", "TRADE"))
    assert expired["g"] == trade["g"] == body["orderListId"] and trade["L"] == await api.best_bid()
    assert Decimal("62900") <= Decimal(trade["L"]) < Decimal("62950")  # the best bid, within the leg's limit
    done = await stream.until(list_status("ALL_DONE"))
    assert done["L"] == "ALL_DONE" and done["C"] == "oco-1"
    assert await api.balance("BTC") == (Decimal("0.99"), Decimal("0"))
    assert await api.ok("GET", "/api/v3/openOrderList") == []
    listed = await api.ok("GET", "/api/v3/orderList", origClientOrderId="oco-1")
    assert listed["listOrderStatus"] == "ALL_DONE"


async def test_oco_take_profit_fill_expires_the_stop_and_buy_oco_locks_once(api: Signed, stream: UserStream) -> None:
    await api.ok(
        "POST", "/api/v3/orderList/oco", symbol="BTCUSDT", side="BUY", quantity="0.01", listClientOrderId="oco-b",
        aboveType="STOP_LOSS", aboveStopPrice="66000", aboveClientOrderId="b-sl",
        belowType="LIMIT_MAKER", belowPrice="64000", belowClientOrderId="b-tp",
    )  # fmt: skip
    assert await api.balance("USDT") == (Decimal("100000") - Decimal("660"), Decimal("660"))
    await api.price("63900")
    await stream.until(report("b-tp", "TRADE"))
    await stream.until(report("b-sl", "EXPIRED"))
    await stream.until(list_status("ALL_DONE"))
    assert await api.balance("USDT") == (Decimal("100000") - Decimal("640"), Decimal("0"))


async def test_oco_refusals_use_binances_codes(api: Signed) -> None:
    common = {"symbol": "BTCUSDT", "quantity": "0.01"}
    status, body = await api.call(
        "POST", "/api/v3/orderList/oco", side="SELL", aboveType="LIMIT_MAKER", abovePrice="67000",
        belowType="STOP_LOSS", belowStopPrice="65500", **common,
    )  # fmt: skip
    assert status == 400 and body == {
        "code": -2010,
        "msg": "The relationship of the prices for the orders is not correct.",
    }
    status, body = await api.call(
        "POST", "/api/v3/orderList/oco", side="SELL", aboveType="STOP_LOSS", aboveStopPrice="66000",
        belowType="LIMIT_MAKER", belowPrice="64000", **common,
    )  # fmt: skip
    assert status == 400 and body == {"code": -1197, "msg": "A stop loss order in a sell OCO must be below."}
    status, body = await api.call(
        "POST", "/api/v3/orderList/oco", side="BUY", aboveType="LIMIT_MAKER", abovePrice="64000",
        belowType="STOP_LOSS", belowStopPrice="66000", **common,
    )  # fmt: skip
    assert status == 400 and body["code"] == -1196
    assert await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT") == []


async def test_otoco_pending_legs_go_on_the_book_when_the_working_order_fills(api: Signed, stream: UserStream) -> None:
    body = await api.ok(
        "POST", "/api/v3/orderList/otoco", symbol="BTCUSDT", listClientOrderId="otoco-1",
        workingType="LIMIT", workingSide="BUY", workingPrice="64000", workingQuantity="0.01",
        workingTimeInForce="GTC", workingClientOrderId="w-1",
        pendingSide="SELL", pendingQuantity="0.01",
        pendingAboveType="LIMIT_MAKER", pendingAbovePrice="66000", pendingAboveClientOrderId="p-tp",
        pendingBelowType="STOP_LOSS", pendingBelowStopPrice="63000", pendingBelowClientOrderId="p-sl",
    )  # fmt: skip
    assert body["contingencyType"] == "OTO"
    statuses = {r["clientOrderId"]: r["status"] for r in body["orderReports"]}
    assert statuses == {"w-1": "NEW", "p-tp": "PENDING_NEW", "p-sl": "PENDING_NEW"}
    await api.price("65500")
    assert (await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="p-tp"))["status"] == "PENDING_NEW"
    await api.price("63990")
    await stream.until(report("w-1", "TRADE"))
    await stream.until(report("p-tp", "NEW"))
    await stream.until(report("p-sl", "NEW"))
    for cid in ("p-tp", "p-sl"):
        assert (await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", origClientOrderId=cid))["status"] == "NEW"
    await api.price("66100")
    await stream.until(report("p-tp", "TRADE"))
    await stream.until(report("p-sl", "EXPIRED"))
    done = await stream.until(list_status("ALL_DONE"))
    assert done["C"] == "otoco-1"
    assert await api.balance("BTC") == (Decimal("1") + Decimal("0.01") * Decimal("0.999") - Decimal("0.01"), Decimal(0))


async def test_cancelling_one_leg_cancels_the_list(api: Signed, stream: UserStream) -> None:
    body = await api.ok(
        "POST", "/api/v3/orderList/oco", symbol="BTCUSDT", side="SELL", quantity="0.01", listClientOrderId="oco-c",
        aboveType="LIMIT_MAKER", abovePrice="67000", aboveClientOrderId="c-tp",
        belowType="STOP_LOSS", belowStopPrice="63000", belowClientOrderId="c-sl",
    )  # fmt: skip
    assert len(await api.ok("GET", "/api/v3/openOrderList")) == 1
    await api.ok("DELETE", "/api/v3/order", symbol="BTCUSDT", origClientOrderId="c-sl")
    await stream.until(report("c-tp", "CANCELED"))
    await stream.until(report("c-sl", "CANCELED"))
    await stream.until(list_status("ALL_DONE"))
    assert await api.ok("GET", "/api/v3/openOrderList") == []
    assert await api.balance("BTC") == (Decimal("1"), Decimal("0"))
    (entry,) = await api.ok("GET", "/api/v3/allOrderList")
    assert entry["orderListId"] == body["orderListId"] and entry["listStatusType"] == "ALL_DONE"
    status, again = await api.call("DELETE", "/api/v3/orderList", symbol="BTCUSDT", listClientOrderId="oco-c")
    assert status == 400 and again["code"] == -2011


async def test_delete_order_list_cancels_every_leg(api: Signed) -> None:
    await api.ok(
        "POST", "/api/v3/orderList/oto", symbol="BTCUSDT", listClientOrderId="oto-1",
        workingType="LIMIT", workingSide="BUY", workingPrice="64000", workingQuantity="0.01",
        workingTimeInForce="GTC", pendingType="STOP_LOSS", pendingSide="SELL", pendingQuantity="0.01",
        pendingStopPrice="60000",
    )  # fmt: skip
    body = await api.ok("DELETE", "/api/v3/orderList", symbol="BTCUSDT", listClientOrderId="oto-1")
    assert body["listStatusType"] == "ALL_DONE"
    assert {r["status"] for r in body["orderReports"]} == {"CANCELED"}
    assert await api.balance("USDT") == (Decimal("100000"), Decimal("0"))


async def test_too_many_algo_orders_are_refused(api: Signed) -> None:
    for i in range(5):
        await api.ok(
            "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS", quantity="0.01",
            stopPrice=str(60000 + i),
        )  # fmt: skip
    status, body = await api.call(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS", quantity="0.01", stopPrice="59000"
    )
    assert status == 400 and body == {"code": -2010, "msg": "Filter failure: MAX_NUM_ALGO_ORDERS"}
    # other symbols and plain orders are not limited by BTCUSDT's algo orders
    await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.01",
        price="60000",
    )  # fmt: skip


async def test_percent_price_by_side_refuses_far_prices(api: Signed) -> None:
    status, body = await api.call(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.001",
        price="12000",
    )  # fmt: skip
    assert status == 400 and body == {"code": -1013, "msg": "Filter failure: PERCENT_PRICE_BY_SIDE"}
