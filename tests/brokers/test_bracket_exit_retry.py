"""A bracket's exit refused by the account's order rate limit (HTTP 429, -1015) on a single node: it goes
back to ``waiting`` (its never-sent legs removed), is not tried before ``Retry-After``, and is placed once
the window has passed, exactly once on the exchange; a real refusal (a filter) still rejects it for good.
The Binance broker against the manual-clock simulator and its ``order_rate`` fault; the simulator's own
lists and request counts are the oracle."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from brokers.binance.broker import BinanceBroker
from brokers.orders.brackets import bracket_ids
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator
from storage import Database

OCO_POSTS = "POST /api/v3/orderList/oco"
ENTRY = {"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "bracket": {"take_profit": 90000, "stop_loss": 50000}}


@dataclass
class Rig:
    sim: RunningSimulator
    broker: BinanceBroker
    svc: OrderService
    http: aiohttp.ClientSession
    journal: list[str] = field(default_factory=list)

    async def control(self, path: str, body: dict[str, Any]) -> None:
        async with self.http.post(f"{self.sim.url}/sim/v1/{path}", json=body) as r:
            assert r.status == 200, await r.text()

    def lists_on_exchange(self) -> list[str]:
        return list(self.sim.exchange.order_lists.by_client)

    def on_exchange(self, client_order_id: str) -> Any:
        return next(o for o in self.sim.exchange.account.orders.values() if o.client_order_id == client_order_id)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    """A manual-clock simulator standing 9 s into a 10-s ORDERS window (a refusal there says Retry-After 1),
    the Binance broker synced to it, and the order service on the simulator's clock, its journal kept."""
    start_ms = (int(time.time()) // 86400 * 86400 + 43200 + 9) * 1000
    sim = await start_simulator(
        clock="manual", start_ms=start_ms, symbols=["BTCUSDT"], balances={"USDT": Decimal(10_000), "BTC": Decimal(1)}
    )
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await broker.sync_time()
    journal: list[str] = []

    async def audit(lines: Any) -> None:
        journal.extend(lines)

    svc = OrderService(
        broker, OrderStore(db), audit=audit, limits=SafetyLimits(None, None),
        clock=lambda: sim.exchange.now_ms() / 1000,
    )  # fmt: skip
    r = Rig(sim, broker, svc, aiohttp.ClientSession(), journal)
    try:
        yield r
    finally:
        await r.http.close()
        await broker.close()
        await db.close()
        await sim.close()


async def test_an_exit_refused_for_the_order_rate_waits_for_the_window_then_is_placed_once(rig: Rig) -> None:
    """per_10s 2: the market entry takes 1, its exit OCO (2) is refused with Retry-After 1 — waiting again
    with no leg records, logged and journalled; reconciliation does not send it before the clock has passed
    Retry-After, then places it once, sized to what the entry bought."""
    await rig.control("faults", {"order_rate": {"per_10s": 2}})
    list_id = bracket_ids("rl-entry")[0]
    with capture_logs() as logs:
        out = await rig.svc.place_order({**ENTRY, "client_order_id": "rl-entry"}, owner="alice")
    assert out["status"] == "Filled"
    assert out["bracket"]["state"] == "waiting" and "order rate limit" in out["bracket"]["note"]
    row = await rig.svc.lists.store.get(list_id)
    assert row is not None and (row.bracket_state, row.status) == ("waiting", "PENDING")
    assert await rig.svc.lists.store.leg_ids(list_id) == []  # the next claim inserts them again
    assert rig.sim.exchange.requests[OCO_POSTS] == 1 and rig.lists_on_exchange() == []
    limited = [e for e in logs if e["event"] == "bracket_exit_rate_limited"]
    assert len(limited) == 1 and limited[0]["log_level"] == "warning" and limited[0]["retry_after_s"] == 1
    assert not [e for e in logs if e["event"] == "bracket_exit_refused"]
    refused = [line for line in rig.journal if "BRACKET REFUSED" in line]
    assert len(refused) == 1 and "-1015" in refused[0] and f"retried after {limited[0]['retry_at']}" in refused[0]

    await rig.svc.reconcile()  # Retry-After has not passed on the service's clock: not tried
    assert rig.sim.exchange.requests[OCO_POSTS] == 1
    assert (await rig.svc.lists.store.get(list_id)).bracket_state == "waiting"  # type: ignore[union-attr]

    await rig.control("advance", {"seconds": 1})  # the exchange's window ends with Retry-After
    await rig.svc.reconcile()
    row = await rig.svc.lists.store.get(list_id)
    assert row is not None and row.bracket_state == "placed"
    assert rig.lists_on_exchange() == [list_id] and rig.sim.exchange.requests[OCO_POSTS] == 2
    _, tp_id, sl_id = bracket_ids("rl-entry")
    fee = sum(f.commission for f in await rig.svc.store.fills("binance", "BTCUSDT") if f.client_order_id == "rl-entry")
    step = (await rig.broker.rules("BTCUSDT")).step_size  # type: ignore[union-attr]
    expected = ((Decimal("0.01") - fee) // step) * step
    assert {rig.on_exchange(c).orig_qty for c in (tp_id, sl_id)} == {expected}
    assert {(await rig.svc.store.get(c)).status for c in (tp_id, sl_id)} == {"NEW"}  # type: ignore[union-attr]

    await rig.svc.reconcile()
    assert rig.sim.exchange.requests[OCO_POSTS] == 2 and rig.lists_on_exchange() == [list_id]


async def test_an_exit_refused_by_a_filter_is_rejected_and_never_retried(rig: Rig) -> None:
    """MAX_NUM_ORDERS 1: the entry fills, its two-leg exit is refused (-2010) — rejected, journalled as
    refused with no retry, and reconciliation sends nothing more."""
    await rig.control("faults", {"max_num_orders": 1})
    list_id = bracket_ids("flt-entry")[0]
    out = await rig.svc.place_order({**ENTRY, "client_order_id": "flt-entry"}, owner="alice")
    assert out["status"] == "Filled" and out["bracket"]["state"] == "rejected"
    refused = [line for line in rig.journal if "BRACKET REFUSED" in line]
    assert len(refused) == 1 and "MAX_NUM_ORDERS" in refused[0] and "retried" not in refused[0]
    assert rig.sim.exchange.requests[OCO_POSTS] == 1 and rig.lists_on_exchange() == []
    await rig.control("advance", {"seconds": 60})
    await rig.svc.reconcile()
    row = await rig.svc.lists.store.get(list_id)
    assert row is not None and row.bracket_state == "rejected" and rig.sim.exchange.requests[OCO_POSTS] == 1
