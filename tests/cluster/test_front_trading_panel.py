"""The dashboard's Trading panel at cluster fronts (dashboard/trading.py over cluster/halt.py's
``ClusterHalt``, the schedules on PostgreSQL and the PostgreSQL suspensions): two ``chartgen --serve
--cluster`` fronts and a ``chartgen leader`` on a real PostgreSQL, the simulator as the exchange.

Schedules made through MCP at front B are listed on front A's panel with their owner and next run,
and one is cancelled there; a halt from A's panel (CSRF required) is shown with its holder at B and
stops the order leader — a place_order at B is refused and reaches no exchange — until resumed at A;
a principal suspended at A is refused "suspended by the operator" at B (its orders, and the creation
of schedules and action alerts; a plain alert still works) while another trades.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from mcp import Client

from brokers import HALTED_MESSAGE
from dashboard import COOKIE
from mcp_bridge import ADMIN, ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_fronts
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.workers import real_clock_simulator, until
from tests.cluster.test_front_oauth import set_cluster_passphrase
from tests.dashboard.test_dashboard_access import csrf_of, sign_in

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.timeout(240)]

SYMBOL = "TP0USDT"
DEADLINE_S = 60.0
SUSPENDED = "suspended by the operator"


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def _tool(client: Client, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    result = await client.call_tool(name, args)
    return bool(result.is_error), str(result.content[0].text)  # type: ignore[union-attr]


class Panel:
    """The operator's session at one front."""

    def __init__(self, http: aiohttp.ClientSession, base: str, csrf: str) -> None:
        self.http, self.base, self.csrf = http, base, csrf

    async def get(self) -> dict[str, Any]:
        async with self.http.get(f"{self.base}/ui/api/trading") as r:
            assert r.status == 200, await r.text()
            body: dict[str, Any] = await r.json()
            return body

    async def change(self, method: str, path: str, body: Any = None, *, csrf: bool = True) -> tuple[int, Any]:
        headers = {"X-CSRF-Token": self.csrf} if csrf else {}
        async with self.http.request(method, f"{self.base}{path}", json=body, headers=headers) as r:
            return r.status, await r.json()


async def test_the_trading_panel_at_a_front_halts_the_leader_and_lists_the_clusters_schedules(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, db = cluster
    await set_cluster_passphrase(dsn)
    tokens = PgTokenStore(db)
    alice, alice_info = await tokens.create("alice", principal="alice", scopes=ALL_SCOPES - {ADMIN})
    bob, _ = await tokens.create("bob", principal="bob", scopes=ALL_SCOPES - {ADMIN})
    price = dict(sim.exchange.start_prices())[SYMBOL]
    qty = max(round(50 / price, 2), 0.01)  # about 50 USDT, on the simulator's 0.01 lot step
    buy = {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": qty}
    limits = {"CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000", "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000"}
    env = leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S="0.5", **limits)
    front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}
    front_env |= {"CHARTGEN_SYMBOLS": SYMBOL, "CHARTGEN_INTERVALS": "1m"}
    leader = await start_leader(env)
    fronts: list[DaemonProc] = []
    try:
        await start_fronts(fronts, 2, front_env)
        await until(lambda: lease_holder(db), DEADLINE_S)
        a, b = fronts
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as at_a:
            assert (await sign_in(at_a, a.base)).status == 303
            secret = next(c.value for c in jar if c.key == COOKIE)
            panel_a = Panel(at_a, a.base, await csrf_of(at_a, a.base))
            async with (
                aiohttp.ClientSession(headers={"Cookie": f"{COOKIE}={secret}"}) as at_b,
                mcp_client(b.mcp_url, alice) as as_alice,
                mcp_client(b.mcp_url, bob) as as_bob,
            ):
                panel_b = Panel(at_b, b.base, panel_a.csrf)

                # the cluster's schedules, made at B, listed at A with their owner and next run
                refused, text = await _tool(as_alice, "schedule_order", {**buy, "every": "1h"})
                assert not refused, text
                a_sid = json.loads(text)["schedule_id"]
                refused, text = await _tool(as_bob, "schedule_order", {**buy, "cron": "0 9 * * *"})
                assert not refused, text
                b_sid, b_next = json.loads(text)["schedule_id"], json.loads(text)["next_run_at"]
                listed = {s["schedule_id"]: s for s in (await panel_a.get())["schedules"]}
                assert set(listed) == {a_sid, b_sid}
                assert (listed[a_sid]["owner"], listed[a_sid]["owner_name"]) == ("alice", "alice")
                assert listed[b_sid]["owner"] == "bob" and listed[b_sid]["next_run_at"] == b_next
                a_next = datetime.fromisoformat(listed[a_sid]["next_run_at"])
                assert 0 < (a_next - datetime.now(UTC)).total_seconds() <= 3600
                status, body = await panel_a.change("DELETE", f"/ui/api/trading/schedules/{a_sid}")
                assert status == 200 and body["cancelled"]["schedule_id"] == a_sid, body
                assert [s["schedule_id"] for s in (await panel_b.get())["schedules"]] == [b_sid]

                # a halt from A's panel: shown with its holder at B, and the leader refuses orders
                status, body = await panel_a.change("POST", "/ui/api/trading/halt", {"reason": "x"}, csrf=False)
                assert status == 403, body
                assert (await panel_b.get())["halt"]["halted"] is False
                status, body = await panel_a.change("POST", "/ui/api/trading/halt", {"reason": "venue incident"})
                assert status == 200 and body["halt"]["halted"] is True, body
                halt = (await panel_b.get())["halt"]
                assert halt["halted"] and halt["reason"] == "venue incident" and "dashboard" in halt["holder"], halt
                arrivals = len(sim.exchange.order_arrivals)
                refused, text = await _tool(as_alice, "place_order", buy)
                assert refused and HALTED_MESSAGE in text, text
                assert len(sim.exchange.order_arrivals) == arrivals  # nothing reached the exchange

                status, body = await panel_a.change("POST", "/ui/api/trading/resume")
                assert status == 200 and body["halt"]["halted"] is False, body
                refused, text = await _tool(as_alice, "place_order", buy)
                assert not refused, text

                # alice suspended at A: refused at B, while bob trades; unsuspended, she trades again
                status, body = await panel_a.change(
                    "POST", "/ui/api/trading/suspensions", {"principal": alice_info.principal, "reason": "review"}
                )
                assert status == 201, body
                (suspension,) = (await panel_b.get())["suspensions"]
                assert [suspension[k] for k in ("principal", "name", "reason")] == ["alice", "alice", "review"]
                refused, text = await _tool(as_alice, "place_order", buy)
                assert refused and SUSPENDED in text, text
                refused, text = await _tool(as_bob, "place_order", buy)
                assert not refused, text
                # nor can she create schedules or action alerts at B; a plain alert still works
                refused, text = await _tool(as_alice, "schedule_order", {**buy, "every": "1h"})
                assert refused and SUSPENDED in text, text
                alert = {"symbol": SYMBOL, "condition": {"price_above": price * 2}}
                refused, text = await _tool(as_alice, "set_alert", {**alert, "action": {"place_order": buy}})
                assert refused and SUSPENDED in text, text
                refused, text = await _tool(as_alice, "set_alert", alert)
                assert not refused, text
                status, body = await panel_a.change("DELETE", "/ui/api/trading/suspensions/alice")
                assert status == 200, body
                refused, text = await _tool(as_alice, "place_order", buy)
                assert not refused, text
    finally:
        for front in fronts:
            await front.stop()
        await stop_leaders([leader])
