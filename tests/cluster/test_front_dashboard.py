"""The operator's dashboard at cluster fronts (daemon/front/dashboard.py): two ``chartgen --serve
--cluster`` fronts, a worker and an order leader on a real PostgreSQL, the simulator as the exchange.

A session signed in at one front (the passphrase set by ``chartgen passphrase set --cluster``) is a
session at the other; the markets page lists the workers' markets with their owner; an alert set
from one front's page is listed at the other, fired by the worker, announced live on the other
front's open event stream (``notifications``) and listed with its marker on the chart; on
``bus = "nats"`` the workers' ticks reach the open page as ``tick`` events (on ``local``, none);
the orders page shows the leader's mirror of the account (balances, the fills of an order placed
through MCP); a session revoked at one front is refused at the other on its next request.

A sign-in a guesser cannot block (issue 36 §4), across fronts: the device cookie issued at one front
gets the operator in at the other while guessers spend that front's global budget (the signing key
is the database's); ``chartgen dashboard link --cluster`` signs in at any front, once; and
``chartgen passphrase set --cluster`` ends the sessions and device cookies at every front.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from dashboard import COOKIE, DEVICE_COOKIE
from mcp_bridge import ADMIN, ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, clean_env, mcp_client, start_fronts
from testkit.leaders import leader_env, lease_holder, start_leader, stop_leaders
from testkit.nats import NatsServer, nats_env
from testkit.workers import Workers, real_clock_simulator, until
from tests.cluster.test_front import worker_alerts
from tests.cluster.test_front_oauth import set_cluster_passphrase, start_front
from tests.daemon.test_cli_state_options import chartgen
from tests.dashboard.test_dashboard_access import csrf_of, sign_in
from tests.dashboard.test_dashboard_sign_in import NEW_PASSPHRASE, from_address, spend_the_global_budget

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.timeout(240)]

SYMBOL = "FD0USDT"
HEARTBEAT_S, LIVENESS_S = 0.5, 2.0
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else await r.text())


async def _next_event(stream: aiohttp.ClientResponse, name: str, timeout_s: float = DEADLINE_S) -> list[str]:
    """Read ``stream`` up to event ``name``: the data of every event on the way, by name."""
    seen: list[str] = []
    async with asyncio.timeout(timeout_s):
        event = ""
        async for raw in stream.content:
            line = raw.decode().strip()
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
                if event == name:
                    return seen
            elif line.startswith("data: ") and event:
                seen.append(f"{event} {line.removeprefix('data: ')}")
    return seen


async def test_the_dashboard_at_two_fronts_shares_sessions_and_shows_the_cluster(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    await _dashboard_at_two_fronts(sim, cluster, tmp_path, "local", {})


async def test_on_nats_the_dashboard_at_a_front_shows_the_workers_ticks_live(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path, nats_server: NatsServer
) -> None:
    await _dashboard_at_two_fronts(sim, cluster, tmp_path, "nats", nats_env(nats_server.url))


async def _dashboard_at_two_fronts(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path, bus: str, bus_env: dict[str, str]
) -> None:
    dsn, db = cluster
    await set_cluster_passphrase(dsn)
    alice, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES - {ADMIN})
    env = leader_env(dsn, sim.url, CHARTGEN_CLUSTER_HEARTBEAT_S=str(HEARTBEAT_S))
    front_env = {k: v for k, v in env.items() if not k.startswith("BINANCE_")}
    front_env |= {"CHARTGEN_SYMBOLS": SYMBOL, "CHARTGEN_INTERVALS": "1m"}
    front_env |= {"CHARTGEN_CLUSTER_LIVENESS_S": str(LIVENESS_S), **bus_env}
    workers = Workers(
        dsn, sim.url, tmp_path, symbols=[SYMBOL], heartbeat_s=HEARTBEAT_S, liveness_s=LIVENESS_S, env=bus_env
    )
    leader = await start_leader(env)
    fronts: list[DaemonProc] = []
    try:
        await workers.start(http=True)
        await start_fronts(fronts, 2, front_env)
        await until(lambda: workers.settled(db, 1), DEADLINE_S)
        await until(lambda: lease_holder(db), DEADLINE_S)
        worker_url = await workers.http_url(0)
        a, b = fronts
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as at_a:
            assert (await sign_in(at_a, a.base)).status == 303
            secret = next(c.value for c in jar if c.key == COOKIE)
            csrf = await csrf_of(at_a, a.base)
            async with aiohttp.ClientSession(headers={"Cookie": f"{COOKIE}={secret}"}) as at_b:
                # one session, both fronts
                status, overview = await _get(at_b, f"{b.base}/ui/api/overview")
                assert status == 200, overview

                async def ready() -> dict[str, Any] | None:
                    _, body = await _get(at_b, f"{b.base}/ui/api/overview")
                    market = next((m for m in body["markets"] if m["symbol"] == SYMBOL), None)
                    return market if market is not None and market["ready"] else None

                market = await until(ready, DEADLINE_S, every_s=0.2)
                assert market["interval"] == "1m" and market["live"] and market["worker"] in await workers.live(db)
                status, health = await _get(at_a, f"{a.base}/ui/api/health")
                assert status == 200 and [m["symbol"] for m in health["engine"]["markets"]] == [SYMBOL]

                # an alert set from A's page, listed at B, fired by the worker, announced on B's stream
                base = float(dict(sim.exchange.start_prices())[SYMBOL])
                level = round(base * 1.02, 4)
                body = {"symbol": SYMBOL, "condition": {"price_above": level}, "note": "dash"}
                async with at_a.post(f"{a.base}/ui/api/alerts", json=body, headers={"X-CSRF-Token": csrf}) as r:
                    assert r.status == 201, await r.text()
                    alert_id = (await r.json())["alert"]["id"]
                _, listed = await _get(at_b, f"{b.base}/ui/api/alerts")
                assert [(x["id"], x["principal"]) for x in listed["alerts"]] == [(alert_id, "operator")]
                async with at_b.get(f"{b.base}/ui/events") as stream:
                    await _next_event(stream, "hello")

                    await until(lambda: worker_alerts(at_a, worker_url, 1), DEADLINE_S)  # indexed by its owner
                    async with at_a.post(
                        f"{sim.url}/sim/v1/price", json={"symbol": SYMBOL, "price": f"{level * 1.01:.8f}"}
                    ) as r:
                        assert r.status == 200

                    async def fired() -> list[str] | None:
                        _, body = await _get(at_a, f"{a.base}/ui/api/notifications")
                        return [n["alert_id"] for n in body["notifications"]] or None

                    assert await until(fired, DEADLINE_S, every_s=0.2) == [alert_id]
                    before = await _next_event(stream, "notifications")
                    ticks = [json.loads(x.removeprefix("tick ")) for x in before if x.startswith("tick ")]
                    if bus == "nats":  # the workers' ticks, live: the crossing price among them
                        assert {(t["symbol"], t["interval"]) for t in ticks} == {(SYMBOL, "1m")}
                        assert any(t["price"] >= level for t in ticks), ticks
                    else:
                        assert ticks == []
                status, chart = await _get(at_a, f"{a.base}/ui/api/chart?symbol={SYMBOL}&interval=1m&bars=50")
                assert status == 200 and chart["bars"], chart
                assert [m["kind"] for m in chart["markers"]] == ["alert"]

                # the orders page: the leader's mirror, with an order placed through MCP
                async with mcp_client(b.mcp_url, alice) as client:
                    result = await client.call_tool(
                        "place_order", {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": 1}
                    )
                    assert not result.is_error, result.content[0].text
                    order_id = json.loads(result.content[0].text)["order_id"]

                async def mirrored() -> dict[str, Any] | None:
                    _, page = await _get(at_b, f"{b.base}/ui/api/orders")
                    return page if any(f["order_id"] == order_id for f in page["fills"]) else None

                page = await until(mirrored, DEADLINE_S, every_s=0.5)
                assert "error" not in page and {x["asset"] for x in page["balances"]} >= {"USDT"}
                assert [p["symbol"] for p in page["positions"]] == [SYMBOL]

                # revoked at B: refused at A on the next request
                _, access = await _get(at_b, f"{b.base}/ui/api/access")
                (mine,) = access["sessions"]
                async with at_b.delete(f"{b.base}/ui/api/sessions/{mine['id']}", headers={"X-CSRF-Token": csrf}) as r:
                    assert r.status == 200, await r.text()
                status, _ = await _get(at_a, f"{a.base}/ui/api/overview")
                assert status == 401
    finally:
        for front in fronts:
            await front.stop()
        await stop_leaders([leader])
        await workers.close()


async def _cluster_passphrase(dsn: str, passphrase: str) -> None:
    """``chartgen passphrase set --cluster`` with ``passphrase`` on stdin."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "passphrase", "--cluster", "set",
        env=clean_env({"CHARTGEN_POSTGRES_DSN": dsn}),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate((passphrase + "\n").encode())
    assert proc.returncode == 0, err.decode()


async def test_a_sign_in_at_one_front_cannot_be_blocked_at_another(
    sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    dsn, _ = cluster
    await set_cluster_passphrase(dsn)
    fronts: list[DaemonProc] = []
    try:
        for _ in range(2):
            fronts.append(await start_front(dsn, sim))
        a, b = fronts
        jar = aiohttp.CookieJar(unsafe=True)
        async with from_address("127.0.0.1", jar) as operator:
            assert (await sign_in(operator, a.base)).status == 303
            device = next(c.value for c in jar if c.key == DEVICE_COOKIE)
        await spend_the_global_budget(b.base)  # B's own budget (each front counts its own)
        async with from_address("127.0.0.31") as stranger:
            assert (await sign_in(stranger, b.base)).status == 429
        jar_b = aiohttp.CookieJar(unsafe=True)
        async with from_address("127.0.0.1", jar_b) as operator:
            operator.cookie_jar.update_cookies({DEVICE_COOKIE: device}, response_url=URL(b.base))
            assert (await sign_in(operator, b.base)).status == 303, "A's device cookie must hold at B"
            status, _ = await _get(operator, f"{b.base}/ui/api/access")
            assert status == 200

        # a link made on the command line signs in at any front, once
        code, out, err = await chartgen("dashboard", "link", "--cluster", "--postgres-dsn", dsn, "--url", b.base)
        assert code == 0, err
        token = out.strip().split("token=", 1)[1]
        async with from_address("127.0.0.1") as browser:
            async with browser.get(f"{b.base}/ui/link?token={token}", allow_redirects=False) as r:
                assert r.status == 303 and DEVICE_COOKIE in r.cookies
            status, _ = await _get(browser, f"{a.base}/ui/api/access")
            assert status == 200  # the link's session holds at A too
            async with browser.get(f"{a.base}/ui/link?token={token}", allow_redirects=False) as r:
                assert r.status == 400

        # a new passphrase ends the sessions and device cookies at every front
        await _cluster_passphrase(dsn, NEW_PASSPHRASE)
        async with aiohttp.ClientSession(cookie_jar=jar_b) as operator:
            for front in (a, b):
                async with operator.get(f"{front.base}/ui/api/access") as r:
                    assert r.status == 401, front.base
            await spend_the_global_budget(b.base, first=40)
            assert (await sign_in(operator, b.base, NEW_PASSPHRASE)).status == 429  # its device cookie is void
    finally:
        for front in fronts:
            await front.stop()
