"""Alert actions on a cluster: ``set_alert`` with ``action.place_order`` at a front, fired by a worker,
sent by the order leader — a front, a worker and a ``chartgen leader`` process on a real PostgreSQL
against the exchange simulator, through the MCP SDK client and a raw SSE stream.

- the action is checked at the front (the single node's argument checks; a warning says the guard
  rails are applied when it fires);
- when the price crosses, the worker's firing transaction records the order intent (its client order
  id derived from the alert id); the leader sends it; the pushed notification carries the order's
  outcome (status, fill) — the frame is queued only once the outcome is known;
- an action over the per-order limit is refused by the leader: the notification says ``Refused``
  with the leader's words, and nothing reaches the exchange; one the exchange rejects (a filter)
  says ``Rejected`` with the exchange's reason;
- the exchange holds exactly one order per placed action, by client order id; the poll queue has
  the final outcomes; every ``alert_actions`` row is settled.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from alerts import PgAlertStore, Subscription, action_client_id
from daemon import CHECKED_WHEN_FIRED
from mcp_bridge import ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.workers import Workers, real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["AA0USDT", "AA1USDT"]
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def _set(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("set_alert", args)
    assert not result.is_error, result.content[0].text
    return dict(json.loads(result.content[0].text))


async def _ready(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/readyz") as r:
        return dict(await r.json())


async def _frames(stream: aiohttp.ClientResponse, n: int) -> dict[str, dict[str, Any]]:
    """The next ``n`` alert frames' params, by alert id."""
    out: dict[str, dict[str, Any]] = {}
    async with asyncio.timeout(DEADLINE_S):
        while len(out) < n:
            event: dict[str, str] = {}
            while True:
                line = (await stream.content.readline()).decode().rstrip("\n")
                if line == "" and "data" in event:
                    break
                if line.startswith("data: "):
                    event["data"] = line[6:]
            params = json.loads(event["data"])["params"]
            out[params["alert_id"]] = params
    return out


async def test_an_alert_action_fires_once_through_the_leader_and_its_outcome_is_pushed(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    token, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES)
    await PgAlertStore(db).subscribe(Subscription(principal="alice"), 0.0)
    env = leader_env(dsn, sim.url, CHARTGEN_INTERVALS="1m", CHARTGEN_CLUSTER_HEARTBEAT_S="0.5")
    front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}  # fronts hold no keys
    leader = await start_leader(env)
    workers = Workers(dsn, sim.url, tmp_path, symbols=SYMBOLS, heartbeat_s=0.5, liveness_s=2.0)
    front: DaemonProc | None = None
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    try:
        await until(lambda: lease_holder(db), DEADLINE_S)
        await workers.start(http=True)
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        await until(lambda: workers.settled(db, 1), DEADLINE_S)
        worker_url = await workers.http_url(0)
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with (
            aiohttp.ClientSession() as http,
            mcp_client(front.mcp_url, token) as client,
            http.get(f"{front.base}/sse", headers=headers) as stream,
        ):
            assert stream.status == 200
            buy = {"place_order": {"side": "buy", "type": "market", "quantity": 40}}  # ~9 USDT at ~0.23
            too_big = {"place_order": {"side": "buy", "type": "market", "quote_quantity": 20000}}
            placed = await _set(
                client, {"symbol": SYMBOLS[0], "condition": {"price_above": base[SYMBOLS[0]] * 1.01}, "action": buy}
            )
            refused = await _set(
                client, {"symbol": SYMBOLS[1], "condition": {"price_above": base[SYMBOLS[1]] * 1.01}, "action": too_big}
            )
            rejected = await _set(  # a sell of an asset the account does not hold: the exchange rejects it
                client,
                {
                    "symbol": SYMBOLS[1],
                    "condition": {"price_above": base[SYMBOLS[1]] * 1.01},
                    "action": {"place_order": {"side": "sell", "type": "market", "quantity": 1}},
                },
            )
            assert placed["warnings"] == [CHECKED_WHEN_FIRED]
            bad = await client.call_tool(
                "set_alert",
                {"symbol": SYMBOLS[0], "condition": {"price_above": 1.0}, "action": {"place_order": {"side": "up"}}},
            )
            assert bad.is_error and "side must be 'buy' or 'sell'" in bad.content[0].text
            await until(lambda: _indexed(http, worker_url, 3), DEADLINE_S)

            for s in SYMBOLS:
                async with http.post(
                    f"{sim.url}/sim/v1/price", json={"symbol": s, "price": f"{base[s] * 1.015:.8f}"}
                ) as r:
                    assert r.status == 200
            frames = await _frames(stream, 3)

            cid = action_client_id(placed["alert_id"])
            done = frames[placed["alert_id"]]["action"]
            assert done["order_id"] == cid and done["status"] == "Filled", json.dumps(done)
            assert done["filled_quantity"] > 0 and done["fill_price"] > 0
            no = frames[refused["alert_id"]]["action"]
            assert no["status"] == "Refused" and "limit" in no["reason"], no
            lot = frames[rejected["alert_id"]]["action"]
            assert lot["status"] == "Rejected" and "insufficient balance" in lot["reason"], lot

            on_exchange = [o.client_order_id for o in sim.exchange.account.orders.values()]
            assert on_exchange == [cid]  # once; the refused one never reached the exchange
            polled = json.loads((await client.call_tool("get_notifications", {})).content[0].text)
            assert {n["alert_id"]: n["action"]["status"] for n in polled} == {
                placed["alert_id"]: "Filled",
                refused["alert_id"]: "Refused",
                rejected["alert_id"]: "Rejected",
            }
        states = {r["alert_id"]: r["state"] for r in await db.fetch("SELECT alert_id, state FROM alert_actions")}
        assert states == dict.fromkeys((placed["alert_id"], refused["alert_id"], rejected["alert_id"]), "done")
        intents = {r["client_order_id"]: r["state"] for r in await db.fetch("SELECT * FROM cluster_order_intents")}
        assert intents == {
            cid: "placed",
            action_client_id(refused["alert_id"]): "rejected",
            action_client_id(rejected["alert_id"]): "rejected",
        }
        assert uuid.UUID(placed["alert_id"])
    finally:
        if front is not None:
            await front.stop()
        await workers.close()
        await stop_leaders([leader])


async def _indexed(http: aiohttp.ClientSession, url: str, want: int) -> bool:
    return (await _ready(http, url))["alerts"] == want


@pytest.mark.slow
async def test_a_worker_killed_while_its_action_waits_is_settled_by_another_once(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    """No leader runs when the alert fires, so the firing worker waits for an answer; it is SIGKILLed
    then.  A leader starts and sends the queued intent; a second worker, which never saw the
    firing, settles the action: one order on the exchange, the outcome pushed once."""
    dsn, db = cluster
    token, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES)
    await PgAlertStore(db).subscribe(Subscription(principal="alice"), 0.0)
    wait = {"CHARTGEN_CLUSTER_ORDER_WAIT_S": "60"}  # the worker waits for a leader longer than the test's gap
    env = leader_env(dsn, sim.url, CHARTGEN_INTERVALS="1m", CHARTGEN_CLUSTER_HEARTBEAT_S="0.5", **wait)
    front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}
    workers = Workers(dsn, sim.url, tmp_path, symbols=SYMBOLS, heartbeat_s=0.5, liveness_s=2.0, env=wait)
    front: DaemonProc | None = None
    leaders: list[asyncio.subprocess.Process] = []
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    symbol = SYMBOLS[0]
    try:
        await workers.start(http=True)
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        first = (await until(lambda: workers.settled(db, 1), DEADLINE_S))[f"{symbol} 1m"]
        worker_url = await workers.http_url(0)
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with (
            aiohttp.ClientSession() as http,
            mcp_client(front.mcp_url, token) as client,
            http.get(f"{front.base}/sse", headers=headers) as stream,
        ):
            action = {"place_order": {"side": "buy", "type": "market", "quantity": 40}}
            made = await _set(
                client, {"symbol": symbol, "condition": {"price_above": base[symbol] * 1.01}, "action": action}
            )
            await until(lambda: _indexed(http, worker_url, 1), DEADLINE_S)
            async with http.post(
                f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{base[symbol] * 1.015:.8f}"}
            ) as r:
                assert r.status == 200
            await until(lambda: _pending(db, made["alert_id"]), DEADLINE_S)  # fired; its intent queued
            workers.kill(first)

            leaders.append(await start_leader(env))
            await until(lambda: lease_holder(db), DEADLINE_S)
            await workers.start(http=True)  # never saw the firing: settles it from PostgreSQL
            frames = await _frames(stream, 1)
            done = frames[made["alert_id"]]["action"]
            cid = action_client_id(made["alert_id"])
            assert done["order_id"] == cid and done["status"] == "Filled", done
            assert [o.client_order_id for o in sim.exchange.account.orders.values()] == [cid]
        state = await db.fetchval("SELECT state FROM alert_actions WHERE alert_id = $1", made["alert_id"])
        frames_queued = await db.fetchval("SELECT COUNT(*) FROM push_queue WHERE alert_id = $1", made["alert_id"])
        assert (state, frames_queued) == ("done", 1)
    finally:
        if front is not None:
            await front.stop()
        await workers.close()
        await stop_leaders(leaders)


async def _pending(db: PostgresDatabase, alert_id: str) -> bool:
    state = await db.fetchval("SELECT state FROM alert_actions WHERE alert_id = $1", alert_id)
    return state == "pending"
