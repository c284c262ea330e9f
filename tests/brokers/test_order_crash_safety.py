"""kill -9 the daemon at 20 random moments between "order recorded" and "answer received".

The simulator runs in this test process and survives the kills; every order is answered
slowly (an order fault holds the answer back), so the kill lands while the daemon waits.  Every
other kill waits until the exchange has taken the order and then lands at a random moment of the
held-back answer (the case reconciliation must settle), whatever the machine's load; the others
land at a random moment of the first 0.4 s (recorded, or being sent, or taken).
After each restart reconciliation must know every order the simulator has; in the end no
clientOrderId was placed twice and the position equals the simulator's balance.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from decimal import Decimal
from functools import partial
from pathlib import Path

import pytest

from simulator import OrderFault, RunningSimulator, start_simulator
from testkit.daemon_proc import DaemonProc, create_token, mcp_client
from testkit.sim_daemon import sim_env, start_on_sim, tool_json
from testkit.workers import until

KILLS = 20
pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(360)]


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", symbols=["BTCUSDT"])
    try:
        yield running
    finally:
        await running.close()


def _env(sim: RunningSimulator) -> dict[str, str]:
    return sim_env(sim, broker="binance")


async def _start(sim: RunningSimulator, data_dir: Path) -> DaemonProc:
    return await start_on_sim(sim, data_dir, _env(sim))


_tool = tool_json


async def _taken(sim: RunningSimulator, before: int) -> bool:
    """The exchange has taken an order since it held ``before``."""
    return len(sim.exchange.account.orders) > before


async def test_kill_9_while_orders_are_in_flight_never_doubles_or_loses_one(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    """20 kills mid-order: reconciliation knows every exchange order; none was placed twice."""
    rng = random.Random(7)
    token = await create_token(tmp_path, "orders", "charts,alerts,trade")
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    seen_on_exchange: set[str] = set()
    for kill in range(KILLS):
        daemon = await _start(sim, tmp_path)
        async with mcp_client(daemon.mcp_url, token) as client:
            known = {o["id"] for o in await _tool(client, "get_orders")}
            assert seen_on_exchange <= known, "reconciliation missed an order the exchange has"
        sim.exchange.faults.order_faults.clear()
        sim.exchange.faults.order_faults.append(OrderFault(kind="timeout", count=1, delay_s=5.0))

        async def place(url: str) -> None:
            async with mcp_client(url, token, read_timeout_s=30) as client:
                await client.call_tool("place_order", {"symbol": "BTCUSDT", "side": "buy", "quantity": 0.001})

        taken_before = len(sim.exchange.account.orders)
        task = asyncio.create_task(place(daemon.mcp_url))
        if kill % 2 == 0:  # once the exchange holds the order and its answer (held back 5 s)
            await until(partial(_taken, sim, taken_before), 60)
            await asyncio.sleep(rng.uniform(0.0, 0.5))  # a random moment of the held answer, not synchronisation
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.4))  # a moment around "recorded" / "sent", not synchronisation
        await daemon.kill()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        seen_on_exchange |= {o.client_order_id for o in sim.exchange.account.orders.values()}

    daemon = await _start(sim, tmp_path)
    try:
        async with mcp_client(daemon.mcp_url, token) as client:
            orders = {o["id"]: o for o in await _tool(client, "get_orders")}
            positions = await _tool(client, "get_positions")
    finally:
        await daemon.stop()

    exchange_ids = [o.client_order_id for o in sim.exchange.account.orders.values()]
    assert len(exchange_ids) == len(set(exchange_ids)), "a clientOrderId was placed twice"
    assert set(exchange_ids) <= set(orders), "an exchange order is unknown to the daemon"
    for cid in exchange_ids:
        assert orders[cid]["state"] == "Filled"
    for cid, order in orders.items():
        if cid not in exchange_ids:
            assert order["state"] == "Rejected", order  # recorded, never reached the exchange
    btc = sim.exchange.account.free.get("BTC", Decimal(0))
    held = sum(Decimal(str(p["quantity"])) for p in positions if p["symbol"] == "BTCUSDT")
    assert held == pytest.approx(btc, abs=Decimal("1e-9"))
    assert len(exchange_ids) >= KILLS // 2, "every other kill lands after the exchange took the order"
