"""Unattended trading end to end: ``chartgen --serve --trade --sim`` (Binance broker against the simulator)
driven over MCP with the official SDK client, prices moved by simulator trades (``/sim/v1/price``).

Protective orders (stop-loss, stop refused as immediate, trailing stop, OCO, brackets by the
daemon and by OTOCO) and the halt switch refusing all three unattended paths — a place_order,
a firing action alert and a due schedule — until ``chartgen trading resume``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, clean_env, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(300)]

ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
ENV = {
    "CHARTGEN_BROKER": "binance",
    "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
    "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000",
    "CHARTGEN_RECONCILE_INTERVAL_S": "1",
}
HALTED = "trading is halted by the operator"


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text  # type: ignore[union-attr]
    return (True, text) if result.is_error else (False, json.loads(text))


async def ok(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    failed, answer = await call(client, name, args)
    assert not failed, answer
    return answer


async def price(http: aiohttp.ClientSession, daemon: DaemonProc, value: float) -> None:
    async with http.post(f"{daemon.sim_url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": f"{value:.2f}"}) as r:
        assert r.status == 200, await r.text()


async def orders_until(client: Client, done: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
    """get_orders (by id) until ``done`` holds — the daemon is another process; bounded wait."""
    async with asyncio.timeout(30):
        while True:
            by_id = {o["id"]: o for o in await ok(client, "get_orders", {"filter": "all"})}
            if done(by_id):
                return by_id
            await asyncio.sleep(0.05)  # polling another process, bounded by the timeout


async def test_protective_orders_through_the_daemon(tmp_path: Path) -> None:
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        assert daemon.token is not None
        await price(http, daemon, 65000)
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            await ok(client, "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.02})

            # A stop-loss sell waits (untriggered), then a trade at the stop triggers it and it fills.
            stop = await ok(
                client,
                "place_order",
                {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "quantity": 0.002, "stop_price": 64000},
            )
            listed = {o["id"]: o for o in await ok(client, "get_orders", {"filter": "open"})}
            assert listed[stop["order_id"]]["triggered"] is False and listed[stop["order_id"]]["state"] == "Open"
            await price(http, daemon, 63990)
            by_id = await orders_until(client, lambda o: o[stop["order_id"]]["state"] == "Filled")
            assert by_id[stop["order_id"]]["triggered"] is True

            # A stop the last price has already passed is refused with Binance's error; nothing rests.
            failed, text = await call(
                client,
                "place_order",
                {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "quantity": 0.002, "stop_price": 64500},
            )
            assert failed and "would trigger immediately" in text, text

            # A trailing stop (1 %) follows the price up and triggers on a 1 % reversal from the top.
            await price(http, daemon, 65000)
            trail = await ok(
                client,
                "place_order",
                {"symbol": "BTCUSDT", "side": "sell", "type": "stop_loss", "quantity": 0.002, "trailing_delta": 100},
            )
            for p in (66000, 67000, 66400):  # 66400 is 0.9 % under the 67000 top: still waiting
                await price(http, daemon, p)
            listed = {o["id"]: o for o in await ok(client, "get_orders", {"filter": "open"})}
            assert listed[trail["order_id"]]["triggered"] is False
            await price(http, daemon, 66320)  # 1.01 % under the top
            by_id = await orders_until(client, lambda o: o[trail["order_id"]]["state"] == "Filled")
            assert 66000 < by_id[trail["order_id"]]["fill_price"] <= 66330

            # An OCO: the stop leg fills, the take-profit leg is cancelled; both listed with the list.
            await price(http, daemon, 65000)
            placed = await ok(
                client,
                "place_oco",
                {
                    "symbol": "BTCUSDT",
                    "side": "sell",
                    "quantity": 0.002,
                    "take_profit_price": 68000,
                    "stop_price": 64000,
                },
            )
            legs = {leg["leg"]: leg["order_id"] for leg in placed["legs"]}
            await price(http, daemon, 63900)
            by_id = await orders_until(
                client,
                lambda o: o[legs["stop"]]["state"] == "Filled" and o[legs["take_profit"]]["state"] == "Cancelled",
            )
            assert {by_id[legs[k]]["list_id"] for k in ("stop", "take_profit")} == {placed["list_id"]}
            assert by_id[legs["stop"]]["list_kind"] == "OCO"

            # A market entry with a bracket: it fills, and the daemon places its OCO exit once.
            await price(http, daemon, 65000)
            entry = await ok(
                client,
                "place_order",
                {
                    "symbol": "BTCUSDT",
                    "side": "buy",
                    "type": "market",
                    "quantity": 0.002,
                    "bracket": {"take_profit": 70000, "stop_loss": 60000},
                },
            )
            by_id = await orders_until(
                client, lambda o: o[entry["order_id"]].get("bracket", {}).get("state") == "placed"
            )
            exit_list = by_id[entry["order_id"]]["bracket"]["list_id"]
            exits = [o for o in by_id.values() if o.get("list_id") == exit_list]
            assert sorted(o["leg"] for o in exits) == ["stop", "take_profit"]
            assert all(o["state"] == "Open" and o["side"] == "sell" for o in exits)

            # A limit entry with a bracket (one OTOCO on Binance) that is cancelled: its exit never works.
            rest = await ok(
                client,
                "place_order",
                {
                    "symbol": "BTCUSDT",
                    "side": "buy",
                    "type": "limit",
                    "price": 60000,
                    "quantity": 0.002,
                    "bracket": {"take_profit": 70000, "stop_loss": 55000},
                },
            )
            await ok(client, "cancel_order", {"order_id": rest["order_id"]})
            by_id = await orders_until(client, lambda o: o[rest["order_id"]]["state"] == "Cancelled")
            rest_list = by_id[rest["order_id"]].get("list_id") or by_id[rest["order_id"]]["bracket"]["list_id"]
            siblings = [o for o in by_id.values() if o.get("list_id") == rest_list and o["id"] != rest["order_id"]]
            assert all(o["state"] in ("Cancelled", "Rejected") for o in siblings), siblings
            await price(http, daemon, 59000)  # below the entry's limit: nothing may fill now
            open_now = await ok(client, "get_orders", {"filter": "open"})
            assert not [o for o in open_now if o.get("list_id") == rest_list]


async def trading(data_dir: Path, *args: str) -> str:
    """``chartgen trading ARGS`` as its own process, ``--data-dir`` after the subcommand."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "trading", *args, "--data-dir", str(data_dir),
        env=clean_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def log_until(path: Path, needle: str) -> str:
    async with asyncio.timeout(30):
        while True:
            text = await asyncio.to_thread(_read, path)
            if needle in text:
                return text
            await asyncio.sleep(0.05)  # polling another process's log, bounded by the timeout


async def test_halt_refuses_the_tool_an_action_alert_and_a_schedule_until_resumed(tmp_path: Path) -> None:
    trades_log = tmp_path / "trades.log"
    buy = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.0002}
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        assert daemon.token is not None
        await price(http, daemon, 65000)
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            await trading(tmp_path, "halt", "--reason", "test")
            failed, text = await call(client, "place_order", buy)
            assert failed and HALTED in text, text
            alert = await ok(
                client,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65100}, "action": {"place_order": buy}},
            )
            schedule = await ok(client, "schedule_order", {**buy, "every": "1s"})
            sid = schedule["schedule_id"]
            await price(http, daemon, 65200)
            await log_until(trades_log, f"ALERT_ACTION_REFUSED id={alert['alert_id']} reason={HALTED}")
            text = await log_until(trades_log, f"SCHEDULE-REFUSED id={sid}")
            assert HALTED in text.split(f"SCHEDULE-REFUSED id={sid}", 1)[1].splitlines()[0]
            (note,) = await ok(client, "get_notifications")
            assert note["action"]["status"] == "Refused" and note["action"]["reason"] == HALTED

            await trading(tmp_path, "resume")
            await log_until(trades_log, f"SCHEDULE-RUN id={sid}")
            placed = await ok(client, "place_order", buy)
            assert placed["status"] == "Filled"
            again = await ok(
                client,
                "set_alert",
                {"symbol": "BTCUSDT", "condition": {"price_above": 65300}, "action": {"place_order": buy}},
            )
            await price(http, daemon, 65400)
            await log_until(trades_log, f"ALERT_ACTION id={again['alert_id']}")
            assert (await ok(client, "cancel_schedule", {"schedule_id": sid}))["ok"] is True
        notes = await ok_notes(daemon)
        assert notes[again["alert_id"]]["action"]["status"] == "Filled"


async def ok_notes(daemon: DaemonProc) -> dict[str, Any]:
    assert daemon.token is not None
    async with mcp_client(daemon.mcp_url, daemon.token) as client:
        return {n["alert_id"]: n for n in await ok(client, "get_notifications")}
