"""Scheduled orders on a cluster: schedules in PostgreSQL (brokers/schedules/pg_store.py), created,
listed and cancelled at a front, fired by the holder of the order lease (daemon/leader/schedules.py)
through order intents (cluster/schedule_runs.py).

- two leaders firing the same scheduled time at once record one run and one order intent;
- against ``chartgen leader`` processes and a front (MCP SDK client, real PostgreSQL, the simulator):
  a schedule every 2 s for 6 runs, the leading process SIGKILLed after two runs — the standby takes
  over and the schedule finishes with 6 runs, each scheduled time's order on the exchange at most
  once (by client order id) and every order on the exchange a run of the schedule; another schedule
  cancelled at the front records no run after the cancel.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client

from brokers import Actor, PgScheduleStore, ScheduleService
from cluster.schedule_runs import CHECKED_AT_EACH_RUN, IntentRuns
from mcp_bridge import ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon
from testkit.leaders import leader_env, lease_holder, other_holder, start_leader, stop_leaders
from testkit.workers import pid_of, real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["SC0USDT"]
DEADLINE_S = 90.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def test_two_leaders_firing_the_same_time_record_one_run(cluster: tuple[str, PostgresDatabase]) -> None:
    _, db = cluster
    store = PgScheduleStore(db)
    now = [time.time()]
    services = [ScheduleService(store, None, runs=IntentRuns(store, "main"), clock=lambda: now[0]) for _ in range(2)]
    made = await services[0].create("alice", {"symbol": "BTCUSDT", "side": "buy", "quantity": 0.001, "every": "10s"})
    assert made["warnings"] == [CHECKED_AT_EACH_RUN]
    now[0] += 11  # the first scheduled time is due
    done = await asyncio.gather(*(s.fire(made["schedule_id"]) for s in services))
    assert set(done) <= {"idle", "run"}  # the second finds the time run already (or sees it settled)
    intents = await db.fetch("SELECT client_order_id FROM cluster_order_intents")
    row = await store.get(made["schedule_id"])
    assert row is not None and row.runs_done == 1 and len(intents) == 1
    listed = await services[1].listing(Actor("alice"))
    assert [(x["schedule_id"], x["runs_done"]) for x in listed] == [(made["schedule_id"], 1)]
    assert await services[1].listing(Actor("bob")) == []


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return dict(json.loads(result.content[0].text))


@pytest.mark.slow
async def test_a_schedule_survives_the_leaders_death_with_each_time_run_once(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, db = cluster
    token, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES)
    env = leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S="0.5")
    front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}
    leaders = [await start_leader(env), await start_leader(env)]
    front: DaemonProc | None = None
    try:
        first = await until(lambda: lease_holder(db), DEADLINE_S)
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        async with mcp_client(front.mcp_url, token) as client:
            order = {"symbol": SYMBOLS[0], "side": "buy", "type": "market", "quantity": 40}
            made = await _call(client, "schedule_order", {**order, "every": "2s", "max_runs": 6})
            other = await _call(client, "schedule_order", {**order, "every": "2s"})
            sid = made["schedule_id"]
            await until(lambda: _runs(db, sid, 2), DEADLINE_S)
            assert (await _call(client, "cancel_schedule", {"schedule_id": other["schedule_id"]}))["ok"] is True
            cancelled_at = time.time()

            leading = next(p for p in leaders if p.pid == pid_of(first))
            leading.send_signal(signal.SIGKILL)
            await until(lambda: other_holder(db, first), DEADLINE_S)
            await until(lambda: _finished(db, sid), DEADLINE_S)
            listed = {x["schedule_id"]: x for x in await _list(client)}
            assert (listed[sid]["status"], listed[sid]["runs_done"]) == ("finished", 6)
            assert listed[other["schedule_id"]]["status"] == "cancelled"

        runs = await db.fetch(
            "SELECT client_order_id, state FROM cluster_order_intents WHERE client_order_id LIKE $1", f"cg-{sid}-%"
        )
        assert len(runs) == 6, runs  # one intent per run, each scheduled time once (the id carries it)
        await until(lambda: _answered(db), DEADLINE_S)
        on_exchange = [o.client_order_id for o in sim.exchange.account.orders.values()]
        assert len(on_exchange) == len(set(on_exchange))
        placed = {r["client_order_id"] for r in await db.fetch(
            "SELECT client_order_id FROM cluster_order_intents WHERE state = 'placed'")}  # fmt: skip
        assert set(on_exchange) == placed
        late = [
            r["client_order_id"]
            for r in await db.fetch(
                "SELECT client_order_id FROM cluster_order_intents WHERE client_order_id LIKE $1",
                f"cg-{other['schedule_id']}-%",
            )
            if int(r["client_order_id"].rsplit("-", 1)[1]) > cancelled_at + 1
        ]
        assert late == [], "the cancelled schedule ran after the cancel"
    finally:
        if front is not None:
            await front.stop()
        await stop_leaders([p for p in leaders if p.returncode is None])


async def _runs(db: PostgresDatabase, sid: str, n: int) -> bool:
    return int(await db.fetchval("SELECT runs_done FROM schedules WHERE id = $1", sid) or 0) >= n


async def _finished(db: PostgresDatabase, sid: str) -> bool:
    return await db.fetchval("SELECT status FROM schedules WHERE id = $1", sid) == "finished"


async def _answered(db: PostgresDatabase) -> bool:
    left = await db.fetchval("SELECT COUNT(*) FROM cluster_order_intents WHERE state NOT IN ('placed', 'rejected')")
    return left == 0


async def _list(client: Client) -> list[dict[str, Any]]:
    result = await client.call_tool("list_schedules", {})
    assert not result.is_error, result.content[0].text
    return list(json.loads(result.content[0].text))
