"""The simulator's order limits: ORDERS rate limits (429/-1015, headers, rateLimit/order) and count filters."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from simulator.order_rate import OrderRate
from tests.simulator.conftest import get_json, post_json
from tests.simulator.signed import SignedClient


async def faults(api: SignedClient, body: dict[str, object]) -> dict[str, object]:
    return await post_json(api.http, f"{api.sim.url}/sim/v1/faults", body)


async def test_exchange_info_states_binances_order_rate_limits_and_count_filters(api: SignedClient) -> None:
    """ORDERS 100/10 s and 200,000/day; MAX_NUM_ORDERS 200, MAX_NUM_ALGO_ORDERS 5, MAX_NUM_ORDER_LISTS 20."""
    _, _, info = await get_json(api.http, f"{api.sim.url}/api/v3/exchangeInfo", symbol="BTCUSDT")
    orders = [r for r in info["rateLimits"] if r["rateLimitType"] == "ORDERS"]
    assert orders == [
        {"rateLimitType": "ORDERS", "interval": "SECOND", "intervalNum": 10, "limit": 100},
        {"rateLimitType": "ORDERS", "interval": "DAY", "intervalNum": 1, "limit": 200000},
    ]
    filters = {f["filterType"]: f for f in info["symbols"][0]["filters"]}
    assert filters["MAX_NUM_ORDERS"] == {"filterType": "MAX_NUM_ORDERS", "maxNumOrders": 200}
    assert filters["MAX_NUM_ALGO_ORDERS"] == {"filterType": "MAX_NUM_ALGO_ORDERS", "maxNumAlgoOrders": 5}
    assert filters["MAX_NUM_ORDER_LISTS"] == {"filterType": "MAX_NUM_ORDER_LISTS", "maxNumOrderLists": 20}


async def test_order_answers_carry_the_order_count_headers(api: SignedClient) -> None:
    """Each placement, accepted or refused by a filter, counts; the answers say so in X-MBX-ORDER-COUNT-*."""
    status, headers, _ = await api.rest_buy()
    assert status == 200 and headers["X-MBX-ORDER-COUNT-10S"] == "1" and headers["X-MBX-ORDER-COUNT-1D"] == "1"
    status, headers, body = await api.rest_buy(quantity="0.0000001")  # below LOT_SIZE
    assert status == 400 and body["code"] == -1013
    assert headers["X-MBX-ORDER-COUNT-10S"] == "2" and headers["X-MBX-ORDER-COUNT-1D"] == "2"
    await api.ok("POST", "/api/v3/order/test", symbol="BTCUSDT", side="BUY", type="MARKET", quantity="0.001")
    counts = await api.ok("GET", "/api/v3/rateLimit/order")
    assert [c["count"] for c in counts] == [2, 2]  # a test order counts nothing


async def test_past_the_10s_limit_answers_429_with_retry_after_and_recovers_when_the_window_passes(
    api: SignedClient,
) -> None:
    """order_rate per_10s=3: the fourth order is 429/-1015 with Binance's text; advancing the clock frees it."""
    tightened = await faults(api, {"order_rate": {"per_10s": 3}})
    assert tightened["order_rate"][0]["limit"] == 3
    api.sim.exchange.advance(10 - (api.sim.exchange.now_ms() % 10_000) / 1000)  # the start of a 10 s window
    for _ in range(3):
        assert (await api.rest_buy())[0] == 200
    api.sim.exchange.advance(4)
    status, headers, body = await api.rest_buy()
    assert status == 429
    assert body == {"code": -1015, "msg": "Too many new orders; current limit is 3 orders per 10 SECOND."}
    assert headers["Retry-After"] == "6"
    counts = await api.ok("GET", "/api/v3/rateLimit/order")
    assert counts[0] == {"rateLimitType": "ORDERS", "interval": "SECOND", "intervalNum": 10, "limit": 3, "count": 3}
    api.sim.exchange.advance(6)
    status, headers, _ = await api.rest_buy()
    assert status == 200 and headers["X-MBX-ORDER-COUNT-10S"] == "1" and headers["X-MBX-ORDER-COUNT-1D"] == "4"


async def test_the_day_limit_counts_lists_by_their_orders_and_resets_with_the_fault_reset(
    api: SignedClient,
) -> None:
    """per_day=3: an OCO counts 2; a second OCO passes the day limit; the reset restores Binance's limits."""
    await faults(api, {"order_rate": {"per_day": 3}})
    oco = {"symbol": "BTCUSDT", "side": "SELL", "quantity": "0.001", "aboveType": "LIMIT_MAKER",
           "abovePrice": api.bid("1.05"), "belowType": "STOP_LOSS", "belowStopPrice": api.bid("0.95")}  # fmt: skip
    status, headers, _ = await api.call("POST", "/api/v3/orderList/oco", **oco)
    assert status == 200 and headers["X-MBX-ORDER-COUNT-1D"] == "2"
    status, headers, body = await api.call("POST", "/api/v3/orderList/oco", **oco)
    assert status == 429 and body["msg"] == "Too many new orders; current limit is 3 orders per 1 DAY."
    assert int(headers["Retry-After"]) > 10
    await faults(api, {"reset": True})
    _, _, info = await get_json(api.http, f"{api.sim.url}/api/v3/exchangeInfo")
    assert [r["limit"] for r in info["rateLimits"] if r["rateLimitType"] == "ORDERS"] == [100, 200000]
    assert (await api.call("POST", "/api/v3/orderList/oco", **oco))[0] == 200


async def test_a_bad_order_rate_knob_is_refused_with_a_hint(api: SignedClient) -> None:
    async with api.http.post(f"{api.sim.url}/sim/v1/faults", json={"order_rate": {"per_10s": 0}}) as r:
        assert r.status == 400 and "per_10s" in (await r.json())["error"]


async def test_max_num_orders_refuses_the_order_past_the_open_count(api: SignedClient) -> None:
    """max_num_orders=2: a third open order on the symbol is -2010 "Filter failure: MAX_NUM_ORDERS"; another
    symbol is not affected; cancelling one makes room."""
    await faults(api, {"max_num_orders": 2})
    first = (await api.rest_buy())[2]
    assert (await api.rest_buy())[0] == 200
    status, _, body = await api.rest_buy()
    assert status == 400 and body == {"code": -2010, "msg": "Filter failure: MAX_NUM_ORDERS"}
    eth = {"symbol": "ETHUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.01",
           "price": api.bid("0.95", "ETHUSDT")}  # fmt: skip
    assert (await api.call("POST", "/api/v3/order", **eth))[0] == 200
    await api.ok("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=first["orderId"])
    assert (await api.rest_buy())[0] == 200


async def test_max_num_algo_orders_can_be_tightened(api: SignedClient) -> None:
    """max_num_algo_orders=1: the second open stop is -2010 "Filter failure: MAX_NUM_ALGO_ORDERS"."""
    await faults(api, {"max_num_algo_orders": 1})
    stop = {"symbol": "BTCUSDT", "side": "SELL", "type": "STOP_LOSS", "quantity": "0.001",
            "stopPrice": api.bid("0.9")}  # fmt: skip
    assert (await api.call("POST", "/api/v3/order", **stop))[0] == 200
    status, _, body = await api.call("POST", "/api/v3/order", **stop)
    assert status == 400 and body == {"code": -2010, "msg": "Filter failure: MAX_NUM_ALGO_ORDERS"}


async def test_max_num_algo_orders_also_loosens_for_stops_and_lists(api: SignedClient) -> None:
    """max_num_algo_orders=7: a sixth open stop and then an OCO whose stop leg is the seventh are accepted
    (conditional.py and order_lists.py read the count filters, not Binance's 5); the eighth is refused."""
    await faults(api, {"max_num_algo_orders": 7})
    stop = {"symbol": "BTCUSDT", "side": "SELL", "type": "STOP_LOSS", "quantity": "0.001",
            "stopPrice": api.bid("0.9")}  # fmt: skip
    for _ in range(6):
        status, _, body = await api.call("POST", "/api/v3/order", **stop)
        assert status == 200, body
    oco = {"symbol": "BTCUSDT", "side": "SELL", "quantity": "0.001", "aboveType": "LIMIT_MAKER",
           "abovePrice": api.bid("1.05"), "belowType": "STOP_LOSS", "belowStopPrice": api.bid("0.95")}  # fmt: skip
    status, _, body = await api.call("POST", "/api/v3/orderList/oco", **oco)
    assert status == 200, body
    status, _, body = await api.call("POST", "/api/v3/order", **stop)
    assert status == 400 and body == {"code": -2010, "msg": "Filter failure: MAX_NUM_ALGO_ORDERS"}


async def test_sim_state_shows_the_order_counts_and_the_count_filters(api: SignedClient) -> None:
    """/sim/v1/state carries the ORDERS windows (limit and count) and the MAX_NUM_* limits with the open counts."""
    await faults(api, {"order_rate": {"per_10s": 50}, "max_num_orders": 9})
    await api.rest_buy()
    await api.rest_buy()
    stop = {"symbol": "BTCUSDT", "side": "SELL", "type": "STOP_LOSS", "quantity": "0.001",
            "stopPrice": api.bid("0.9")}  # fmt: skip
    await api.ok("POST", "/api/v3/order", **stop)
    _, _, state = await get_json(api.http, f"{api.sim.url}/sim/v1/state")
    assert state["order_rate"] == [
        {"rateLimitType": "ORDERS", "interval": "SECOND", "intervalNum": 10, "limit": 50, "count": 3},
        {"rateLimitType": "ORDERS", "interval": "DAY", "intervalNum": 1, "limit": 200_000, "count": 3},
    ]
    assert state["count_filters"] == {
        "limits": {"max_num_orders": 9, "max_num_algo_orders": 5, "max_num_order_lists": 20},
        "open": {"BTCUSDT": {"orders": 3, "algo_orders": 1, "order_lists": 0}},
    }


async def test_max_num_order_lists_refuses_a_list_past_the_open_count(api: SignedClient) -> None:
    """max_num_order_lists=1: the second open OCO is -2010 "Filter failure: MAX_NUM_ORDER_LISTS"."""
    done = await faults(api, {"max_num_order_lists": 1})
    assert done["max_num_order_lists"] == 1
    _, _, info = await get_json(api.http, f"{api.sim.url}/api/v3/exchangeInfo", symbol="BTCUSDT")
    assert {"filterType": "MAX_NUM_ORDER_LISTS", "maxNumOrderLists": 1} in info["symbols"][0]["filters"]
    oco = {"symbol": "BTCUSDT", "side": "SELL", "quantity": "0.001", "aboveType": "LIMIT_MAKER",
           "abovePrice": api.bid("1.05"), "belowType": "STOP_LOSS", "belowStopPrice": api.bid("0.95")}  # fmt: skip
    assert (await api.call("POST", "/api/v3/orderList/oco", **oco))[0] == 200
    status, _, body = await api.call("POST", "/api/v3/orderList/oco", **oco)
    assert status == 400 and body == {"code": -2010, "msg": "Filter failure: MAX_NUM_ORDER_LISTS"}


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 25_000)), max_size=40), st.integers(1, 6))
def test_no_window_ever_holds_more_than_its_limit(steps: list[tuple[int, int]], limit: int) -> None:
    """Whatever the placements and clock steps, a 10 s window's count never passes its limit, and a
    refusal always names a wait that ends inside the window."""
    now = [0]
    rate = OrderRate(lambda: now[0], per_10s=limit, per_day=10**6)
    for n, step in steps:
        now[0] += step
        refusal = rate.take(n)
        count = rate.counts()[0]["count"]
        assert count <= limit
        if refusal is not None:
            assert count + n > limit and 1 <= refusal.retry_after <= 10
