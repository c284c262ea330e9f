"""The account as a cluster's fronts see it (cluster/account_mirror.py): a ``chartgen leader`` process
mirrors the account's balances and its orders' states into PostgreSQL; a front answers
``get_balance``, ``get_orders`` and ``get_positions`` from the mirror, and carries out ``cancel_order``
— real PostgreSQL, the simulator, the MCP SDK.

- ``get_balance`` equals the exchange account's balances, with the time of the snapshot;
- ``get_orders`` lists the caller's orders placed through the cluster with the single node's fields:
  a filled market order, a resting limit order ``Open`` — and ``Filled`` once the price reached it
  and the leader refreshed the mirror; another principal sees none of them;
- ``get_positions`` (the mirrored fills replayed) holds what the exchange account's balance of the
  base asset gained; ``cancel_order`` cancels a resting order on the exchange (another principal's:
  "not found"; a filled one: an invalid transition);
- ``get_portfolio`` values the mirrored balances at the exchange's prices (cash, the position's
  quantity, price and average entry);
- before the leader wrote any snapshot, and when the last one is too old, ``get_balance`` says so
  instead of answering stale balances.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import aiohttp
import numpy as np
import pytest
from mcp import Client

from brokers import Actor, OrderInputError
from cluster.account_mirror import AccountView
from mcp_bridge import ADMIN, ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.workers import real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOL = "AA1USDT"  # about 155 USDT a unit in the simulator (quantity step 0.001)
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def _call(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def _exchange_balances(sim: Any) -> dict[str, tuple[float, float]]:
    return {
        b["asset"]: (float(b["free"]), float(b["locked"]))
        for b in sim.exchange.account.balances_view()
        if Decimal(b["free"]) or Decimal(b["locked"])
    }


async def test_fronts_read_orders_and_balances_from_the_leaders_mirror(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, db = cluster
    view = AccountView(db, "main")
    with pytest.raises(OrderInputError, match="no snapshot"):
        await view.get_balance()
    trader = ALL_SCOPES - {ADMIN}  # an admin token sees every principal's orders
    alice, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=trader)
    bob, _ = await PgTokenStore(db).create("bob", principal="bob", scopes=trader)
    env = leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S="0.5")
    leader = await start_leader(env)
    front: DaemonProc | None = None
    price = dict(sim.exchange.start_prices())[SYMBOL]
    try:
        await until(lambda: lease_holder(db), DEADLINE_S)
        front = await start_daemon(
            ["--serve", "--cluster"], data_dir=None, env={k: v for k, v in env.items() if not k.startswith("BINANCE_")}
        )
        await front.wait_ready()
        async with mcp_client(front.mcp_url, alice) as at_a, mcp_client(front.mcp_url, bob) as at_b:
            base = SYMBOL.removesuffix("USDT")
            held_before = _exchange_balances(sim).get(base, (0.0, 0.0))
            limit = f"{price * 0.95:.4f}"
            resting = await _call(
                at_a, "place_order", {"symbol": SYMBOL, "side": "buy", "type": "limit", "quantity": 0.1, "price": limit}
            )
            filled = await _call(
                at_a, "place_order", {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": 0.1}
            )
            assert (resting["status"], filled["status"]) == ("Open", "Filled")

            async def balances_match() -> dict[str, Any] | None:
                result = await at_a.call_tool("get_balance", {})
                if result.is_error:
                    return None
                got = json.loads(result.content[0].text)
                mirrored = {b["asset"]: (b["free"], b["locked"]) for b in got["balances"]}
                return got if mirrored == _exchange_balances(sim) else None

            balance = await until(balances_match, DEADLINE_S, every_s=0.5)
            assert balance["broker"] == "binance" and balance["as_of"]

            listed = {o["id"]: o for o in await _call(at_a, "get_orders", {"filter": "all"})}
            assert set(listed) == {resting["order_id"], filled["order_id"]}
            assert listed[filled["order_id"]]["state"] == "Filled" and listed[filled["order_id"]]["fill_price"] > 0
            assert listed[resting["order_id"]]["type"] == f"limit@{limit}"
            assert [o["id"] for o in await _call(at_a, "get_orders", {"filter": "open"})] == [resting["order_id"]]
            assert await _call(at_b, "get_orders", {"filter": "all"}) == []  # another principal's orders

            await _post_price(sim, price * 0.9)  # the book moves there: the resting buy fills

            async def rested_filled() -> bool:
                orders = {o["id"]: o for o in await _call(at_a, "get_orders", {"filter": "all"})}
                return orders[resting["order_id"]]["state"] == "Filled"

            await until(rested_filled, DEADLINE_S, every_s=0.5)
            assert await _call(at_a, "get_orders", {"filter": "open"}) == []

            async def positions_match() -> list[dict[str, Any]] | None:
                got = await _call(at_b, "get_positions")  # the account's: the same for every principal
                held = _exchange_balances(sim).get(base, (0.0, 0.0))
                return got if got and got[0]["quantity"] == pytest.approx(sum(held) - sum(held_before)) else None

            positions = await until(positions_match, DEADLINE_S, every_s=0.5)
            assert [p["symbol"] for p in positions] == [SYMBOL] and positions[0]["side"] == "buy"
            assert positions[0]["current_price"] > 0 and positions[0]["as_of"]

            # get_portfolio: the mirrored balances valued at the exchange's price of each USDT pair
            held = _exchange_balances(sim)
            t0 = sim.exchange.now_ms()
            data = (await _call(at_b, "get_portfolio"))["data"]
            t1 = sim.exchange.now_ms()
            portfolio = data["portfolio"]
            assert data["account"] == "binance"
            assert portfolio["cash"] == pytest.approx(sum(held.get("USDT", (0.0, 0.0))))
            (position,) = [p for p in portfolio["positions"] if p["symbol"] == SYMBOL]
            assert position["quantity"] == pytest.approx(sum(held[base]))
            # the exchange's price at the moment the front asked: one the simulator's path took meanwhile
            window = sim.exchange.markets[SYMBOL].path.price(np.arange(t0, t1 + 1, dtype=np.int64))
            assert Decimal(str(position["current_price"])) in {Decimal(f"{p:.8f}") for p in window}
            assert position["avg_price"] == pytest.approx(positions[0]["entry_price"])
            valued = {p["asset"] for p in portfolio["positions"]} | {u["asset"] for u in portfolio["unvalued"]}
            assert valued == set(held) - {"USDT"}  # every other asset: valued, or unvalued with a reason
            assert portfolio["total_value"] == pytest.approx(
                portfolio["cash"] + sum(p["market_value"] for p in portfolio["positions"])
            )

            far = f"{price * 0.5:.4f}"
            placed = await _call(
                at_a, "place_order", {"symbol": SYMBOL, "side": "buy", "type": "limit", "quantity": 0.1, "price": far}
            )
            refused = await at_b.call_tool("cancel_order", {"order_id": placed["order_id"]})
            assert refused.is_error and "order not found" in refused.content[0].text
            assert await _call(at_a, "cancel_order", {"order_id": placed["order_id"]}) == {"ok": True}
            on_exchange = sim.exchange.account.find(SYMBOL, None, placed["order_id"])
            assert on_exchange is not None and on_exchange.status == "CANCELED"
            listed = {o["id"]: o for o in await _call(at_a, "get_orders", {"filter": "all"})}
            assert listed[placed["order_id"]]["state"] == "Cancelled"
            refused = await at_a.call_tool("cancel_order", {"order_id": resting["order_id"]})
            assert refused.is_error and "invalid transition: Filled" in refused.content[0].text
        admin_view = await view.get_orders("all", actor=Actor(None, admin=True))
        assert {o["id"] for o in admin_view} == {resting["order_id"], filled["order_id"], placed["order_id"]}
        stale = AccountView(db, "main", stale_s=0.0)
        with pytest.raises(OrderInputError, match="s old"):
            await stale.get_balance()
    finally:
        if front is not None:
            await front.stop()
        await stop_leaders([leader])


async def _post_price(sim: Any, price: float) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": SYMBOL, "price": f"{price:.4f}"}) as r:
            assert r.status == 200, await r.text()
