"""Cluster workers ride out a PostgreSQL outage (a private server stopped for
``OUTAGE_S`` and started again on the same port and data):

- each worker reports itself degraded (``/readyz`` 503 naming PostgreSQL) and keeps evaluating;
- a level reached and left again during the outage still fires once PostgreSQL is back: the
  firing waits in memory with its price and time instead of going back to the book;
- the markets stay with their owners across the outage (no worker, first back, takes them all);
- both report ready again by themselves, and the fired set equals the simulator's tape's;
- a front (``chartgen --serve --cluster``) reports itself degraded, answers 503 "Token store
  unavailable" rather than accepting or refusing a token it cannot check, and is ready again by
  itself; a notification stream opened at it before the outage receives the frames of the alerts
  fired once PostgreSQL is back (their ``NOTIFY`` may come before or after its listener is back);
- an order leader (``chartgen leader``) reports itself degraded and is ready again by itself; a
  ``place_order`` through the front after the outage is sent once;
- the notification channel (a webhook every notification goes to, delivered by the worker holding
  the channel lease) gets each alert fired after the outage once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from alerts import Alert, PgAlertStore, Subscription
from daemon import CLUSTER_MIGRATIONS
from mcp_bridge import ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.channel_receivers import Receiver
from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.nginx import free_port
from testkit.workers import Workers, next_alert_frame, owners, real_clock_simulator, until

pytestmark = [pytest.mark.slow, pytest.mark.servers, pytest.mark.process]

SYMBOLS = [f"X{n:02d}USDT" for n in range(6)]
OUTAGE_S = float(os.environ.get("CHARTGEN_TEST_OUTAGE_S", "30"))
"""The acceptance's 30 s by default."""
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def _ready(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{url}/readyz") as r:
        return r.status, await r.json()


async def _post(http: aiohttp.ClientSession, sim: Any, symbol: str, price: float) -> None:
    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{price:.8f}"}) as r:
        assert r.status == 200


@pytest.mark.slow
async def test_workers_ride_out_a_postgres_outage(sim: Any, tmp_path: Path) -> None:
    from testkit.postgres import postgres_server

    own = postgres_server()  # a server of its own: this test stops it
    server = await asyncio.to_thread(own.__enter__)
    workers: Workers | None = None
    db: PostgresDatabase | None = None
    front: DaemonProc | None = None
    leader: asyncio.subprocess.Process | None = None
    receiver: Receiver | None = None
    try:
        dsn = await server.new_database()
        db = await PostgresDatabase.open(dsn, min_size=1, max_size=2)
        await db.migrate(CLUSTER_MIGRATIONS)
        base = {s: float(p) for s, p in sim.exchange.start_prices()}
        now = sim.exchange.now_ms() / 1000
        alerts = [
            Alert(
                id=f"o{uuid.uuid4().hex[:12]}",
                principal="alice",
                symbol=s,
                interval="1m",
                kind="price_above",
                threshold=base[s] * (1 + k / 100),
                created_at=now,
                armed_at=now,
            )
            for s in SYMBOLS
            for k in (2, 4)
        ]
        await PgAlertStore(db).insert_many(alerts)
        await PgAlertStore(db).subscribe(Subscription(principal="alice"), now)
        token, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES)
        front_env = {
            "CHARTGEN_POSTGRES_DSN": dsn,
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_CLUSTER_HEARTBEAT_S": "0.5",
            "CHARTGEN_LOG_FORMAT": "json",
        }
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        leader_port = free_port()
        leader_url = f"http://127.0.0.1:{leader_port}"
        leader = await start_leader(leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S="0.5"), port=leader_port)
        await until(lambda: lease_holder(db), DEADLINE_S)  # type: ignore[arg-type]
        receiver = await Receiver("webhook", clock=time.time).start()
        channels = {"hook": {"kind": "webhook", "url": receiver.url, "secret": "whsec", "allow_private_address": True}}
        workers = Workers(
            dsn,
            sim.url,
            tmp_path,
            symbols=SYMBOLS,
            heartbeat_s=0.5,
            liveness_s=2.0,
            env={"CHARTGEN_CHANNELS": json.dumps(channels), "CHARTGEN_NOTIFY_ALL_CHANNELS": "hook"},
        )
        await workers.start(http=True)
        await workers.start(http=True)
        before = await until(lambda: workers.settled(db, 2), DEADLINE_S)  # type: ignore[union-attr]
        urls = [await workers.http_url(0), await workers.http_url(1)]
        bearer = {"Authorization": f"Bearer {token}"}
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{front.base}/sse", headers={**bearer, "Accept": "text/event-stream"}) as stream,
        ):
            assert stream.status == 200
            assert [(await _ready(http, u))[0] for u in urls] == [200, 200]
            await until(lambda: _is_ready(http, leader_url), DEADLINE_S)

            await asyncio.to_thread(server.stop)
            # both notice: /readyz names PostgreSQL
            for url in urls:
                status, body = await until(lambda url=url: _degraded(http, url), DEADLINE_S)
                assert status == 503 and "PostgreSQL unreachable" in body["reasons"][0]
            status, body = await until(lambda: _front_degraded(http, front), DEADLINE_S)  # type: ignore[arg-type]
            assert "PostgreSQL unreachable" in body["reasons"][0]
            status, body = await until(lambda: _front_degraded(http, leader_url), DEADLINE_S)
            assert "order leader degraded" in body["reasons"][0]
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_alerts"}}
            async with http.post(front.mcp_url, json=call, headers=bearer) as r:
                assert r.status == 503 and "Token store unavailable" in (await r.json())["error"]["message"]
            # reached and left again while PostgreSQL is away: the +2 % alerts of two markets
            for s in SYMBOLS[:2]:
                await _post(http, sim, s, base[s] * 1.03)
            await until(lambda: _pending_somewhere(http, urls, 2), DEADLINE_S)  # the live path saw both
            for s in SYMBOLS[:2]:
                await _post(http, sim, s, base[s])
            await asyncio.sleep(OUTAGE_S)  # the outage's length is the scenario, not a synchronisation

            await asyncio.to_thread(server.start)
            for url in [*urls, front.base, leader_url]:
                await until(lambda url=url: _is_ready(http, url), DEADLINE_S)
            pushed = {(await next_alert_frame(stream))[1] for _ in range(2)}
            order = {
                "symbol": SYMBOLS[1],  # about 2,400 USDT a unit (the seeded start price)
                "side": "buy",
                "type": "market",
                "quantity": 0.01,
                "client_order_id": "after-1",
            }
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "place_order", "arguments": order},
            }
            async with http.post(front.mcp_url, json=call, headers=bearer) as r:
                result = (await r.json())["result"]
            assert not result.get("isError"), result
            assert json.loads(result["content"][0]["text"])["status"] == "Filled"
            assert [o.client_order_id for o in sim.exchange.account.orders.values()] == ["after-1"]
        fired = {r["alert_id"] for r in await db.fetch("SELECT alert_id FROM alert_events WHERE outcome = 'fired'")}
        expected = {a.id for a in alerts if a.symbol in SYMBOLS[:2] and a.threshold <= base[a.symbol] * 1.03}  # type: ignore[operator]
        assert fired == expected
        assert pushed == expected, "the front's stream missed a frame fired after the outage"

        async def hooked() -> list[str] | None:
            got = receiver.delivered_ids()  # digests expanded: the channel's rate coalesces a burst
            return got if set(got) >= expected else None

        assert sorted(await until(hooked, DEADLINE_S)) == sorted(expected), "each delivered once"
        after = await owners(db)
        assert {m: after[m] for m in before} == before, "a market changed owner across the outage"
        for i in range(2):
            log = (tmp_path / f"worker-{i}.log").read_text()
            assert '"worker_degraded"' in log and '"worker_recovered"' in log
            dropped = [ln for ln in log.splitlines() if '"worker_markets_dropped"' in ln]
            assert not dropped, f"worker {i} dropped markets around the outage: {dropped}"
    finally:
        failing = sys.exc_info()[0] is not None
        if front is not None:
            await front.stop()
        if leader is not None:
            await stop_leaders([leader])
        if workers is not None:
            await workers.close()
        if receiver is not None:
            await receiver.close()
        if db is not None:
            await db.close()
        try:  # in a thread, a failing stop would not carry the test's own error as its context
            await asyncio.to_thread(own.__exit__, None, None, None)
        except Exception:
            if not failing:
                raise


async def _degraded(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]] | None:
    status, body = await _ready(http, url)
    return (status, body) if body.get("degraded") else None


async def _front_degraded(http: aiohttp.ClientSession, front: DaemonProc | str) -> tuple[int, dict[str, Any]] | None:
    """A front's (or a leader's, by URL) /readyz once it names PostgreSQL."""
    base = front if isinstance(front, str) else front.base
    async with http.get(f"{base}/readyz") as r:
        body = await r.json()
    degraded = r.status == 503 and any("PostgreSQL unreachable" in reason for reason in body["reasons"])
    return (r.status, body) if degraded else None  # not "push listener not connected": the heartbeat's verdict


async def _pending_somewhere(http: aiohttp.ClientSession, urls: list[str], at_least: int) -> bool:
    """At least ``at_least`` firings wait for PostgreSQL across the workers."""
    total = 0
    for url in urls:
        total += (await _ready(http, url))[1]["pending_firings"]
    return total >= at_least


async def _is_ready(http: aiohttp.ClientSession, url: str) -> bool:
    return (await _ready(http, url))[0] == 200
