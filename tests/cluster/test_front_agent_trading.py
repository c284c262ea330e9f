"""trade_simulate and trade_execute at a cluster front (cluster/front_desk.py): a ``chartgen leader``
process and a front on a real PostgreSQL, the simulator as the exchange, the MCP SDK client.

The leader's guard rails are set tighter than the front's own settings, so every refusal here shows
that the front judged with the leader's (published with the account mirror), not its own:

- trade_simulate fills legs on the mirrored balances at the venue's price with the account's
  commission rates (the leader's mirror carries them), counts earlier legs against the daily limit,
  refuses a leg over the leader's per-order limit, and sends nothing;
- trade_execute sends each leg once as an order intent: a market leg filled (its fees those of the
  exchange's fills), a leg over the limit refused before the exchange (no order id, nothing sent),
  a resting limit leg open; a retried call with the same ``tool_call_id`` finds its legs and sends
  nothing again; the executed legs then count against the daily limit in a simulation;
- place_oco at the front: the leader sends the list, get_orders lists its legs, cancel_order with the
  list's id cancels both on the exchange;
- place_order with a bracket on a market entry: the entry fills and the leader places its exit OCO.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
from mcp import Client

from mcp_bridge import ADMIN, ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.workers import real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOL = "AA1USDT"  # about 155 USDT a unit in the simulator (quantity step 0.001)
DEADLINE_S = 60.0
MAKER, TAKER = Decimal("0.0002"), Decimal("0.0004")
"""The account's rates (set on the simulator, which charges them): the leader's mirror carries them."""


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def _call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    body = result.structured_content
    assert body is not None, result.content[0].text
    return bool(result.is_error), body


async def _chartgen(client: Client, tool: str, args: dict[str, Any]) -> Any:
    """A chartgen tool's answer (JSON text)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def _leg(qty: float, **extra: Any) -> dict[str, Any]:
    return {"symbol": SYMBOL, "action": "buy", "quantity": qty, **extra}


async def test_a_front_simulates_with_the_leaders_guard_rails_and_executes_each_leg_once(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, db = cluster
    sim.exchange.account.maker_fee, sim.exchange.account.taker_fee = MAKER, TAKER
    p0 = dict(sim.exchange.start_prices())[SYMBOL]
    per_order, daily = p0 * 0.5, p0 * 0.4  # 1 unit is over the per-order limit; 0.25 + 0.25 over the daily one
    alice, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES - {ADMIN})
    env = leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S="0.5")
    leader = await start_leader(
        {
            **env,
            "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": f"{per_order:.2f}",
            "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": f"{daily:.2f}",
        }
    )
    front: DaemonProc | None = None
    try:
        await until(lambda: lease_holder(db), DEADLINE_S)
        front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}
        front_env |= {
            "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
            "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "10000000",
        }
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        async with mcp_client(front.mcp_url, alice) as client:
            arrivals = dict(sim.exchange.order_arrivals)

            async def simulated() -> dict[str, Any] | None:  # once the leader wrote its first snapshot
                failed, body = await _call(client, "trade_simulate", {"trades": [_leg(0.1)]})
                if failed:
                    assert body["error"]["code"] == "NOT_AVAILABLE", body
                    return None
                return body

            await until(simulated, DEADLINE_S, every_s=0.5)
            usdt = sum(
                Decimal(b["free"]) + Decimal(b["locked"])
                for b in sim.exchange.account.balances_view()
                if b["asset"] == "USDT"
            )
            limit = round(p0 * 0.9, 2)
            failed, body = await _call(
                client, "trade_simulate", {"trades": [_leg(0.1), _leg(0.1, price=limit)], "tool_call_id": "sim_c1"}
            )
            assert not failed, body
            simulation = body["data"]["simulation"]
            market, resting = simulation["trades"]
            assert (market["status"], market["liquidity"], market["fee_source"]) == (
                "filled",
                "taker",
                "account commission (account tier), from the order leader's mirror",
            )
            assert market["fee_rate"] == float(TAKER) and resting["fee_rate"] == float(MAKER)
            assert market["fees"] == pytest.approx(0.1 * float(TAKER) * market["price"], rel=1e-9)
            assert market["total_cost"] == pytest.approx(0.1 * market["price"] * (1 + float(TAKER)), rel=1e-9)
            assert market["price"] == pytest.approx(p0, rel=0.02)
            assert (resting["price"], resting["liquidity"]) == (limit, "maker")
            assert simulation["portfolio_before"]["cash"] == pytest.approx(float(usdt), rel=1e-12)
            assert simulation["portfolio_after"]["cash"] == pytest.approx(
                float(usdt) - market["price"] * 0.1 - limit * 0.1, rel=1e-9
            )

            failed, body = await _call(client, "trade_simulate", {"trades": [_leg(1.0)]})
            assert failed and body["error"]["code"] == "RISK_LIMIT_EXCEEDED", body
            assert f"per-order limit {per_order:.2f}" in body["error"]["message"]
            failed, body = await _call(client, "trade_simulate", {"trades": [_leg(0.25), _leg(0.25)]})
            assert failed and body["error"]["code"] == "RISK_LIMIT_EXCEEDED", body
            assert "leg 2 (BUY 0.25 AA1USDT)" in body["error"]["message"]
            assert f"daily limit {daily:.2f}" in body["error"]["message"]
            assert sim.exchange.order_arrivals == arrivals  # a simulation sends nothing

            legs = [
                _leg(0.1, order_type="market"),
                _leg(1.0, order_type="market"),  # over the leader's per-order limit
                _leg(0.1, order_type="limit", price=round(p0 * 0.5, 2)),  # rests on the book
            ]
            failed, body = await _call(client, "trade_execute", {"trades": legs, "tool_call_id": "exec_c1"})
            assert not failed, body
            trades = body["data"]["execution"]["trades"]
            assert [t["status"] for t in trades] == ["filled", "rejected", "open"], trades
            assert trades[1]["order_id"] is None and trades[1]["error"]["code"] == "RISK_LIMIT_EXCEEDED"
            sent = {trades[0]["order_id"], trades[2]["order_id"]}
            assert set(sim.exchange.order_arrivals) - set(arrivals) == sent
            on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
            filled = on_exchange[trades[0]["order_id"]]
            fill_price = float(filled.cumulative_quote / filled.executed_qty)
            fees = sum(float(Decimal(f["commission"]) * Decimal(f["price"])) for f in filled.fills)  # in AA1
            assert trades[0]["price"] == pytest.approx(fill_price) and trades[0]["filled_quantity"] == 0.1
            assert trades[0]["fees"] == pytest.approx(fees, rel=1e-9) and fees > 0
            assert fees == pytest.approx(float(filled.cumulative_quote * TAKER), rel=1e-9)  # the rate simulated
            assert trades[0]["total_cost"] == pytest.approx(float(filled.cumulative_quote) + fees, rel=1e-9)
            assert on_exchange[trades[2]["order_id"]].status == "NEW" and trades[2]["total_cost"] == 0

            failed, again = await _call(client, "trade_execute", {"trades": legs, "tool_call_id": "exec_c1"})
            assert not failed, again
            replayed = again["data"]["execution"]["trades"]
            assert [t["replayed"] for t in replayed] == [True, False, True]
            assert [t["order_id"] for t in replayed] == [t["order_id"] for t in trades]
            assert set(sim.exchange.order_arrivals) - set(arrivals) == sent  # nothing sent twice

            # the executed legs count now (0.1 unit each, the resting one valued as the leader values it)
            failed, body = await _call(client, "trade_simulate", {"trades": [_leg(0.3)]})
            assert failed and body["error"]["code"] == "RISK_LIMIT_EXCEEDED", body
            failed, body = await _call(client, "trade_simulate", {"trades": [_leg(0.15)]})
            assert not failed, body

            # place_oco at the front (cluster/list_intents.py): the leader sends the list once; its legs
            # are listed; cancel_order with the list's id cancels both on the exchange
            oco = {"symbol": SYMBOL, "side": "sell", "quantity": 0.05}
            prices = {"take_profit_price": round(p0 * 1.2, 2), "stop_price": round(p0 * 0.8, 2)}
            placed = await _chartgen(client, "place_oco", oco | prices)
            legs = [leg["order_id"] for leg in placed["legs"]]
            assert placed["list_status"] == "EXECUTING" and len(legs) == 2
            on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
            assert {on_exchange[c].status for c in legs} == {"NEW"}
            listed = await _chartgen(client, "get_orders", {"filter": "open"})
            assert sorted(o["id"] for o in listed if o.get("list_id") == placed["list_id"]) == sorted(legs)
            assert await _chartgen(client, "cancel_order", {"order_id": placed["list_id"]}) == {
                "ok": True,
                "list_id": placed["list_id"],
            }
            on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
            assert {on_exchange[c].status for c in legs} == {"CANCELED"}

            # a bracket on a market entry (cluster/bracket_exits.py): the entry fills, then the leader
            # places its exit OCO, and the answer carries both (0.04 + 0.044 of the daily limit's 0.4 units)
            entry = {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": 0.04}
            bracket = {"take_profit": round(p0 * 1.1, 2), "stop_loss": round(p0 * 0.9, 2)}
            placed = await _chartgen(client, "place_order", entry | {"bracket": bracket})
            assert (placed["status"], placed["bracket"]["state"]) == ("Filled", "placed"), placed
            on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
            assert on_exchange[placed["order_id"]].status == "FILLED"
            assert {on_exchange[leg["order_id"]].status for leg in placed["bracket"]["legs"]} == {"NEW"}
    finally:
        if front is not None:
            await front.stop()
        await stop_leaders([leader])
