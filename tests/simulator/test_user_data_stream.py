"""The simulator's spot user data stream: the WS-API signature subscription at ``/ws-api/v3``.

Binance removed the listenKey streams on 2026-02-20 (reference README), so this subscription is
the one way account events reach a client; these tests hold it to web-socket-api.md and
user-data-stream.md: events wrapped with their subscription's id, ids counted per connection,
one subscription per account and connection (-2035), ``eventStreamTerminated`` when one ends,
``session.subscriptions``, and the signed request's refusals.  "Nothing more arrived" is proved
by a ``ping`` answered after it: the server queues a REST order's events before answering it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from simulator.accounts import OrderError, SimAccount
from simulator.app import RunningSimulator
from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET
from simulator.ws_api_hub import MAX_SUBSCRIPTION_IDS, WsApiConnection
from tests.simulator.conftest import post_json
from tests.simulator.signed import SignedClient

Event = dict[str, Any]
WAIT_S = 5.0


def signed(sim: RunningSimulator, **overrides: Any) -> dict[str, Any]:
    """``userDataStream.subscribe.signature``'s parameters, HMAC over the sorted others; ``overrides`` first."""
    params: dict[str, Any] = {"apiKey": DEFAULT_API_KEY, "timestamp": sim.exchange.server_time(), **overrides}
    payload = "&".join(f"{k}={params[k]}" for k in sorted(params) if k != "signature")
    params.setdefault("signature", hmac.new(DEFAULT_API_SECRET.encode(), payload.encode(), hashlib.sha256).hexdigest())
    return {k: v for k, v in params.items() if v is not None}


class WsApiClient:
    """One WS-API connection: requests matched to their answers; the events read meanwhile are kept."""

    def __init__(self, sim: RunningSimulator, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.sim, self.ws = sim, ws
        self.events: list[tuple[int, Event]] = []
        self._ids = 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._ids += 1
        await self.ws.send_json({"id": self._ids, "method": method, **({"params": params} if params else {})})
        while True:
            msg = await self.ws.receive_json(timeout=WAIT_S)
            if "event" in msg:
                self.events.append((msg["subscriptionId"], msg["event"]))
            elif msg.get("id") == self._ids:
                return msg

    async def subscribe(self, **overrides: Any) -> dict[str, Any]:
        return await self.request("userDataStream.subscribe.signature", signed(self.sim, **overrides))

    async def drained(self) -> list[tuple[int, Event]]:
        """Every event sent before now (a ``ping``'s answer follows them), and forget them."""
        await self.request("ping")
        events, self.events = self.events, []
        return events

    async def active(self) -> list[int]:
        answer = await self.request("session.subscriptions")
        assert answer["status"] == 200, answer
        return [row["subscriptionId"] for row in answer["result"]]


@pytest.fixture
async def connect(simx: RunningSimulator, http: aiohttp.ClientSession) -> AsyncIterator[Any]:
    opened: list[aiohttp.ClientWebSocketResponse] = []

    async def open_one() -> WsApiClient:
        ws = await http.ws_connect(f"{simx.ws_url}/ws-api/v3")
        opened.append(ws)
        return WsApiClient(simx, ws)

    try:
        yield open_one
    finally:
        for ws in opened:
            await ws.close()


@pytest.fixture
def rest(simx: RunningSimulator, http: aiohttp.ClientSession) -> SignedClient:
    return SignedClient(simx, http)


async def buy(rest: SignedClient, qty: str = "0.001") -> dict[str, Any]:
    """A MARKET BUY of BTCUSDT over signed REST (filled at once); Binance's FULL answer."""
    return await rest.ok("POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity=qty)


def kinds(events: list[tuple[int, Event]]) -> list[tuple[int, str, str]]:
    """(subscription id, event type, execution type or "") of each event, in order."""
    return [(sub, e["e"], e.get("x", "")) for sub, e in events]


async def test_a_rest_order_reaches_the_subscription_wrapped_with_its_id(connect: Any, rest: SignedClient) -> None:
    client = await connect()
    assert (await client.subscribe()) == {"id": 1, "status": 200, "result": {"subscriptionId": 0}}
    order = await buy(rest)
    events = await client.drained()
    reports = [e for _, e in events if e["e"] == "executionReport"]
    assert [(r["x"], r["X"]) for r in reports] == [("NEW", "NEW"), ("TRADE", "FILLED")]
    assert {(r["i"], r["c"], r["s"], r["S"]) for r in reports} == {
        (order["orderId"], order["clientOrderId"], "BTCUSDT", "BUY")
    }
    assert reports[-1]["z"] == order["executedQty"] and reports[-1]["Z"] == order["cummulativeQuoteQty"]
    assert {sub for sub, _ in events} == {0}
    positions = [e for _, e in events if e["e"] == "outboundAccountPosition"]
    account = await rest.ok("GET", "/api/v3/account")
    now = {b["asset"]: (b["free"], b["locked"]) for b in account["balances"]}
    assert {b["a"]: (b["f"], b["l"]) for b in positions[-1]["B"]} == {a: now[a] for a in ("BTC", "USDT")}
    assert Decimal(now["BTC"][0]) > 0  # the fill is in the last position, not the starting one


async def test_outbound_account_position_is_sent_only_when_a_balance_changed(connect: Any, rest: SignedClient) -> None:
    """user-data-stream.md: a MARKET order's NEW and an IOC that expires untouched change no balance, so no
    ``outboundAccountPosition`` follows them; a fill, a resting order's lock and its cancel each send one."""
    client = await connect()
    await client.subscribe()
    await buy(rest)
    assert [k[1:] for k in kinds(await client.drained())] == [
        ("executionReport", "NEW"), ("executionReport", "TRADE"), ("outboundAccountPosition", ""),
    ]  # fmt: skip
    ioc = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "IOC", "quantity": "0.001"}
    await rest.ok("POST", "/api/v3/order", **ioc, price=rest.bid())
    expired = [("executionReport", "NEW"), ("executionReport", "EXPIRED")]
    assert [k[1:] for k in kinds(await client.drained())] == expired
    resting = (await rest.rest_buy())[2]
    events = await client.drained()
    assert [k[1:] for k in kinds(events)] == [("executionReport", "NEW"), ("outboundAccountPosition", "")]
    locked = {b["a"]: b["l"] for b in events[-1][1]["B"]}
    assert Decimal(locked["USDT"]) == Decimal(resting["price"]) * Decimal("0.001")
    await rest.ok("DELETE", "/api/v3/order", symbol="BTCUSDT", orderId=resting["orderId"])
    events = await client.drained()
    assert [k[1:] for k in kinds(events)] == [("executionReport", "CANCELED"), ("outboundAccountPosition", "")]
    assert {b["a"]: b["l"] for b in events[-1][1]["B"]}["USDT"] == "0.00000000"


async def test_a_second_subscription_on_one_connection_is_refused_and_events_arrive_once(
    connect: Any, rest: SignedClient
) -> None:
    client = await connect()
    await client.subscribe()
    again = await client.subscribe()
    assert again["status"] == 400
    assert again["error"] == {"code": -2035, "msg": "User Data Stream subscription already active."}
    await buy(rest)
    assert [k for k in kinds(await client.drained()) if k[1] == "executionReport"] == [
        (0, "executionReport", "NEW"),
        (0, "executionReport", "TRADE"),
    ]


async def test_subscription_ids_count_per_connection(connect: Any) -> None:
    first, second = await connect(), await connect()
    assert (await first.subscribe())["result"] == {"subscriptionId": 0}
    assert (await second.subscribe())["result"] == {"subscriptionId": 0}
    assert (await first.request("userDataStream.unsubscribe"))["status"] == 200
    assert (await first.subscribe())["result"] == {"subscriptionId": 1}
    assert await first.active() == [1] and await second.active() == [0]


async def test_unsubscribe_ends_the_stream_with_event_stream_terminated(
    simx: RunningSimulator, connect: Any, rest: SignedClient
) -> None:
    client = await connect()
    await client.subscribe()
    answer = await client.request("userDataStream.unsubscribe", {"subscriptionId": 0})
    assert answer == {"id": 2, "status": 200, "result": {}}
    assert client.events == [(0, {"e": "eventStreamTerminated", "E": simx.exchange.now_ms()})]
    client.events.clear()
    await buy(rest)
    assert await client.drained() == []
    assert await client.active() == []


async def test_unsubscribing_an_id_that_is_not_active_leaves_the_active_one(connect: Any, rest: SignedClient) -> None:
    client = await connect()
    await client.subscribe()
    assert (await client.request("userDataStream.unsubscribe", {"subscriptionId": 7}))["status"] == 200
    await buy(rest)
    events = await client.drained()
    assert "eventStreamTerminated" not in {e["e"] for _, e in events}
    assert (0, "executionReport", "TRADE") in kinds(events)
    assert await client.active() == [0]


@pytest.mark.parametrize(
    ("overrides", "status", "code"),
    [
        ({"apiKey": "someone-else"}, 401, -2015),
        ({"signature": "0" * 64}, 400, -1022),
        ({"signature": None}, 400, -1102),
        ({"timestamp": 0}, 400, -1021),
        ({"recvWindow": 60001}, 400, -1131),
    ],
    ids=["wrong-key", "bad-signature", "no-signature", "stale-timestamp", "recv-window-too-long"],
)
async def test_a_refused_subscription_answers_binances_error_and_subscribes_nothing(
    connect: Any, rest: SignedClient, overrides: dict[str, Any], status: int, code: int
) -> None:
    client = await connect()
    answer = await client.subscribe(**overrides)
    assert answer["status"] == status and answer["error"]["code"] == code, answer
    await buy(rest)
    assert await client.drained() == []
    assert await client.active() == []


async def test_a_closed_connection_stops_feeding_from_the_account(simx: RunningSimulator, connect: Any) -> None:
    listeners = len(simx.exchange.account.listeners)
    client = await connect()
    await client.subscribe()
    assert len(simx.exchange.account.listeners) == listeners + 1
    await client.ws.close()
    deadline = time.monotonic() + WAIT_S
    while simx.exchange.ws_api.state() != {"connections": 0, "subscriptions": 0}:  # the server's handler ends
        assert time.monotonic() < deadline, simx.exchange.ws_api.state()
        await asyncio.sleep(0.01)
    assert len(simx.exchange.account.listeners) == listeners


async def test_the_terminate_fault_ends_every_subscription_and_a_new_one_starts(
    simx: RunningSimulator, http: aiohttp.ClientSession, connect: Any, rest: SignedClient
) -> None:
    first, second = await connect(), await connect()
    await first.subscribe()
    await second.subscribe()
    done = await post_json(http, f"{simx.url}/sim/v1/faults", {"user_stream_terminated": True})
    assert done["user_streams_terminated"] == 2
    for client in (first, second):
        assert kinds(await client.drained()) == [(0, "eventStreamTerminated", "")]
    assert (await first.subscribe())["result"] == {"subscriptionId": 1}
    await buy(rest)
    assert (1, "executionReport", "TRADE") in kinds(await first.drained())
    assert await second.drained() == []


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_the_removed_listen_key_endpoint_is_not_served(
    simx: RunningSimulator, http: aiohttp.ClientSession, method: str
) -> None:
    async with http.request(
        method, f"{simx.url}/api/v3/userDataStream", headers={"X-MBX-APIKEY": DEFAULT_API_KEY}
    ) as r:
        assert r.status == 404


def test_a_connection_starts_at_most_65535_subscriptions() -> None:
    account = SimAccount({"USDT": Decimal("10000")})
    conn = WsApiConnection(web.WebSocketResponse())
    for expected in range(MAX_SUBSCRIPTION_IDS):
        assert conn.subscribe(account) == expected
        assert conn.unsubscribe(account, 0) == 1
    with pytest.raises(OrderError) as refused:
        conn.subscribe(account)
    assert (refused.value.code, refused.value.msg) == (-2042, "Maximum subscription ID reached for this connection.")
    assert account.listeners == []
