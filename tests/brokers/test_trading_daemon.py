"""Trading end to end with the paper, Binance and ccxt brokers (the last two against the simulator's matching engine).

`chartgen --serve --trade --sim --clock manual`, the official SDK client over HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon

pytestmark = pytest.mark.process

ENV = {
    "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
    "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000",
}
SLIPPAGE = {"paper": 1.0005, "binance": 1.0, "ccxt": 1.0}
# ccxt has no user stream: its fills are learnt by reconciliation, run often here
BROKER_ENV = {"ccxt": {"CHARTGEN_RECONCILE_INTERVAL_S": "0.5"}}


@pytest.fixture(params=["paper", "binance", "ccxt"])
def broker(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def daemon(tmp_path: Path, broker: str) -> AsyncIterator[DaemonProc]:
    proc = await start_daemon(
        ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"],
        data_dir=tmp_path,
        env={**ENV, "CHARTGEN_BROKER": broker, **BROKER_ENV.get(broker, {})},
    )
    try:
        await proc.wait_ready()
        yield proc
    finally:
        await proc.stop()


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _rules(http: aiohttp.ClientSession, sim: str) -> dict[str, Decimal]:
    async with http.get(f"{sim}/api/v3/exchangeInfo") as r:
        info = await r.json()
    entry = next(s for s in info["symbols"] if s["symbol"] == "BTCUSDT")
    filters = {f["filterType"]: f for f in entry["filters"]}
    return {"step": Decimal(filters["LOT_SIZE"]["stepSize"]), "tick": Decimal(filters["PRICE_FILTER"]["tickSize"])}


async def _price(http: aiohttp.ClientSession, sim: str, price: str) -> None:
    async with http.post(f"{sim}/sim/v1/price", json={"symbol": "BTCUSDT", "price": price}) as r:
        assert r.status == 200


async def test_orders_fill_rest_cancel_and_move_positions_and_balances(
    daemon: DaemonProc, tmp_path: Path, broker: str
) -> None:
    """Market buy fills; a limit rests, is cancelled; another fills on a cross; filters and balance refuse."""
    assert daemon.sim_url is not None and daemon.token is not None
    sim = daemon.sim_url
    async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, daemon.token) as client:
        rules = await _rules(http, sim)
        await _price(http, sim, "65000")
        placed = await call(
            client, "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01}
        )
        assert placed["status"] == "Filled" and placed["filled_quantity"] == 0.01
        assert placed["fill_price"] == pytest.approx(65000 * SLIPPAGE[broker], rel=1e-6)
        positions = await call(client, "get_positions")
        assert [p["symbol"] for p in positions] == ["BTCUSDT"]
        assert positions[0]["quantity"] == pytest.approx(0.01 * 0.999)
        assert positions[0]["side"] == "buy" and positions[0]["current_price"] == pytest.approx(65000, rel=1e-3)
        balances = {b["asset"]: b for b in (await call(client, "get_balance"))["balances"]}
        assert balances["BTC"]["free"] == pytest.approx(0.00999)
        assert balances["USDT"]["free"] == pytest.approx(10000 - 0.01 * placed["fill_price"], rel=1e-9)

        rest = await call(
            client,
            "place_order",
            {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000},
        )
        assert rest["status"] == "Open"
        assert [o["id"] for o in await call(client, "get_orders", {"filter": "open"})] == [rest["order_id"]]
        locked = {b["asset"]: b for b in (await call(client, "get_balance"))["balances"]}["USDT"]["locked"]
        assert locked == pytest.approx(600.0)
        assert await call(client, "cancel_order", {"order_id": rest["order_id"]}) == {"ok": True}
        orders = {o["id"]: o for o in await call(client, "get_orders")}
        assert orders[rest["order_id"]]["state"] == "Cancelled" and orders[placed["order_id"]]["state"] == "Filled"
        again = await client.call_tool("cancel_order", {"order_id": rest["order_id"]})
        assert again.is_error and "invalid transition: Cancelled \u2192 Cancelled" in again.content[0].text

        crossing = await call(
            client,
            "place_order",
            {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 64000},
        )
        assert crossing["status"] == "Open"
        await _price(http, sim, "63900")
        async with asyncio.timeout(30):
            while True:
                state = {o["id"]: o for o in await call(client, "get_orders")}[crossing["order_id"]]
                if state["state"] == "Filled":
                    break
                await asyncio.sleep(0.05)  # the trade travels sim → engine → paper broker; bounded above
        assert state["fill_price"] == 64000.0

        off_step = rules["step"] * Decimal("1.5") + Decimal("0.01")
        bad = await client.call_tool(
            "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": float(off_step)}
        )
        assert bad.is_error and "LOT_SIZE step" in bad.content[0].text and "nearest valid" in bad.content[0].text

        broke = await client.call_tool(
            "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 1}
        )
        assert broke.is_error and "insufficient" in broke.content[0].text.lower()
        assert broke.structured_content["error"]["code"] == -32004

        unknown = await client.call_tool("place_order", {"symbol": "NOPEUSDT", "side": "buy", "quantity": 1})
        assert unknown.is_error and unknown.structured_content["error"]["code"] == -32003

        if broker in ("binance", "ccxt"):  # the orders really reached the exchange, once each, in the states we report
            async with http.get(f"{sim}/sim/v1/state") as r:
                state = await r.json()
            on_exchange = {o["clientOrderId"]: o["status"] for o in state["orders"]}
            ids = [placed["order_id"], rest["order_id"], crossing["order_id"]]
            assert on_exchange == dict(zip(ids, ["FILLED", "CANCELED", "FILLED"], strict=True))
            ours = {b["asset"]: b for b in (await call(client, "get_balance"))["balances"]}
            assert ours["BTC"]["free"] == float(state["balances"]["BTC"]["free"])

    log = (tmp_path / "trades.log").read_text()
    assert f"SUBMITTED BUY BTCUSDT 0.01 MARKET id={placed['order_id']}" in log
    assert "FILLED BUY BTCUSDT 0.01 @ " in log and f"id={placed['order_id']}" in log
    assert f"CANCELLED id={rest['order_id']}" in log


async def test_prompts_render_live_quotes_and_the_brokers_balances(daemon: DaemonProc, broker: str) -> None:
    """prompts/get over HTTP with the SDK client: the simulator's ticker, the broker's balances, -32003."""
    from mcp.shared.exceptions import MCPError

    assert daemon.token is not None
    async with mcp_client(daemon.mcp_url, daemon.token) as client:
        names = [p.name for p in (await client.list_prompts()).prompts]
        assert names == ["trading_analysis", "portfolio_risk"]
        analysis = await client.get_prompt("trading_analysis", {"symbol": "BTCUSDT", "risk_tolerance": "low"})
        assert "# Market Analysis: BTCUSDT" in analysis.messages[0].content.text
        risk = await client.get_prompt("portfolio_risk", {})
        assert "| USDT | 10,000.0000 | 0.0000 | 10,000.0000 | $10,000.00 |" in risk.messages[0].content.text
        with pytest.raises(MCPError) as info:
            await client.get_prompt("trading_analysis", {"symbol": "NOPEUSDT"})
        assert info.value.code == -32003
