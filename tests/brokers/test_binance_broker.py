"""BinanceBroker against the simulator: rate-limit bans, user-stream loss, -1021 resync."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from brokers.binance.broker import BinanceBroker
from brokers.binance.user_stream import UserStream, UserStreamEnded
from brokers.models import Actor, RateLimitedError
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, HttpErrorFault, RunningSimulator
from storage import Database

pytestmark = pytest.mark.slow


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


BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001}
ADMIN = Actor(None, admin=True)


async def test_a_429_bans_requests_until_retry_after_has_passed(service: OrderService, sim: RunningSimulator) -> None:
    """429 Retry-After 2: the order is refused with retry_after_secs; the next one waits ≥ 2 s before sending."""
    sim.exchange.faults.http_errors.append(HttpErrorFault(status=429, retry_after=2, count=1, path="/api/v3/order"))
    with pytest.raises(RateLimitedError) as info:
        await service.place_order(BUY)
    refused_at = time.monotonic()
    assert info.value.data == {"retry_after_secs": 2}
    sent_before = sim.exchange.requests["POST /api/v3/order"]
    out = await service.place_order(BUY)
    assert out["status"] == "Filled"
    assert time.monotonic() - refused_at >= 1.9
    assert sim.exchange.requests["POST /api/v3/order"] == sent_before + 1


async def test_a_long_ban_fails_fast_and_sends_nothing(service: OrderService, sim: RunningSimulator) -> None:
    """418 with Retry-After 120: every call during the ban fails at once; the exchange sees no request."""
    sim.exchange.faults.http_errors.append(HttpErrorFault(status=418, retry_after=120, count=1))
    with pytest.raises(RateLimitedError):
        await service.place_order(BUY)
    before = dict(sim.exchange.requests)
    with pytest.raises(RateLimitedError) as info:
        await service.place_order(BUY)
    assert info.value.data["retry_after_secs"] >= 100
    assert dict(sim.exchange.requests) == before


async def test_a_clock_skew_is_resynced_and_the_request_retried_once(
    service: OrderService, sim: RunningSimulator
) -> None:
    """-1021 (our clock 10 s off): one resync, one retry, the order goes through."""
    sim.exchange.faults.clock_skew_ms = -10_000
    out = await service.place_order(BUY)
    assert out["status"] == "Filled"


async def test_fills_during_a_user_stream_outage_are_recovered(service: OrderService, sim: RunningSimulator) -> None:
    """Drop the WS-API while resting orders fill: after resubscribing, reconciliation knows every fill."""
    broker = service.broker
    assert isinstance(broker, BinanceBroker)
    subscribed = asyncio.Event()

    async def on_resubscribed() -> None:
        await service.reconcile()
        subscribed.set()

    async with aiohttp.ClientSession() as session:
        stream = UserStream(
            session,
            f"{sim.ws_url}/ws-api/v3",
            api_key=DEFAULT_API_KEY,
            api_secret=DEFAULT_API_SECRET,
            on_order=service.on_update,
            on_resubscribed=on_resubscribed,
            time_offset_ms=lambda: int(broker._client.timestamp_offset),
        )

        async def supervised() -> None:
            while True:
                with contextlib.suppress(UserStreamEnded):
                    await stream.run()

        task = asyncio.create_task(supervised())
        try:
            async with asyncio.timeout(10):
                await subscribed.wait()
            ids = []
            for price in (64000, 63900, 63800):
                out = await service.place_order(
                    {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001, "price": price}
                )
                ids.append(out["order_id"])
            subscribed.clear()
            sim.exchange.ws_api.drop_all()
            sim.exchange.trade("BTCUSDT", 63000.0, 0.01)  # all three fill while the stream is down
            async with asyncio.timeout(10):
                await subscribed.wait()  # reconnected, resubscribed, reconciled
            states = {o["id"]: o["state"] for o in await service.get_orders("all", actor=ADMIN)}
            assert [states[i] for i in ids] == ["Filled"] * 3
            fills = await service.store.fills(broker.name, "BTCUSDT")
            assert len(fills) == len(sim.exchange.account.trades)
            assert stream.subscriptions >= 2
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
