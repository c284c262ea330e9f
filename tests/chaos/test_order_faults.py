"""Exchange faults on orders, seen through the MCP tools of a real ``chartgen --serve --trade
--sim`` (Binance broker against the simulator, faults injected with its control API):

- a 5xx after the exchange accepted the order, and an answer that never comes (timeout): the
  tool answers, the order exists exactly once on the exchange and once in ``get_orders``;
- 429 on the order endpoint: a rate-limit error with ``retry_after``, nothing sent; the same
  call works once the ban is over;
- -1021 (our clock ahead of the exchange's by 10 s): the order still goes through;
- WS-API loss while resting orders fill: the fills are in ``get_orders`` after the reconnect;
- 418 (IP ban): refused at once with the ban's length, nothing sent during the ban.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(240)]


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    async with running_daemon(["--serve", "--trade", "--sim", "-s", "BTCUSDT", "-i", "1m"], data_dir=tmp_path) as proc:
        yield proc


async def tool(client: Client, name: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        return True, {"text": text, **(result.structured_content or {})}
    return False, json.loads(text)


class Sim:
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def fault(self, body: dict[str, Any]) -> None:
        async with self.http.post(f"{self.url}/sim/v1/faults", json=body) as r:
            assert r.status == 200, await r.text()

    async def price(self, price: float) -> None:
        async with self.http.post(f"{self.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": str(price)}) as r:
            assert r.status == 200, await r.text()

    async def state(self) -> dict[str, Any]:
        async with self.http.get(f"{self.url}/sim/v1/state") as r:
            state: dict[str, Any] = await r.json()
            return state

    async def orders_with(self, client_order_id: str) -> list[dict[str, Any]]:
        return [o for o in (await self.state())["orders"] if o["clientOrderId"] == client_order_id]


def buy(coid: str, **extra: Any) -> dict[str, Any]:
    return {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001, "client_order_id": coid, **extra}


async def ours(client: Client, coid: str) -> list[dict[str, Any]]:
    failed, orders = await tool(client, "get_orders", {"filter": "all"})
    assert not failed, orders
    return [o for o in orders if o["id"] == coid]  # our order id is the client order id


async def eventually(check: Any, timeout_s: float = 30.0) -> None:
    """Poll another process's state until ``check()`` holds (bounded by the timeout)."""
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110 - polling another process
            await asyncio.sleep(0.1)


async def test_order_faults_never_double_or_lose_an_order(daemon: DaemonProc) -> None:
    assert daemon.sim_url is not None and daemon.token is not None
    async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, daemon.token) as client:
        sim = Sim(http, daemon.sim_url)

        # 5xx after the exchange accepted the order: looked up by client order id, never resent
        await sim.fault({"order_fault": {"kind": "error_after_accept", "status": 503, "count": 1}})
        failed, answer = await tool(client, "place_order", buy("chaos-5xx"))
        assert not failed and answer["status"] == "Filled", answer  # resolved by the lookup
        assert len(await sim.orders_with("chaos-5xx")) == 1, answer

        async def recorded_once() -> bool:
            return len(await ours(client, "chaos-5xx")) == 1

        await eventually(recorded_once)

        # the answer never comes (the exchange holds it back past our timeout)
        await sim.fault({"order_fault": {"kind": "timeout", "delay_s": 30, "count": 1}})
        failed, answer = await tool(client, "place_order", buy("chaos-timeout"))
        assert len(await sim.orders_with("chaos-timeout")) == 1, answer

        async def timeout_recorded_once() -> bool:
            return len(await ours(client, "chaos-timeout")) == 1

        await eventually(timeout_recorded_once, 60)

        # 429 on the order endpoint: refused with retry_after, nothing sent; later it works
        await sim.fault({"http_error": {"status": 429, "retry_after": 1, "count": 1, "path": "/api/v3/order"}})
        failed, answer = await tool(client, "place_order", buy("chaos-429"))
        assert failed and answer["error"]["code"] == -32001, answer
        assert answer["error"]["data"]["retry_after_secs"] >= 1
        assert await sim.orders_with("chaos-429") == []

        attempts = iter(range(1000))

        async def accepted_after_the_ban() -> bool:
            # a client order id is used once, refused or not; each retry takes a new one
            failed, answer = await tool(client, "place_order", buy(f"chaos-429-retry-{next(attempts)}"))
            assert not failed or answer.get("error", {}).get("code") == -32001, answer
            return not failed

        await eventually(accepted_after_the_ban, 15)

        # -1021: our clock 10 s ahead of the exchange's; resynced and sent once
        await sim.fault({"clock_skew_ms": -10_000})
        failed, answer = await tool(client, "place_order", buy("chaos-1021"))
        assert not failed, answer
        assert len(await sim.orders_with("chaos-1021")) == 1
        await sim.fault({"clock_skew_ms": 0})

        # WS-API loss while resting orders fill
        await sim.price(65000.0)
        rest = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001, "price": 64000}
        ids = []
        for i in range(3):
            failed, answer = await tool(client, "place_order", {**rest, "client_order_id": f"chaos-ws-{i}"})
            assert not failed, answer
            ids.append(f"chaos-ws-{i}")
        await sim.fault({"drop_ws_api": True})
        await sim.price(63000.0)  # all three fill while the user-data stream is down

        async def all_filled() -> bool:
            states = [o["state"] for coid in ids for o in await ours(client, coid)]
            return states == ["Filled"] * 3

        await eventually(all_filled, 60)

        # 418: an IP ban; refused at once with its length, nothing reaches the exchange
        await sim.fault({"reset": True})
        await sim.fault({"http_error": {"status": 418, "retry_after": 120, "count": 1, "path": "/api/v3/order"}})
        failed, answer = await tool(client, "place_order", buy("chaos-418"))
        assert failed and answer["error"]["code"] == -32001, answer
        before = (await sim.state())["requests"]
        failed, answer = await tool(client, "place_order", buy("chaos-418-b"))
        assert failed and answer["error"]["data"]["retry_after_secs"] > 60, answer
        assert (await sim.state())["requests"] == before
        assert await sim.orders_with("chaos-418-b") == []

        # a ban covers every REST call of the IP, so a balance lookup is refused too, saying why …
        failed, answer = await tool(client, "get_balance")
        assert failed and answer["text"].startswith("balance lookup failed: Binance rate limit"), answer
        # … and what needs no exchange request keeps working
        failed, orders = await tool(client, "get_orders", {"filter": "all"})
        assert not failed and len(orders) >= 7, orders
        failed, answer = await tool(
            client, "get_indicators", {"symbol": "BTCUSDT", "interval": "1m", "indicators": ["rsi"]}
        )
        assert not failed, answer
