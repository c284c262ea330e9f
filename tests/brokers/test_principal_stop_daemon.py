"""Revoking and suspending one principal end to end (issue 36, point 2): ``chartgen --serve --trade --sim``
driven with the official MCP SDK client, ``chartgen token revoke`` / ``chartgen trading suspend`` run as
their own processes while the daemon runs, and the simulator's own order book as the judge.

- Revoking a token cancels its schedules and removes its alerts' actions in the revoking transaction
  and prints what it stopped; ``--cancel-open`` cancels its open orders but keeps the exit OCO that
  protects a filled bracket entry; afterwards no order of that principal reaches the exchange by any
  path (its schedule's next times pass, its alert fires as a plain alert), while another principal's
  schedule and action alert keep placing orders.
- Suspending refuses the principal's tool orders, schedule runs and alert actions with "suspended by
  the operator", and the creation of schedules and action alerts, while its alerts and notifications
  keep working and others keep trading; unsuspending restores it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from mcp import Client

from alerts import action_client_id
from brokers.suspensions import SUSPENDED_MESSAGE
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import Database
from testkit.daemon_proc import DaemonProc, clean_env, create_token, mcp_client, running_daemon

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
ENV = {
    "CHARTGEN_BROKER": "binance",
    "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
    "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000",
}
BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.0002}
TRADER = "charts,alerts,trade"


async def cli(data: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", *args, "--data-dir", str(data),
        env=clean_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text  # type: ignore[union-attr]
    return (True, text) if result.is_error else (False, json.loads(text))


async def ok(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    failed, answer = await call(client, name, args)
    assert not failed, answer
    return answer


async def refused(client: Client, name: str, args: dict[str, Any]) -> str:
    failed, answer = await call(client, name, args)
    assert failed, answer
    return str(answer)


async def price(http: aiohttp.ClientSession, daemon: DaemonProc, value: float) -> None:
    async with http.post(f"{daemon.sim_url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": f"{value:.2f}"}) as r:
        assert r.status == 200, await r.text()


async def sim_get(http: aiohttp.ClientSession, daemon: DaemonProc, path: str, **params: str) -> Any:
    """A signed GET on the simulator's own REST API: the exchange's view of the account."""
    async with http.get(f"{daemon.sim_url}/api/v3/time") as r:
        now = (await r.json())["serverTime"]
    query = urlencode({**params, "timestamp": now})
    sig = hmac.new(DEFAULT_API_SECRET.encode(), query.encode(), hashlib.sha256).hexdigest()
    url = f"{daemon.sim_url}{path}?{query}&signature={sig}"
    async with http.get(url, headers={"X-MBX-APIKEY": DEFAULT_API_KEY}) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def exchange_ids(http: aiohttp.ClientSession, daemon: DaemonProc) -> set[str]:
    """Client ids of every order the exchange ever received for BTCUSDT."""
    return {o["clientOrderId"] for o in await sim_get(http, daemon, "/api/v3/allOrders", symbol="BTCUSDT")}


async def open_ids(http: aiohttp.ClientSession, daemon: DaemonProc) -> set[str]:
    return {o["clientOrderId"] for o in await sim_get(http, daemon, "/api/v3/openOrders")}


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def log_until(path: Path, needle: str, count: int = 1) -> str:
    """trades.log once it holds ``needle`` ``count`` times (another process writes it; bounded wait)."""
    async with asyncio.timeout(30):
        while True:
            text = await asyncio.to_thread(_read, path)
            if text.count(needle) >= count:
                return text
            await asyncio.sleep(0.05)  # polling another process's log, bounded by the timeout


async def fired(data: Path, alert_id: str) -> None:
    """Until the daemon recorded ``alert_id``'s firing (its database, read-only here; bounded wait)."""
    db = await Database.open(data / "chartgen.db")
    try:
        async with asyncio.timeout(30):
            while True:
                if await db.fetchone("SELECT 1 FROM alert_events WHERE alert_id = ?", (alert_id,)) is not None:
                    return
                await asyncio.sleep(0.05)  # polling another process's commit, bounded by the timeout
    finally:
        await db.close()


async def unauthorized(http: aiohttp.ClientSession, daemon: DaemonProc, token: str) -> bool:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
        return r.status == 401


async def test_revoke_stops_the_principals_schedules_actions_and_open_orders(tmp_path: Path) -> None:
    log = tmp_path / "trades.log"
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        await price(http, daemon, 65000)
        bot_token, other_token = (
            await create_token(tmp_path, "bot", TRADER),
            await create_token(tmp_path, "other", TRADER),
        )
        async with mcp_client(daemon.mcp_url, bot_token) as bot, mcp_client(daemon.mcp_url, other_token) as other:
            # the bot: a filled entry with its protective exit, an open order, a schedule, an action alert
            entry = await ok(
                bot, "place_order", {**BUY, "quantity": 0.002, "bracket": {"take_profit": 70000, "stop_loss": 60000}}
            )
            async with asyncio.timeout(30):
                while True:
                    rows = {o["id"]: o for o in await ok(bot, "get_orders", {"filter": "all"})}
                    if rows[entry["order_id"]].get("bracket", {}).get("state") == "placed":
                        break
                    await asyncio.sleep(0.05)  # the daemon places the exit after the fill; bounded
            exit_legs = {
                o["id"] for o in rows.values() if o.get("list_id") == rows[entry["order_id"]]["bracket"]["list_id"]
            }
            resting = await ok(bot, "place_order", {**BUY, "type": "limit", "price": 60000})
            bot_sid = (await ok(bot, "schedule_order", {**BUY, "every": "1s"}))["schedule_id"]
            bot_alert = await ok(
                bot,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65100}, "action": {"place_order": BUY}},
            )
            other_sid = (await ok(other, "schedule_order", {**BUY, "every": "1s"}))["schedule_id"]
            other_alert = await ok(
                other,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65100}, "action": {"place_order": BUY}},
            )
            await log_until(log, f"SCHEDULE-RUN id={bot_sid}")  # the bot's schedule was placing orders

            code, out, err = await cli(tmp_path, "token", "revoke", "bot", "--cancel-open")
            assert code == 0, out + err
            assert "revoked tok_" in out and f"1 schedule(s) cancelled ({bot_sid})" in out, out
            assert "1 alert action(s) removed" in out and bot_alert["alert_id"] in out, out
            assert "1 orders, 0 lists cancelled, 2 protective exit legs kept" in out, out
            before = await exchange_ids(http, daemon)

            # every path of the revoked principal: its tool calls are refused at the door ...
            assert await unauthorized(http, daemon, bot_token)
            # ... its schedule's next due times pass (the other schedule, on the same 1 s cadence, runs
            # twice more) and its alert fires as a plain alert, while the other's action places its order
            runs = _read(log).count(f"SCHEDULE-RUN id={other_sid}")
            await price(http, daemon, 65200)
            await log_until(log, f"ALERT_ACTION id={other_alert['alert_id']}")
            await fired(tmp_path, bot_alert["alert_id"])
            text = await log_until(log, f"SCHEDULE-RUN id={other_sid}", runs + 2)
            after = await exchange_ids(http, daemon)
            new = after - before
            assert not any(cid.startswith(f"cg-{bot_sid}-") for cid in new), new
            assert action_client_id(bot_alert["alert_id"]) not in after
            assert f"ALERT_ACTION id={bot_alert['alert_id']}" not in text
            assert action_client_id(other_alert["alert_id"]) in new  # others keep trading
            assert any(cid.startswith(f"cg-{other_sid}-") for cid in new)
            # --cancel-open cancelled the resting order and kept the exit protecting the filled entry
            still_open = await open_ids(http, daemon)
            assert resting["order_id"] not in still_open and exit_legs <= still_open
            await ok(other, "cancel_schedule", {"schedule_id": other_sid})


async def test_suspend_refuses_every_path_of_one_principal_until_unsuspended(tmp_path: Path) -> None:
    log = tmp_path / "trades.log"
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        await price(http, daemon, 65000)
        bot_token, other_token = (
            await create_token(tmp_path, "bot", TRADER),
            await create_token(tmp_path, "other", TRADER),
        )
        async with mcp_client(daemon.mcp_url, bot_token) as bot, mcp_client(daemon.mcp_url, other_token) as other:
            bot_sid = (await ok(bot, "schedule_order", {**BUY, "every": "1s"}))["schedule_id"]
            bot_alert = await ok(
                bot,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65100}, "action": {"place_order": BUY}},
            )
            other_alert = await ok(
                other,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65100}, "action": {"place_order": BUY}},
            )
            code, out, err = await cli(tmp_path, "trading", "suspend", "bot", "--reason", "probe")
            assert code == 0 and "suspended trading of tok_" in out, out + err

            assert SUSPENDED_MESSAGE in await refused(bot, "place_order", BUY)
            oco = {
                "symbol": "BTCUSDT",
                "side": "sell",
                "quantity": 0.0002,
                "take_profit_price": 70000,
                "stop_price": 60000,
            }
            assert SUSPENDED_MESSAGE in await refused(bot, "place_oco", oco)
            bracket = {**BUY, "bracket": {"take_profit": 70000, "stop_loss": 60000}}
            assert SUSPENDED_MESSAGE in await refused(bot, "place_order", bracket)
            assert (await ok(other, "place_order", BUY))["status"] == "Filled"  # others keep trading
            # regression: a suspended principal could still create schedules and action alerts
            assert SUSPENDED_MESSAGE in await refused(bot, "schedule_order", {**BUY, "every": "1h"})
            action_alert = {"symbol": "BTCUSDT", "condition": {"price_above": 99000}, "action": {"place_order": BUY}}
            assert SUSPENDED_MESSAGE in await refused(bot, "set_alert", action_alert)
            assert "schedule_order refused" in await refused(bot, "schedule_order", {**BUY, "every": "1h"})

            text = await log_until(log, f"SCHEDULE-REFUSED id={bot_sid}")
            assert SUSPENDED_MESSAGE in text.split(f"SCHEDULE-REFUSED id={bot_sid}", 1)[1].splitlines()[0]
            await price(http, daemon, 65200)
            text = await log_until(log, f"ALERT_ACTION id={other_alert['alert_id']}")
            text = await log_until(log, f"ALERT_ACTION_REFUSED id={bot_alert['alert_id']}")
            assert (
                SUSPENDED_MESSAGE
                in text.split(f"ALERT_ACTION_REFUSED id={bot_alert['alert_id']}", 1)[1].splitlines()[0]
            )
            # its alerts and notifications keep working
            (note,) = await ok(bot, "get_notifications")
            assert note["action"]["status"] == "Refused" and SUSPENDED_MESSAGE in note["action"]["reason"]
            await ok(bot, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 90000}})  # no action: fine
            assert len(await ok(bot, "list_schedules")) == 1  # only the one made before the suspension

            code, out, err = await cli(tmp_path, "trading", "unsuspend", "bot")
            assert code == 0 and "may trade again" in out, out + err
            assert (await ok(bot, "place_order", BUY))["status"] == "Filled"
            await log_until(log, f"SCHEDULE-RUN id={bot_sid}")
            await ok(bot, "cancel_schedule", {"schedule_id": bot_sid})
        lines = _read(log)
        assert "SUSPEND tok_" in lines and "UNSUSPEND tok_" in lines
