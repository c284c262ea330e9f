"""Acceptance: kill -9 the order leader during a burst of 100 place_order calls through two cluster
fronts (``chartgen --serve --cluster``), with two ``chartgen leader`` processes, a real PostgreSQL
and the exchange simulator on the real clock, through the official MCP SDK client.

A new leader holds the lease within 10 s of the kill; every call is answered — either the order
reached the exchange exactly once (by client order id) or the answer is an error and the exchange
never saw it; none is doubled; the filled quantities the answers report equal the change of the
exchange account's balances, and so do the positions a front reports (the new leader's mirror).
Afterwards a halt set at one front refuses the next order at the other, and the leader cancels a
resting order on the halt's cancel-open."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from decimal import ROUND_UP, Decimal
from typing import Any

import pytest
from mcp import Client

from brokers import HALTED_MESSAGE
from cluster.orders import lease_name
from simulator import FEE
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_fronts
from testkit.leaders import leader_env, lease_holder, other_holder, start_leader, stop_leaders
from testkit.workers import pid_of, real_clock_simulator, until
from tests.cluster.test_front import call, call_error, token_command

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.slow]

SYMBOL = "BTCUSDT"
ACCOUNT = "main"
ORDERS = 100
KILL_AFTER = 30
TAKEOVER_LIMIT_S = 10.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def place(client: Client, cid: str, qty: Decimal, **extra: Any) -> tuple[str, dict[str, Any] | str]:
    args = {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": float(qty), "client_order_id": cid, **extra}
    result = await client.call_tool("place_order", args)
    text = result.content[0].text
    return cid, (text if result.is_error else json.loads(text))


async def test_the_leader_is_killed_mid_burst_and_no_order_is_lost_or_doubled(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, db = cluster
    code, token, err = await token_command(dsn, "create", "trader", "--scope", "charts,alerts,trade")
    assert code == 0, err
    token = token.strip()
    env = leader_env(
        dsn,
        sim.url,
        CHARTGEN_CLUSTER_HEARTBEAT_S="0.5",
        CHARTGEN_CLUSTER_LIVENESS_S="2",
        CHARTGEN_TRADING_MAX_DAILY_NOTIONAL="1000000",
    )
    leaders = [await start_leader(env) for _ in range(2)]
    fronts: list[DaemonProc] = []
    try:
        await start_fronts(fronts, 2, env)
        first = await until(lambda: lease_holder(db), 60)
        price = Decimal(str(dict(sim.exchange.start_prices())[SYMBOL]))
        qty = (Decimal(20) / price).quantize(Decimal("0.00001"), rounding=ROUND_UP)  # ~20 USDT each
        usdt0, btc0 = sim.exchange.account.free["USDT"], sim.exchange.account.free.get("BTC", Decimal(0))
        cids = [f"burst-{i:03d}-{uuid.uuid4().hex[:6]}" for i in range(ORDERS)]
        answered: list[tuple[str, dict[str, Any] | str]] = []
        killed_at: float | None = None

        async def kill_when_due() -> None:
            nonlocal killed_at
            await until(lambda: _at_least(answered, KILL_AFTER), 120)
            os.killpg(pid_of(first), signal.SIGKILL)
            killed_at = float(await db.fetchval("SELECT extract(epoch FROM clock_timestamp())"))

        async with mcp_client(fronts[0].mcp_url, token) as at_a, mcp_client(fronts[1].mcp_url, token) as at_b:
            gate = asyncio.Semaphore(10)

            async def one(i: int) -> None:
                async with gate:
                    answered.append(await place((at_a, at_b)[i % 2], cids[i], qty))

            killer = asyncio.create_task(kill_when_due())
            await asyncio.gather(*(one(i) for i in range(ORDERS)))
            await killer
            assert killed_at is not None
            second = await until(lambda: other_holder(db, first), TAKEOVER_LIMIT_S)
            assert second != first
            acquired = await db.fetchval(
                "SELECT extract(epoch FROM acquired_at) FROM cluster_leases WHERE name = $1", lease_name(ACCOUNT)
            )
            assert float(acquired) - killed_at <= TAKEOVER_LIMIT_S, "no new leader within 10 s of the kill"

            on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
            assert len(answered) == ORDERS
            placed: list[dict[str, Any]] = []
            for cid, answer in answered:
                if isinstance(answer, str):  # an error: the exchange never saw it
                    assert on_exchange[cid] == 0, (cid, answer)
                else:
                    assert answer["status"] == "Filled", answer  # not Pending: every call was settled
                    assert on_exchange[cid] == 1, (cid, answer)
                    placed.append(answer)
            assert max(on_exchange.values()) == 1, "an order reached the exchange twice"
            assert len(placed) >= KILL_AFTER
            bought = sum((Decimal(str(a["filled_quantity"])) for a in placed), Decimal(0))
            assert sim.exchange.account.free["BTC"] - btc0 == bought - bought * FEE
            spent = sum((o.cumulative_quote for o in sim.exchange.account.orders.values()), Decimal(0))
            assert usdt0 - sim.exchange.account.free["USDT"] == spent

            # After the failover: orders go through again, the halt switch holds at every front.
            cid, after = await place(at_b, f"after-{uuid.uuid4().hex[:8]}", qty)
            assert isinstance(after, dict) and after["status"] == "Filled", after

            async def positions_equal_balances() -> bool:  # the leader's mirror of the fills, at a front
                result = await at_a.call_tool("get_positions", {})
                if result.is_error:  # "no snapshot yet": the new leader's first refresh is due
                    return False
                got = json.loads(result.content[0].text)
                gained = sim.exchange.account.free["BTC"] - btc0
                return [p["symbol"] for p in got] == [SYMBOL] and Decimal(str(got[0]["quantity"])) == gained

            await until(positions_equal_balances, 60, every_s=0.5)
            limit = float((price * Decimal("0.95")).quantize(Decimal("0.01")))
            _, resting = await place(at_a, f"rest-{uuid.uuid4().hex[:8]}", qty, type="limit", price=limit)
            assert isinstance(resting, dict) and resting["exchange_status"] == "NEW", resting
            halted = await call(at_a, "halt_trading", {"reason": "acceptance", "cancel_open": True})
            assert halted["halted"] is True and halted["cancel_open"]["orders_cancelled"] == 1, halted
            refused = await call_error(at_b, "place_order", {"symbol": SYMBOL, "side": "buy", "type": "market",
                                                              "quantity": float(qty)})  # fmt: skip
            assert HALTED_MESSAGE in refused
            assert (await call(at_b, "halt_trading", {"resume": True}))["halted"] is False
    finally:
        for front in fronts:
            await front.stop()
        await stop_leaders(leaders)


async def _at_least(answered: list[Any], n: int) -> bool:
    return len(answered) >= n
