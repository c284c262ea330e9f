"""The simulator's endpoints beyond placing an order: cancel-all, cancel-replace, the rolling-window ticker,
unknown paths, and the documented key sets of every answer."""

from __future__ import annotations

from decimal import Decimal

from tests.simulator import documented as doc
from tests.simulator.conftest import get_json, post_json
from tests.simulator.signed import SignedClient


def oco(api: SignedClient) -> dict[str, str]:
    return {"symbol": "BTCUSDT", "side": "SELL", "quantity": "0.001", "aboveType": "LIMIT_MAKER",
            "abovePrice": api.bid("1.05"), "belowType": "STOP_LOSS", "belowStopPrice": api.bid("0.95")}  # fmt: skip


async def test_delete_open_orders_cancels_every_order_and_list_of_the_symbol(api: SignedClient) -> None:
    """Two orders and an OCO on BTCUSDT are cancelled (each list once), an ETHUSDT order stays; then -2011."""
    a, b = (await api.rest_buy())[2], (await api.rest_buy())[2]
    lst = await api.ok("POST", "/api/v3/orderList/oco", **oco(api))
    eth = await api.ok("POST", "/api/v3/order", symbol="ETHUSDT", side="BUY", type="LIMIT", timeInForce="GTC",
                       quantity="0.01", price=api.bid("0.95", "ETHUSDT"))  # fmt: skip
    status, headers, answer = await api.call("DELETE", "/api/v3/openOrders", symbol="BTCUSDT")
    assert status == 200 and headers["X-MBX-USED-WEIGHT-1M"]
    orders = [x for x in answer if "contingencyType" not in x]
    lists = [x for x in answer if "contingencyType" in x]
    assert [o["orderId"] for o in orders] == [a["orderId"], b["orderId"]]
    assert all(o["status"] == "CANCELED" and o["origClientOrderId"] == o["clientOrderId"] for o in orders)
    for o in orders:
        doc.assert_documented_keys(o, doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL)
    (cancelled,) = lists
    doc.assert_documented_keys(cancelled, doc.CANCELLED_LIST)
    assert cancelled["orderListId"] == lst["orderListId"] and cancelled["listOrderStatus"] == "ALL_DONE"
    assert {r["status"] for r in cancelled["orderReports"]} == {"CANCELED"}
    for r in cancelled["orderReports"]:
        doc.assert_documented_keys(r, doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL | {"workingTime"})
    still = await api.ok("GET", "/api/v3/openOrders", symbol="ETHUSDT")
    assert [o["orderId"] for o in still] == [eth["orderId"]]
    assert await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT") == []
    status, _, body = await api.call("DELETE", "/api/v3/openOrders", symbol="BTCUSDT")
    assert status == 400 and body == {"code": -2011, "msg": "Unknown order sent."}
    status, _, body = await api.call("DELETE", "/api/v3/openOrders")
    assert status == 400 and body["code"] == -1102


async def test_cancel_replace_success_answers_both_halves(api: SignedClient) -> None:
    """STOP_ON_FAILURE with a resting order: 200, the cancel's answer and the new order's FULL answer."""
    old = (await api.rest_buy(newClientOrderId="old"))[2]
    status, headers, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", symbol="BTCUSDT", cancelReplaceMode="STOP_ON_FAILURE",
        cancelOrderId=old["orderId"], side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.002",
        price=api.bid("0.9"), newClientOrderId="new",
    )  # fmt: skip
    assert status == 200, body
    doc.assert_documented_keys(body, doc.CANCEL_REPLACE)
    assert body["cancelResult"] == body["newOrderResult"] == "SUCCESS"
    doc.assert_documented_keys(body["cancelResponse"], doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL)
    doc.assert_documented_keys(body["newOrderResponse"], doc.NEW_ORDER_FULL, doc.ORDER_CONDITIONAL)
    assert body["cancelResponse"]["status"] == "CANCELED" and body["cancelResponse"]["origClientOrderId"] == "old"
    assert body["newOrderResponse"]["clientOrderId"] == "new" and body["newOrderResponse"]["origQty"] == "0.00200000"
    assert headers["X-MBX-ORDER-COUNT-10S"] == "2"
    opened = await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT")
    assert [o["clientOrderId"] for o in opened] == ["new"]


async def test_cancel_replace_failures_use_2021_and_2022_with_both_results(api: SignedClient) -> None:
    """Unknown order: STOP_ON_FAILURE is 400/-2022 NOT_ATTEMPTED; ALLOW_FAILURE places anyway (409/-2021);
    a new order that fails after a good cancel is 409/-2021; both failing is 400/-2022."""
    new = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.001",
           "price": api.bid("0.9")}  # fmt: skip
    status, _, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", cancelReplaceMode="STOP_ON_FAILURE", cancelOrderId=999, **new
    )
    assert status == 400 and body == {
        "code": -2022, "msg": "Order cancel-replace failed.",
        "data": {"cancelResult": "FAILURE", "newOrderResult": "NOT_ATTEMPTED",
                 "cancelResponse": {"code": -2011, "msg": "Unknown order sent."}, "newOrderResponse": None},
    }  # fmt: skip
    status, _, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", cancelReplaceMode="ALLOW_FAILURE", cancelOrderId=999, **new
    )
    assert status == 409 and body["code"] == -2021 and body["msg"] == "Order cancel-replace partially failed."
    assert body["data"]["cancelResult"] == "FAILURE" and body["data"]["newOrderResult"] == "SUCCESS"
    resting = body["data"]["newOrderResponse"]
    status, _, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", cancelReplaceMode="STOP_ON_FAILURE", cancelOrderId=resting["orderId"],
        **{**new, "type": "LIMIT_MAKER", "price": api.bid("1.1")},
    )  # fmt: skip
    assert status == 409 and body["code"] == -2021
    assert body["data"]["cancelResult"] == "SUCCESS" and body["data"]["newOrderResult"] == "FAILURE"
    assert body["data"]["newOrderResponse"] == {"code": -2010, "msg": "Order would immediately match and take."}
    status, _, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", cancelReplaceMode="ALLOW_FAILURE", cancelOrderId=resting["orderId"],
        **{**new, "type": "LIMIT_MAKER", "price": api.bid("1.1")},
    )  # fmt: skip
    assert status == 400 and body["code"] == -2022
    assert body["data"]["cancelResult"] == body["data"]["newOrderResult"] == "FAILURE"
    status, _, body = await api.call("POST", "/api/v3/order/cancelReplace", cancelOrderId=1, **new)
    assert status == 400 and body["code"] == -1102 and "cancelReplaceMode" in body["msg"]


async def test_cancel_replace_past_the_order_rate_limit(api: SignedClient) -> None:
    """DO_NOTHING: 429/-1015 and the old order stays; CANCEL_ONLY: the order is cancelled, the new one is -1015."""
    await post_json(api.http, f"{api.sim.url}/sim/v1/faults", {"order_rate": {"per_10s": 1}})
    old = (await api.rest_buy())[2]
    new = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.001",
           "price": api.bid("0.9"), "cancelReplaceMode": "STOP_ON_FAILURE",
           "cancelOrderId": old["orderId"]}  # fmt: skip
    status, headers, body = await api.call("POST", "/api/v3/order/cancelReplace", **new)
    assert status == 429 and body == {
        "code": -1015,
        "msg": "Too many new orders; current limit is 1 orders per 10 SECOND.",
    }
    assert int(headers["Retry-After"]) >= 1
    assert (await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", orderId=old["orderId"]))["status"] == "NEW"
    status, _, body = await api.call(
        "POST", "/api/v3/order/cancelReplace", orderRateLimitExceededMode="CANCEL_ONLY", **new
    )
    assert status == 429 and body["code"] == -2021
    assert body["data"]["cancelResult"] == "SUCCESS" and body["data"]["newOrderResult"] == "FAILURE"
    assert body["data"]["newOrderResponse"]["code"] == -1015
    assert (await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", orderId=old["orderId"]))["status"] == "CANCELED"


async def test_rolling_window_ticker_has_binances_shapes_windows_and_weights(api: SignedClient) -> None:
    """FULL and MINI key sets; openTime on a whole minute windowSize before now; 4 weight per symbol."""
    url = f"{api.sim.url}/api/v3/ticker"
    api.sim.exchange.advance(37.5)
    now = api.sim.exchange.now_ms()
    before = api.sim.exchange.weights.used()
    status, headers, full = await get_json(api.http, url, symbol="BTCUSDT", windowSize="2h")
    assert status == 200 and int(headers["X-MBX-USED-WEIGHT-1M"]) == before + 4
    doc.assert_documented_keys(full, doc.TICKER_FULL)
    assert full["closeTime"] == now and full["openTime"] == (now - 7_200_000) // 60_000 * 60_000
    assert Decimal(full["lowPrice"]) <= Decimal(full["lastPrice"]) <= Decimal(full["highPrice"])
    assert full["count"] == full["lastId"] - full["firstId"] + 1 > 0
    status, _, mini = await get_json(api.http, url, symbols='["BTCUSDT","ETHUSDT"]', type="MINI")
    assert status == 200 and [m["symbol"] for m in mini] == ["BTCUSDT", "ETHUSDT"]
    for m in mini:
        doc.assert_documented_keys(m, doc.TICKER_MINI)
        assert m["openTime"] == (now - 86_400_000) // 60_000 * 60_000  # windowSize defaults to 1d
    for window, ok in (("1m", True), ("59m", True), ("23h", True), ("7d", True), ("60m", False), ("8d", False),
                       ("1d2h", False), ("0m", False), ("1w", False)):  # fmt: skip
        status, _, body = await get_json(api.http, url, symbol="BTCUSDT", windowSize=window)
        assert (status == 200) is ok, (window, body)
    assert (await get_json(api.http, url, symbol="BTCUSDT", type="HALF"))[2]["code"] == -1139
    assert (await get_json(api.http, url))[2]["code"] == -1102


async def test_unknown_paths_and_wrong_methods_answer_json(api: SignedClient) -> None:
    """404 for an unknown /api path, 405 for a known path with the wrong method, both {"code","msg"}."""
    async with api.http.get(f"{api.sim.url}/api/v3/nowhere") as r:
        assert r.status == 404 and r.content_type == "application/json"
        assert (await r.json())["code"] == -1000
    async with api.http.put(f"{api.sim.url}/api/v3/openOrders") as r:
        assert r.status == 405 and r.content_type == "application/json"
        assert await r.json() == {"code": -1020, "msg": "This operation is not supported."}


async def test_answers_have_the_documented_keys(api: SignedClient) -> None:
    """account, exchangeInfo, order answers (ACK/RESULT/FULL, query, cancel) and rateLimit/order."""
    doc.assert_documented_keys(await api.ok("GET", "/api/v3/account"), doc.ACCOUNT)
    _, _, info = await get_json(api.http, f"{api.sim.url}/api/v3/exchangeInfo")
    doc.assert_documented_keys(info, doc.EXCHANGE_INFO)
    for sym in info["symbols"]:
        doc.assert_documented_keys(sym, doc.EXCHANGE_INFO_SYMBOL)
    limit = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.001",
             "price": api.bid()}  # fmt: skip
    for resp_type, keys in (("ACK", doc.NEW_ORDER_ACK), ("RESULT", doc.NEW_ORDER_RESULT), ("FULL", doc.NEW_ORDER_FULL)):
        answer = await api.ok("POST", "/api/v3/order", newOrderRespType=resp_type, **limit)
        doc.assert_documented_keys(answer, keys, doc.ORDER_CONDITIONAL)
    doc.assert_documented_keys(await api.ok("POST", "/api/v3/order", **limit), doc.NEW_ORDER_FULL)  # LIMIT: FULL
    market = await api.ok("POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity="0.001")
    doc.assert_documented_keys(market, doc.NEW_ORDER_FULL, doc.ORDER_CONDITIONAL)
    stop = await api.ok("POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="STOP_LOSS", quantity="0.001",
                        stopPrice=api.bid("0.9"))  # fmt: skip
    doc.assert_documented_keys(stop, doc.NEW_ORDER_ACK)  # other types: ACK
    queried = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", orderId=stop["orderId"])
    doc.assert_documented_keys(queried, doc.QUERY_ORDER, doc.ORDER_CONDITIONAL)
    for row in await api.ok("GET", "/api/v3/openOrders", symbol="BTCUSDT"):
        doc.assert_documented_keys(row, doc.QUERY_ORDER, doc.ORDER_CONDITIONAL)
    cancelled = await api.ok("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=stop["orderId"])
    doc.assert_documented_keys(cancelled, doc.CANCEL_ORDER, doc.ORDER_CONDITIONAL)
    assert cancelled["stopPrice"] == queried["stopPrice"]
    for row in await api.ok("GET", "/api/v3/rateLimit/order"):
        doc.assert_documented_keys(row, doc.RATE_LIMIT_ORDER)


async def test_cancel_restrictions_are_checked(api: SignedClient) -> None:
    """An unknown value is -1145; ONLY_PARTIALLY_FILLED on a NEW order is -2011 and the order stays."""
    order = (await api.rest_buy())[2]
    status, _, body = await api.call("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=order["orderId"],
                                     cancelRestrictions="SOMETIMES")  # fmt: skip
    assert status == 400 and body == {"code": -1145, "msg": "Invalid cancelRestrictions"}
    status, _, body = await api.call("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=order["orderId"],
                                     cancelRestrictions="ONLY_PARTIALLY_FILLED")  # fmt: skip
    assert status == 400 and body == {"code": -2011, "msg": "Order was not canceled due to cancel restrictions."}
    assert (await api.ok("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=order["orderId"],
                         cancelRestrictions="ONLY_NEW"))["status"] == "CANCELED"  # fmt: skip
