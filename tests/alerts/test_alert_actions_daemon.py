"""Alerts that place orders, through the daemon (``--serve --trade``) and the simulator's real Binance API.

The simulator runs in this test process and survives the daemon's kills; the daemon is a
subprocess using the Binance broker against it.  What the simulator received is read from
its own account (every order it accepted, by client order id).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from alerts.actions import ACTION_PREFIX, action_client_id
from simulator import RunningSimulator, start_simulator
from testkit.daemon_proc import DaemonProc, create_token, mcp_client
from testkit.sim_daemon import post_price, sim_env, start_on_sim, tool_json

pytestmark = [pytest.mark.slow, pytest.mark.process]

BASE = 70_000.0
STEP = 10.0
TRADE_SCOPES = "charts,alerts,trade"


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", symbols=["BTCUSDT"])
    try:
        yield running
    finally:
        await running.close()


def _env(sim: RunningSimulator, **extra: str) -> dict[str, str]:
    limits = {"CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "100000", "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "1000000"}
    return sim_env(sim, broker="binance", **(limits | extra))


async def _start(sim: RunningSimulator, data_dir: Path, **extra: str) -> DaemonProc:
    return await start_on_sim(sim, data_dir, _env(sim, **extra))


_price = post_price
_tool = tool_json


def _sim_orders(sim: RunningSimulator) -> Counter[str]:
    """How many orders the simulator accepted per client order id (alert actions only)."""
    return Counter(
        o.client_order_id for o in sim.exchange.account.orders.values() if o.client_order_id.startswith(ACTION_PREFIX)
    )


def _buy(quantity: str = "0.001") -> dict[str, Any]:
    return {"place_order": {"side": "buy", "type": "market", "quantity": quantity}}


async def _wait_actions_done(data_dir: Path, count: int, timeout_s: float = 60.0) -> None:
    """Until ``count`` alert actions have a final outcome in the daemon's database."""
    async with asyncio.timeout(timeout_s):
        while True:
            with sqlite3.connect(data_dir / "chartgen.db") as db:
                row = db.execute("SELECT COUNT(*) FROM alert_actions WHERE state = 'done'").fetchone()
            if row[0] >= count:
                return
            await asyncio.sleep(0.05)  # waiting for another process, bounded by the timeout


async def test_price_alert_with_market_buy_places_exactly_one_order(sim: RunningSimulator, tmp_path: Path) -> None:
    token = await create_token(tmp_path, "actions", TRADE_SCOPES)
    async with aiohttp.ClientSession() as http:
        await _price(http, sim, BASE)
        daemon = await _start(sim, tmp_path)
        try:
            async with mcp_client(daemon.mcp_url, token) as client:
                out = await _tool(
                    client,
                    "set_alert",
                    {"symbol": "BTCUSDT", "condition": {"price_above": BASE + STEP}, "action": _buy()},
                )
                alert_id = out["alert_id"]
                assert out["action"]["place_order"]["quantity"] == "0.001"
                listed = await _tool(client, "list_alerts")
                assert listed[0]["action"]["place_order"]["side"] == "buy"
                for k in range(1, 4):  # crossing, then more trades beyond the level
                    await _price(http, sim, BASE + STEP * (k + 0.5))
                await _wait_actions_done(tmp_path, 1)
                notes = await _tool(client, "get_notifications")
        finally:
            await daemon.stop()
    cid = action_client_id(alert_id)
    assert _sim_orders(sim) == Counter({cid: 1})
    (note,) = notes
    assert note["alert_id"] == alert_id
    assert note["action"]["order_id"] == cid
    assert note["action"]["status"] == "Filled"
    assert note["action"]["fill_price"] is not None
    log = (tmp_path / "trades.log").read_text()
    assert f"ALERT_ACTION id={alert_id} order={cid} status=Filled" in log
    assert f"SUBMITTED BUY BTCUSDT 0.001 MARKET id={cid}" in log


async def test_set_alert_action_is_checked_when_set(sim: RunningSimulator, tmp_path: Path) -> None:
    trader = await create_token(tmp_path, "trader", TRADE_SCOPES)
    watcher = await create_token(tmp_path, "watcher")
    async with aiohttp.ClientSession() as http:
        await _price(http, sim, BASE)
        daemon = await _start(sim, tmp_path, CHARTGEN_TRADING_MAX_ORDER_NOTIONAL="1000")
        try:
            async with mcp_client(daemon.mcp_url, watcher) as client:
                result = await client.call_tool(
                    "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": BASE + STEP}, "action": _buy()}
                )
                assert result.is_error and "'trade' scope" in result.content[0].text
            async with mcp_client(daemon.mcp_url, trader) as client:
                cases = {
                    "quantity": {"place_order": {"side": "buy", "type": "market", "quantity": -1}},
                    "side": {"place_order": {"side": "hold", "type": "market", "quantity": 0.001}},
                    "per-order limit": _buy("1"),
                    "place_order": {"sell": {}},
                    "client_order_id": {"place_order": {"side": "buy", "quantity": 0.001, "client_order_id": "x"}},
                }
                for needle, action in cases.items():
                    result = await client.call_tool(
                        "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": BASE + STEP}, "action": action}
                    )
                    assert result.is_error, needle
                    assert needle in result.content[0].text, result.content[0].text
                # A balance that is short now is a warning, not a refusal.
                out = await _tool(
                    client,
                    "set_alert",
                    {
                        "symbol": "BTCUSDT",
                        "condition": {"price_below": BASE - STEP},
                        "action": {"place_order": {"side": "sell", "type": "market", "quantity": "0.01"}},
                    },
                )
                assert "balance short" in out["warnings"][0]
                assert [a["id"] for a in await _tool(client, "list_alerts")] == [out["alert_id"]]
        finally:
            await daemon.stop()
    assert _sim_orders(sim) == Counter()


async def test_refusal_at_fire_time_is_reported_not_retried(sim: RunningSimulator, tmp_path: Path) -> None:
    """The daily limit leaves room for one action: the second alert fires with the refusal, no order."""
    token = await create_token(tmp_path, "actions", TRADE_SCOPES)
    async with aiohttp.ClientSession() as http:
        await _price(http, sim, BASE)
        daemon = await _start(sim, tmp_path, CHARTGEN_TRADING_MAX_DAILY_NOTIONAL="100")
        try:
            async with mcp_client(daemon.mcp_url, token) as client:
                first = await _tool(
                    client,
                    "set_alert",
                    {"symbol": "BTCUSDT", "condition": {"price_above": BASE + STEP}, "action": _buy()},
                )
                second = await _tool(
                    client,
                    "set_alert",
                    {"symbol": "BTCUSDT", "condition": {"price_above": BASE + 3 * STEP}, "action": _buy()},
                )
                await _price(http, sim, BASE + 2 * STEP)
                await _wait_actions_done(tmp_path, 1)
                await _price(http, sim, BASE + 4 * STEP)
                await _wait_actions_done(tmp_path, 2)
                notes = {n["alert_id"]: n for n in await _tool(client, "get_notifications")}
        finally:
            await daemon.stop()
    assert notes[first["alert_id"]]["action"]["status"] == "Filled"
    refused = notes[second["alert_id"]]["action"]
    assert refused["status"] == "Refused" and "daily limit" in refused["reason"]
    assert _sim_orders(sim) == Counter({action_client_id(first["alert_id"]): 1})
    assert f"ALERT_ACTION_REFUSED id={second['alert_id']}" in (tmp_path / "trades.log").read_text()


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_kill_9_while_action_alerts_fire_gives_exactly_one_order_each(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    """20 kill -9s while 50 action alerts fire: each fired alert has exactly one order on the exchange."""
    alerts, kills = 50, 20
    rng = random.Random(20261124)
    token = await create_token(tmp_path, "crash-actions", TRADE_SCOPES)
    levels = [BASE + STEP * (i + 1) for i in range(alerts)]
    async with aiohttp.ClientSession() as http:
        await _price(http, sim, BASE)
        daemon = await _start(sim, tmp_path)
        async with mcp_client(daemon.mcp_url, token) as client:
            for level in levels:
                await _tool(
                    client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": level}, "action": _buy()}
                )
        price = BASE
        for _ in range(kills):
            steps = rng.randint(2, 5)
            kill_after = rng.randint(0, steps - 1)
            for i in range(steps):
                price = min(price + STEP, levels[-1] + STEP)
                await _price(http, sim, price)
                if i == kill_after:
                    await asyncio.sleep(rng.random() * 0.03)  # a random moment, not synchronisation
                    await daemon.kill()
            daemon = await _start(sim, tmp_path)
        price = levels[-1] + STEP
        await _price(http, sim, price)
        try:
            async with mcp_client(daemon.mcp_url, token) as client:
                async with asyncio.timeout(60):
                    while await _tool(client, "list_alerts"):
                        await _price(http, sim, price)
                        await asyncio.sleep(0.05)  # waiting for another process, bounded by the timeout
                await _wait_actions_done(tmp_path, alerts)
                notes = await _tool(client, "get_notifications")
                positions = {p["symbol"]: p for p in await _tool(client, "get_positions")}
        finally:
            await daemon.stop()

    with sqlite3.connect(tmp_path / "chartgen.db") as db:
        fired = [r[0] for r in db.execute("SELECT alert_id FROM alert_events WHERE outcome = 'fired'")]
        assert db.execute("SELECT COUNT(*) FROM alerts").fetchone() == (0,)
    assert len(fired) == alerts == len(set(fired))
    on_exchange = _sim_orders(sim)
    assert on_exchange == Counter({action_client_id(a): 1 for a in fired}), "an alert with no order or two orders"
    assert {n["alert_id"] for n in notes} == set(fired)
    assert all(n["action"]["status"] == "Filled" for n in notes), [n["action"] for n in notes]
    balances = {b["asset"]: b for b in sim.exchange.account.balances_view()}
    btc = Decimal(balances["BTC"]["free"]) + Decimal(balances["BTC"]["locked"])
    assert Decimal(str(positions["BTCUSDT"]["quantity"])) == btc
