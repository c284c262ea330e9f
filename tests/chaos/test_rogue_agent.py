"""A rogue ``trade`` agent against the halt switch (issue 36), through a real ``chartgen --serve --trade
--sim`` (Binance broker against the simulator) and the official MCP SDK client.

The probe that found it: a victim agent holds 7 resting orders and 1 OCO list (its stop-loss /
take-profit protection); the rogue, holding only the ``trade`` scope, called ``halt_trading
{"cancel_open": true}`` then ``{"resume": true}``, and every order of the victim was cancelled.  And
the rogue resumed a halt the operator set with ``chartgen trading halt``.  Now:

- the rogue's cancel-open cancels its own orders only; the victim's 7 orders and its OCO list stay
  open on the simulator (the exchange's own view, not the daemon's);
- ``cancel_order`` on the victim's orders answers "order not found", as before;
- the rogue cannot resume the operator's halt, not even after halting over it: the refusal names the
  holder and how to lift it; orders stay refused;
- an admin token resumes it, and the victim's orders are still there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from brokers import HALTED_MESSAGE
from testkit.daemon_proc import create_token, mcp_client, running_daemon
from tests.brokers.test_halt_daemon import ARGS, ENV, oco, order, sim_open, sim_open_lists, trading

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(240)]


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
    result = await client.call_tool(tool, args)
    text = str(result.content[0].text)  # type: ignore[union-attr]
    return result.is_error, (text if result.is_error else json.loads(text))


async def ok(client: Client, tool: str, args: dict[str, Any]) -> Any:
    failed, answer = await call(client, tool, args)
    assert not failed, answer
    return answer


async def refused(client: Client, tool: str, args: dict[str, Any]) -> str:
    failed, answer = await call(client, tool, args)
    assert failed, answer
    return str(answer)


async def test_a_rogue_trade_agent_cannot_cancel_others_orders_or_lift_the_operators_halt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with running_daemon(ARGS, data_dir=data, env=ENV) as daemon, aiohttp.ClientSession() as http:
        assert daemon.sim_url is not None
        sim = daemon.sim_url
        async with http.post(f"{sim}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "65000"}) as r:
            assert r.status == 200
        victim_token = await create_token(data, "victim", "charts,alerts,trade")
        rogue_token = await create_token(data, "rogue", "charts,alerts,trade")
        admin_token = await create_token(data, "ops", "admin")
        async with (
            mcp_client(daemon.mcp_url, victim_token) as victim,
            mcp_client(daemon.mcp_url, rogue_token) as rogue,
            mcp_client(daemon.mcp_url, admin_token) as admin,
        ):
            held = [(await ok(victim, "place_order", order(i)))["order_id"] for i in range(7)]
            await ok(victim, "place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01})
            protection = await ok(victim, "place_oco", oco(0))
            legs = [leg["order_id"] for leg in protection["legs"]]
            own = (await ok(rogue, "place_order", order(50)))["order_id"]
            victims = set(held) | set(legs)
            assert set(await sim_open(http, sim)) == victims | {own}

            # the probe's sequence: cancel_open, then resume its own halt
            answer = await ok(rogue, "halt_trading", {"cancel_open": True, "reason": "oops"})
            assert answer["cancel_open"]["orders_cancelled"] == 1 and answer["cancel_open"]["lists_cancelled"] == 0
            assert answer["cancel_open"]["failures"] == []
            assert not (await ok(rogue, "halt_trading", {"resume": True}))["halted"]
            assert set(await sim_open(http, sim)) == victims  # all 7 orders and both protective legs
            assert await sim_open_lists(http, sim) == [protection["list_id"]]
            for target in (held[0], protection["list_id"], legs[0]):  # cancel_order still refuses
                assert await refused(rogue, "cancel_order", {"order_id": target}) == f"order not found: {target}"

            # the operator's halt: the rogue may pull the brake too, but cannot release it
            code, out, err, _ = await trading(data, "halt", "--reason", "rogue agent suspected")
            assert code == 0, out + err
            text = await refused(rogue, "halt_trading", {"resume": True})
            assert text.startswith("trading stays halted: it was halted by the operator (cli")
            assert "chartgen trading resume" in text and 'an admin token (halt_trading {"resume": true})' in text
            over = await ok(rogue, "halt_trading", {"cancel_open": True, "reason": "mine now"})
            assert over["by"].startswith("cli") and over["reason"] == "rogue agent suspected"
            assert over["cancel_open"]["orders_cancelled"] == 0
            assert "halted by the operator" in await refused(rogue, "halt_trading", {"resume": True})
            assert await refused(rogue, "place_order", order(51)) == HALTED_MESSAGE
            assert set(await sim_open(http, sim)) == victims

            # an admin token lifts it; the victim's orders and protection are untouched
            assert not (await ok(admin, "halt_trading", {"resume": True}))["halted"]
            assert set(await sim_open(http, sim)) == victims
            assert await sim_open_lists(http, sim) == [protection["list_id"]]
            assert (await ok(victim, "place_order", order(52)))["status"] == "Open"
    log = (data / "trades.log").read_text()
    assert log.count("RESUME REFUSED for mcp:") == 2 and "RESUME by mcp:" in log
