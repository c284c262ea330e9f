"""The halt switch end to end: ``chartgen --serve --trade --sim`` (Binance broker against the simulator),
``chartgen trading halt --cancel-open`` run as its own process while the daemon runs, and the
``halt_trading`` tool over the official MCP SDK client; every status surface shows the halt."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from mcp import Client

from brokers.halt import HALTED_MESSAGE
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from testkit.daemon_proc import DaemonProc, clean_env, create_token, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process]

ENV = {
    "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
    "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000",
    "CHARTGEN_BROKER": "binance",
    "WATCHDOG_USEC": "200000",  # STATUS= refreshed every 0.1 s
}
ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
BUDGET_S = 2.0


async def trading(data_dir: Path, *args: str) -> tuple[int, str, str, float]:
    """``chartgen trading ARGS --data-dir D`` as its own process; also how long it took."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "trading", *args, "--data-dir", str(data_dir),
        env=clean_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


async def ok(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def refused(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error
    return str(result.content[0].text)


def oco(i: int) -> dict[str, Any]:
    return {
        "symbol": "BTCUSDT",
        "side": "sell",
        "quantity": 0.001,
        "take_profit_price": 70000 + i,
        "stop_price": 60000 - i,
    }


def order(i: int) -> dict[str, Any]:
    return {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001, "price": 60000 - i}


async def signed_get(http: aiohttp.ClientSession, sim: str, path: str) -> Any:
    """A signed GET on the simulator's own REST API (the account the daemon trades on)."""
    async with http.get(f"{sim}/api/v3/time") as r:
        now = (await r.json())["serverTime"]
    query = urlencode({"timestamp": now})
    sig = hmac.new(DEFAULT_API_SECRET.encode(), query.encode(), hashlib.sha256).hexdigest()
    async with http.get(f"{sim}{path}?{query}&signature={sig}", headers={"X-MBX-APIKEY": DEFAULT_API_KEY}) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def sim_open(http: aiohttp.ClientSession, sim: str) -> list[str]:
    """The exchange's own view: client ids of open orders (list legs included)."""
    return [o["clientOrderId"] for o in await signed_get(http, sim, "/api/v3/openOrders")]


async def sim_open_lists(http: aiohttp.ClientSession, sim: str) -> list[str]:
    return [lst["listClientOrderId"] for lst in await signed_get(http, sim, "/api/v3/openOrderList")]


async def surfaces(http: aiohttp.ClientSession, daemon: DaemonProc) -> tuple[dict[str, Any], dict[str, Any], str]:
    """GET /status (bearer), /readyz, /metrics."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    async with http.get(f"{daemon.base}/status", headers=auth) as r:
        assert r.status == 200
        status = await r.json()
    async with http.get(f"{daemon.base}/readyz") as r:
        assert r.status == 200  # a halt keeps the daemon ready
        ready = await r.json()
    async with http.get(f"{daemon.base}/metrics") as r:
        assert r.status == 200
        metrics = await r.text()
    return status, ready, metrics


class NotifySocket:
    """A fake systemd notify socket, drained continuously (a full socket would block the daemon's sends)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.statuses: list[str] = []
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            message = (await loop.sock_recv(self.sock, 4096)).decode()
            self.statuses += [line for line in message.splitlines() if line.startswith("STATUS=")]
            self._changed.set()

    async def status(self, want: str, *, since: int = 0) -> str:
        """The first STATUS= line at or after index ``since`` containing ``want``."""
        async with asyncio.timeout(10):
            while True:
                for line in self.statuses[since:]:
                    if want in line:
                        return line
                self._changed.clear()
                await self._changed.wait()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.sock.close()


async def test_halt_cancel_open_from_the_cli_and_the_tool(tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    data = tmp_path / "data"
    env = {**ENV, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    try:
        async with (
            running_daemon(ARGS, data_dir=data, env=env) as daemon,
            aiohttp.ClientSession() as http,
            mcp_client(daemon.mcp_url, daemon.token) as client,
        ):
            assert daemon.sim_url is not None
            sim = daemon.sim_url
            async with http.post(f"{sim}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "65000"}) as r:
                assert r.status == 200
            placed = [(await ok(client, "place_order", order(i)))["order_id"] for i in range(30)]
            assert sorted(await sim_open(http, sim)) == sorted(placed)
            bought = await ok(
                client, "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01}
            )
            assert bought["status"] == "Filled"
            for i in range(5):  # five OCO exits: 10 legs open on the exchange
                await ok(client, "place_oco", oco(i))
            assert len(await sim_open_lists(http, sim)) == 5 and len(await sim_open(http, sim)) == 40

            # --- the CLI, as its own process, while the daemon runs -------------------------------
            code, out, err, took = await trading(data, "halt", "--cancel-open", "--reason", "exchange incident")
            assert code == 0, out + err
            assert "HALT cancel-open: 30 orders, 5 lists cancelled" in out, out
            assert await sim_open(http, sim) == [] and await sim_open_lists(http, sim) == []
            status, ready, metrics = await surfaces(http, daemon)
            halt = status["trading"]
            assert halt["halted"] and halt["reason"] == "exchange incident" and halt["since"]
            assert halt["by"].startswith("cli") and not halt["cancel_pending"]
            done = halt["last_cancel"]
            assert done["orders_cancelled"] == 30 and done["lists_cancelled"] == 5 and done["failures"] == []
            # from the CLI's commit to the daemon's record of the result, on the database's wall clock
            row = await _row(data)
            assert row["cancel_done_at"] - row["halted_at"] < BUDGET_S, (row, took)
            latency = row["cancel_done_at"] - row["halted_at"]
            print(
                f"CLI halt --cancel-open: process {took:.2f} s; halt→done {latency:.3f} s; cancels {done['seconds']} s"
            )
            assert "chartgen_trading_halted 1.0" in metrics
            assert (await notify.status("HALTED")).startswith("STATUS=HALTED by operator: exchange incident")
            assert await refused(client, "place_order", order(99)) == HALTED_MESSAGE
            assert await refused(client, "place_oco", oco(9)) == HALTED_MESSAGE  # OCO legs pass admission too

            mark = len(notify.statuses)
            code, out, err, _ = await trading(data, "resume")
            assert code == 0 and "not halted" in out, out + err
            resumed = await ok(client, "place_order", order(40))  # admission reads the row: no lag
            assert resumed["status"] == "Open"
            # the status surfaces follow the watch (within its 0.2 s poll); STATUS= tells when it has
            assert (await notify.status("STATUS=ready", since=mark)).startswith("STATUS=ready | ")
            status, ready, metrics = await surfaces(http, daemon)
            assert not status["trading"]["halted"] and "chartgen_trading_halted 0.0" in metrics
            assert not any("HALTED" in r for r in ready["reasons"])

            # --- the tool: only clients allowed to trade ------------------------------------------
            viewer = await create_token(data, "viewer")  # charts,alerts
            async with mcp_client(daemon.mcp_url, viewer) as charts_only:
                text = await refused(charts_only, "halt_trading", {"cancel_open": True})
                assert "needs the 'trade' scope" in text
            for i in range(41, 44):
                await ok(client, "place_order", order(i))
            assert len(await sim_open(http, sim)) == 4
            answer = await ok(client, "halt_trading", {"cancel_open": True, "reason": "via tool"})
            assert answer["halted"] and answer["reason"] == "via tool" and answer["by"] == "mcp:demo"
            assert answer["cancel_open"]["orders_cancelled"] == 4 and answer["cancel_open"]["failures"] == []
            assert await sim_open(http, sim) == []
            assert await refused(client, "place_order", order(50)) == HALTED_MESSAGE
            code, out, _, _ = await trading(data, "status")
            assert code == 0 and "HALTED" in out and "via tool" in out
            assert not (await ok(client, "halt_trading", {"resume": True}))["halted"]
            assert (await ok(client, "place_order", order(51)))["status"] == "Open"
        log = (data / "trades.log").read_text()
        assert "HALT cancel-open: 30 orders, 5 lists cancelled" in log and "HALT by mcp:demo: via tool" in log
    finally:
        await notify.close()


async def _row(data: Path) -> dict[str, Any]:
    from storage import Database

    db = await Database.open(data / "chartgen.db")
    try:
        row = await db.fetchone("SELECT halted_at, cancel_done_at FROM trading_halt WHERE id = 1")
        assert row is not None
        return {"halted_at": float(row[0]), "cancel_done_at": float(row[1])}
    finally:
        await db.close()


async def test_halt_rights_through_the_daemon_the_cli_and_the_tool(tmp_path: Path) -> None:
    """Issue 36: a ``trade`` token's cancel_open cancels its own orders only, it cannot resume the
    operator's halt (the refusal names the holder and how to lift it), an admin token can; every
    status surface names the holder."""
    data = tmp_path / "data"
    async with running_daemon(ARGS, data_dir=data, env=ENV) as daemon, aiohttp.ClientSession() as http:
        assert daemon.sim_url is not None
        sim = daemon.sim_url
        async with http.post(f"{sim}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "65000"}) as r:
            assert r.status == 200
        alice_token = await create_token(data, "alice", "charts,alerts,trade")
        bob_token = await create_token(data, "bob", "charts,alerts,trade")
        root_token = await create_token(data, "root", "admin")
        async with (
            mcp_client(daemon.mcp_url, alice_token) as alice,
            mcp_client(daemon.mcp_url, bob_token) as bob,
            mcp_client(daemon.mcp_url, root_token) as root,
        ):
            mine = [(await ok(alice, "place_order", order(i)))["order_id"] for i in range(2)]
            theirs = [(await ok(bob, "place_order", order(10 + i)))["order_id"] for i in range(3)]
            await ok(bob, "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01})
            bobs_oco = (await ok(bob, "place_oco", oco(0)))["list_id"]
            assert len(await sim_open(http, sim)) == 7

            # alice's cancel-open: her two orders only; bob's orders and his OCO's legs stay on the exchange
            answer = await ok(alice, "halt_trading", {"cancel_open": True, "reason": "mine"})
            alice_by = answer["by"]
            assert alice_by.startswith("mcp:tok_") and answer["holder_kind"] == "principal"
            assert answer["cancel_open"]["orders_cancelled"] == 2 and answer["cancel_open"]["lists_cancelled"] == 0
            open_now = await sim_open(http, sim)
            assert not set(mine) & set(open_now) and set(theirs) <= set(open_now) and len(open_now) == 5
            assert await sim_open_lists(http, sim) == [bobs_oco]
            text = await refused(bob, "halt_trading", {"resume": True})  # bob cannot lift alice's halt
            assert f"halted by token {alice_by}" in text and f"{alice_by} itself" in text
            assert not (await ok(alice, "halt_trading", {"resume": True}))["halted"]  # she can

            # the operator's halt: a trade token cannot lift it, an admin token can
            code, out, err, _ = await trading(data, "halt", "--reason", "exchange incident")
            assert code == 0, out + err
            text = await refused(bob, "halt_trading", {"resume": True})
            assert text.startswith("trading stays halted: it was halted by the operator (cli")
            assert "chartgen trading resume" in text and "admin token" in text
            kept = await ok(bob, "halt_trading", {"cancel_open": True, "reason": "me"})  # halting is allowed...
            assert kept["by"].startswith("cli") and kept["reason"] == "exchange incident"  # ...the holder stays
            assert "keeps holding it" in kept["note"] and kept["cancel_open"]["orders_cancelled"] == 3
            assert await sim_open_lists(http, sim) == []  # bob's own OCO went with his cancel-open
            text = await refused(bob, "halt_trading", {"resume": True})
            assert "halted by the operator" in text
            assert await refused(bob, "place_order", order(20)) == HALTED_MESSAGE
            code, out, err, _ = await trading(data, "status")
            assert code == 0 and "held by cli" in out and "(operator)" in out and "admin token" in out, out + err
            status, _, _ = await surfaces(http, daemon)
            assert status["trading"]["holder_kind"] == "operator" and status["trading"]["by"].startswith("cli")
            assert "only the operator" in status["trading"]["lifted_by"]
            resumed = await ok(root, "halt_trading", {"resume": True})
            assert not resumed["halted"] and resumed["by"] is None
            assert (await ok(bob, "place_order", order(21)))["status"] == "Open"

            # the CLI lifts a token's halt
            await ok(bob, "halt_trading", {})
            code, out, err, _ = await trading(data, "resume")
            assert code == 0 and "not halted" in out, out + err
    log = (data / "trades.log").read_text()
    assert "RESUME REFUSED for mcp:" in log and "halted by cli" in log
