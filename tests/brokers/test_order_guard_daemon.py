"""Order ownership and the guard rails through a real ``chartgen --serve --trade --sim`` (Binance broker
against the simulator), over HTTP with the official SDK client and one bearer token per principal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, create_token, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(240)]

ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
ENV = {
    "CHARTGEN_BROKER": "binance",
    "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000",
    "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "1000",
}
TRADE = "charts,alerts,trade"


async def tool(client: Client, name: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        return True, {"text": text, **(result.structured_content or {})}
    return False, json.loads(text)


async def ok(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    failed, answer = await tool(client, name, args)
    assert not failed, answer
    return answer


class Sim:
    """The simulator's control API (prices, faults, state), as another process sees it."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def post(self, path: str, body: dict[str, Any]) -> None:
        async with self.http.post(f"{self.url}{path}", json=body) as r:
            assert r.status == 200, await r.text()

    async def state(self) -> dict[str, Any]:
        async with self.http.get(f"{self.url}/sim/v1/state") as r:
            state: dict[str, Any] = await r.json()
            return state

    async def requests(self, what: str) -> int:
        return int((await self.state())["requests"].get(what, 0))


async def test_a_token_sees_and_cancels_only_its_own_orders_and_an_admin_token_all(tmp_path: Path) -> None:
    """B cannot list A's order, and cancelling it answers exactly like an unknown id; admin sees and cancels both."""
    token_a = await create_token(tmp_path, "a", TRADE)
    token_b = await create_token(tmp_path, "b", TRADE)
    token_admin = await create_token(tmp_path, "root", "admin")
    async with (
        running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon,
        aiohttp.ClientSession() as http,
        mcp_client(daemon.mcp_url, token_a) as a,
        mcp_client(daemon.mcp_url, token_b) as b,
        mcp_client(daemon.mcp_url, token_admin) as admin,
    ):
        assert daemon.sim_url is not None
        sim = Sim(http, daemon.sim_url)
        await sim.post("/sim/v1/price", {"symbol": "BTCUSDT", "price": "65000"})
        rest = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001}
        a_id = (await ok(a, "place_order", {**rest, "price": 60000, "client_order_id": "order-of-a"}))["order_id"]
        b_id = (await ok(b, "place_order", {**rest, "price": 59000, "client_order_id": "order-of-b"}))["order_id"]

        assert [o["id"] for o in await ok(a, "get_orders", {"filter": "all"})] == [a_id]
        assert [o["id"] for o in await ok(b, "get_orders", {"filter": "open"})] == [b_id]

        failed, theirs = await tool(b, "cancel_order", {"order_id": a_id})
        failed_unknown, unknown = await tool(b, "cancel_order", {"order_id": "order-of-x"})
        assert failed and failed_unknown
        assert theirs["text"] == "order not found: order-of-a" and unknown["text"] == "order not found: order-of-x"
        assert {k: v for k, v in theirs.items() if k != "text"} == {k: v for k, v in unknown.items() if k != "text"}
        on_exchange = {o["clientOrderId"]: o["status"] for o in (await sim.state())["orders"]}
        assert on_exchange == {a_id: "NEW", b_id: "NEW"}

        assert {o["id"] for o in await ok(admin, "get_orders", {"filter": "open"})} == {a_id, b_id}
        assert await ok(admin, "cancel_order", {"order_id": a_id}) == {"ok": True}
        assert await ok(admin, "cancel_order", {"order_id": b_id}) == {"ok": True}
        assert [o["state"] for o in await ok(a, "get_orders")] == ["Cancelled"]
        on_exchange = {o["clientOrderId"]: o["status"] for o in (await sim.state())["orders"]}
        assert on_exchange == {a_id: "CANCELED", b_id: "CANCELED"}


async def _engine_has_price(daemon: DaemonProc, http: aiohttp.ClientSession, symbol: str) -> None:
    """Wait until the daemon's engine has seen a trade of ``symbol`` (its /metrics lag gauge appears)."""
    needle = f'chartgen_stream_lag_seconds{{symbol="{symbol}"}}'
    async with asyncio.timeout(30):
        while True:
            async with http.get(f"{daemon.base}/metrics") as r:
                if r.status == 200 and needle in await r.text():
                    return
            await asyncio.sleep(0.05)  # polling another process, bounded by the timeout


async def test_guard_rails_fail_closed_through_the_daemon(tmp_path: Path) -> None:
    """No price → refused and nothing sent; six concurrent orders against a daily limit one fits under → one
    accepted; with the engine following the symbol no order asks the ticker."""
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        assert daemon.sim_url is not None and daemon.token is not None
        sim = Sim(http, daemon.sim_url)
        await sim.post("/sim/v1/price", {"symbol": "BTCUSDT", "price": "65000"})
        await _engine_has_price(daemon, http, "BTCUSDT")
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            # ETHUSDT is not followed by the engine and its ticker fails (503): a market order over the
            # per-order limit (1 ETH ≈ 3200 > 1000) is refused — it cannot be valued — and nothing is sent
            fault = {"http_error": {"status": 503, "count": 5, "path": "/api/v3/ticker/price"}}
            await sim.post("/sim/v1/faults", fault)
            failed, answer = await tool(
                client, "place_order", {"symbol": "ETHUSDT", "side": "buy", "type": "market", "quantity": 1}
            )
            assert failed and answer["text"].startswith("order refused: no price for ETHUSDT"), answer
            assert "ticker request failed" in answer["text"] and "retry when market data is back" in answer["text"]
            assert await sim.requests("POST /api/v3/order") == 0
            await sim.post("/sim/v1/faults", {"reset": True})

            # six at once, 0.013 BTC (845 USDT) each, against a daily limit of 1000: exactly one goes out
            tickers = await sim.requests("GET /api/v3/ticker/price")
            order = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.013}
            answers = await asyncio.gather(
                *(tool(client, "place_order", {**order, "client_order_id": f"race-{i}"}) for i in range(6))
            )
            accepted = [a for failed, a in answers if not failed]
            refused = [a["text"] for failed, a in answers if failed]
            assert len(accepted) == 1 and accepted[0]["status"] == "Filled", answers
            assert len(refused) == 5 and all("over the daily limit 1000" in t for t in refused), refused
            # exactly one reached the book (its POST may have been preceded by one the simulator refused
            # for its timestamp, -1021, which the broker re-signs after a resync: the manual clock stands
            # still while a loaded machine's clock runs on)
            race = [o for o in (await sim.state())["orders"] if o["clientOrderId"].startswith("race-")]
            assert len(race) == 1 and race[0]["status"] == "FILLED", race
            # every one of them was priced by the engine: not one ticker request
            assert await sim.requests("GET /api/v3/ticker/price") == tickers
