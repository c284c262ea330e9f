"""The account's order rate limit (HTTP 429, -1015) through the Binance broker, against the simulator's
``order_rate`` fault: a definite "not placed" naming the limit and the wait, new orders held back until
``Retry-After`` while market data, queries and cancels go on; MAX_NUM_ORDERS refusals are plain rejections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import aiohttp
import pytest

from brokers.binance.broker import BinanceBroker
from brokers.models import Actor, OrderRejected, RateLimitedError
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator
from storage import Database

ADMIN = Actor(None, admin=True)
RESTING = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "price": 60000, "quantity": 0.001}
OCO = {"symbol": "BTCUSDT", "side": "sell", "quantity": 0.001, "take_profit_price": 70000, "stop_price": 60000}


@dataclass
class Rig:
    sim: RunningSimulator
    broker: BinanceBroker
    svc: OrderService
    http: aiohttp.ClientSession

    async def control(self, path: str, body: dict[str, Any]) -> None:
        async with self.http.post(f"{self.sim.url}/sim/v1/{path}", json=body) as r:
            assert r.status == 200, await r.text()

    def sent(self, route: str = "POST /api/v3/order") -> int:
        return self.sim.exchange.requests[route]


async def rig_at(second_of_window: int) -> Rig:
    """A manual-clock simulator whose clock stands at noon UTC plus ``second_of_window`` seconds (into a
    10-s ORDERS window, half a day from the daily one's end: ``Retry-After`` is known), and the Binance
    broker (synced to that clock) and order service on it."""
    start_ms = (int(time.time()) // 86400 * 86400 + 43200 + second_of_window) * 1000
    sim = await start_simulator(
        clock="manual", start_ms=start_ms, symbols=["BTCUSDT"], balances={"USDT": Decimal(10_000), "BTC": Decimal(1)}
    )
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await broker.sync_time()
    return Rig(
        sim, broker, OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None)), aiohttp.ClientSession()
    )


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await rig_at(0)
    try:
        yield r
    finally:
        await close(r)


async def close(r: Rig) -> None:
    await r.http.close()
    await r.broker.close()
    await r.svc.store.db.close()
    await r.sim.close()


async def test_an_order_past_the_daily_order_limit_is_refused_naming_it_and_nothing_else_stops(rig: Rig) -> None:
    """per_day 2: the third order is REJECTED (never UNKNOWN) with Binance's text, -1015 and the wait;
    later orders and lists fail at once without being sent, while the ticker, the account, queries and
    cancels still work and nothing is banned."""
    await rig.control("faults", {"order_rate": {"per_day": 2}})
    first = await rig.svc.place_order({**RESTING, "client_order_id": "r1"})
    await rig.svc.place_order({**RESTING, "client_order_id": "r2"})
    assert first["status"] == "Open" and rig.broker.order_counts == {"10S": 2, "1D": 2}
    with pytest.raises(RateLimitedError) as refused:
        await rig.svc.place_order({**RESTING, "client_order_id": "r3"})
    text = str(refused.value)
    assert "Too many new orders; current limit is 2 orders per 1 DAY." in text and "-1015" in text
    assert refused.value.retry_after_s > 3600  # the rest of the (simulated) day
    row = await rig.svc.store.get("r3")
    assert row is not None and row.status == "REJECTED" and "-1015" in (row.reject_reason or "")
    assert {r.client_order_id for r in await rig.svc.store.unresolved("binance")} == {"r1", "r2"}

    sent = rig.sent()
    with pytest.raises(RateLimitedError, match="order rate limit"):
        await rig.svc.place_order({**RESTING, "client_order_id": "r4"})
    with pytest.raises(RateLimitedError, match="order rate limit"):
        await rig.svc.lists.place_oco(OCO, owner=None)
    assert rig.sent() == sent and rig.sent("POST /api/v3/orderList/oco") == 0
    assert (await rig.svc.store.get("r4")).status == "REJECTED"  # type: ignore[union-attr]
    assert {r.client_order_id for r in await rig.svc.store.unresolved("binance")} == {"r1", "r2"}  # OCO legs too

    assert rig.broker.banned_until == 0.0
    assert await rig.broker.last_price("BTCUSDT") is not None
    assert any(b.asset == "USDT" for b in await rig.broker.balances())
    assert (await rig.broker.query("BTCUSDT", "r1")) is not None
    assert await rig.svc.cancel_order("r1", actor=ADMIN) == {"ok": True}
    assert (await rig.svc.store.get("r1")).status == "CANCELED"  # type: ignore[union-attr]


async def test_a_short_order_limit_wait_holds_new_orders_only_then_sends_them() -> None:
    """per_10s 1, two seconds left in the window: the second order is refused with retry_after 2; the next
    one waits for that before it is sent (the ticker answers meanwhile) and is placed in the new window."""
    rig = await rig_at(8)
    try:
        await rig.control("faults", {"order_rate": {"per_10s": 1}})
        await rig.svc.place_order({**RESTING, "client_order_id": "w1"})
        with pytest.raises(RateLimitedError) as refused:
            await rig.svc.place_order({**RESTING, "client_order_id": "w2"})
        assert refused.value.data["retry_after_secs"] == 2 and "per 10 SECOND" in str(refused.value)
        sent = rig.sent()
        held = asyncio.create_task(rig.svc.place_order({**RESTING, "client_order_id": "w3"}))
        assert await rig.broker.last_price("BTCUSDT") is not None  # market data is not held back
        assert rig.sent() == sent and not held.done()
        await rig.control("advance", {"seconds": 2})  # the exchange's window ends with our wait
        async with asyncio.timeout(5):
            out = await held
        assert out["status"] == "Open" and rig.sent() == sent + 1
        assert (await rig.svc.store.get("w2")).status == "REJECTED"  # type: ignore[union-attr]
    finally:
        await close(rig)


async def test_max_num_orders_is_a_plain_rejection_not_a_rate_limit(rig: Rig) -> None:
    """The MAX_NUM_ORDERS filter refuses a resting order: OrderRejected, REJECTED, and new orders are not held."""
    await rig.control("faults", {"max_num_orders": 1})
    await rig.svc.place_order({**RESTING, "client_order_id": "m1"})
    with pytest.raises(OrderRejected, match="MAX_NUM_ORDERS"):
        await rig.svc.place_order({**RESTING, "client_order_id": "m2"})
    assert (await rig.svc.store.get("m2")).status == "REJECTED"  # type: ignore[union-attr]
    assert rig.broker.orders_blocked_until == 0.0 and rig.broker.banned_until == 0.0
    await rig.svc.cancel_order("m1", actor=ADMIN)
    out = await rig.svc.place_order({**RESTING, "client_order_id": "m3"})
    assert out["status"] == "Open"
