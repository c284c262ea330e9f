"""A cluster on ``bus = "nats"`` rides out NATS stopped for ``OUTAGE_S`` (30 s, the acceptance's;
``CHARTGEN_TEST_NATS_OUTAGE_S`` shortens it locally): one worker and two fronts (subprocesses) on a
real PostgreSQL and a real nats-server, the exchange simulator on the real clock, the MCP SDK client.

- Before: alice's notification stream is open at front B and bob's at front A; an alert each, set
  through the other front, fires and its frame arrives by the worker's NATS announcement.
- NATS stopped: the worker and both fronts report themselves not ready naming NATS (``/readyz`` 503);
  setting alerts through either front still works (nothing a client writes goes through NATS), the
  worker indexes them (PostgreSQL's ``NOTIFY``) and fires them when prices cross; the firings are
  in PostgreSQL (the poll queue answers them during the outage).
- NATS back (same port and store): every role is ready again by itself, the worker has no
  announcement pending, and an alert fired afterwards arrives too.  Each stream received every
  frame of its principal exactly once, in sequence order — none lost, none doubled.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from alerts import PgAlertStore, Subscription
from mcp_bridge import ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, mcp_client, start_fronts
from testkit.nats import NatsServer, nats_env
from testkit.workers import Workers, next_alert_frame, real_clock_simulator, until

pytestmark = [pytest.mark.slow, pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["NB0USDT", "NB1USDT"]
OUTAGE_S = float(os.environ.get("CHARTGEN_TEST_NATS_OUTAGE_S", "30"))
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


class Stream:
    """One principal's SSE stream at a front, read in the background: (SSE id, alert id) in arrival order."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.frames: list[tuple[int, str]] = []
        self._task = asyncio.create_task(self._read(response))

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        while True:
            self.frames.append(await next_alert_frame(response, timeout_s=3600))

    async def has(self, alert_ids: set[str]) -> bool:
        if self._task.done():
            self._task.result()  # the stream ended or broke: say why
        return alert_ids <= {a for _, a in self.frames}

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def _ready(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{url}/readyz") as r:
        return r.status, await r.json()


async def _names_nats(http: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    status, body = await _ready(http, url)
    return body if status == 503 and any("NATS" in reason for reason in body["reasons"]) else None


async def _is_ready(http: aiohttp.ClientSession, url: str) -> bool:
    return (await _ready(http, url))[0] == 200


async def _indexed(http: aiohttp.ClientSession, worker_url: str, want: int) -> bool:
    return (await _ready(http, worker_url))[1]["alerts"] == want


async def _set(client: Client, symbol: str, level: float) -> str:
    result = await client.call_tool("set_alert", {"symbol": symbol, "condition": {"price_above": level}})
    assert not result.is_error, result.content[0].text
    return str(json.loads(result.content[0].text)["alert_id"])


async def _price(http: aiohttp.ClientSession, sim: Any, symbol: str, price: float) -> None:
    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{price:.8f}"}) as r:
        assert r.status == 200, await r.text()


async def test_a_nats_outage_degrades_the_roles_loses_no_notification_and_heals(
    sim: Any, nats_server: NatsServer, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    bus_env = nats_env(nats_server.url)
    now = time.time()
    tokens = {}
    for principal in ("alice", "bob"):
        tokens[principal], _ = await PgTokenStore(db).create(principal, principal=principal, scopes=ALL_SCOPES)
        await PgAlertStore(db).subscribe(Subscription(principal=principal), now)
    front_env = {
        "CHARTGEN_POSTGRES_DSN": dsn,
        "CHARTGEN_BINANCE_REST_URL": sim.url,
        "CHARTGEN_INTERVALS": "1m",
        "CHARTGEN_CLUSTER_HEARTBEAT_S": "0.5",
        "CHARTGEN_CLUSTER_LIVENESS_S": "2",
        "CHARTGEN_LOG_FORMAT": "json",
        **bus_env,
    }
    workers = Workers(dsn, sim.url, tmp_path, symbols=SYMBOLS, heartbeat_s=0.5, liveness_s=2.0, env=bus_env)
    fronts: list[DaemonProc] = []
    streams: list[Stream] = []
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    try:
        await workers.start(http=True)
        await start_fronts(fronts, 2, front_env)
        await until(lambda: workers.settled(db, 1), DEADLINE_S)
        worker_url = await workers.http_url(0)
        a, b = fronts
        urls = [worker_url, a.base, b.base]
        sse = {"Accept": "text/event-stream"}
        async with (
            aiohttp.ClientSession() as http,
            mcp_client(a.mcp_url, tokens["alice"]) as alice_at_a,
            mcp_client(b.mcp_url, tokens["bob"]) as bob_at_b,
            http.get(f"{b.base}/sse", headers={**sse, "Authorization": f"Bearer {tokens['alice']}"}) as alice_sse,
            http.get(f"{a.base}/sse", headers={**sse, "Authorization": f"Bearer {tokens['bob']}"}) as bob_sse,
        ):
            assert alice_sse.status == 200 and bob_sse.status == 200
            alice, bob = Stream(alice_sse), Stream(bob_sse)
            streams += [alice, bob]
            for url in urls:
                await until(lambda url=url: _is_ready(http, url), DEADLINE_S)
            assert (await _ready(http, worker_url))[1]["bus_connected"] is True

            # before: one alert each, set through the front that does not hold the principal's stream
            levels = {s: base[s] for s in SYMBOLS}
            want: dict[str, list[str]] = {"alice": [], "bob": []}

            async def fire_round() -> None:
                """Arm one alert per principal 1 % above the price, then cross both."""
                for s in SYMBOLS:
                    levels[s] *= 1.01
                want["alice"].append(await _set(alice_at_a, SYMBOLS[0], levels[SYMBOLS[0]]))
                want["bob"].append(await _set(bob_at_b, SYMBOLS[1], levels[SYMBOLS[1]]))
                await until(lambda: _indexed(http, worker_url, 2), DEADLINE_S)
                for s in SYMBOLS:
                    await _price(http, sim, s, levels[s] * 1.004)
                await until(lambda: _indexed(http, worker_url, 0), DEADLINE_S)  # both fired (and left the books)

            await fire_round()
            await until(lambda: alice.has(set(want["alice"])), DEADLINE_S)
            await until(lambda: bob.has(set(want["bob"])), DEADLINE_S)

            await nats_server.stop()
            stopped = time.monotonic()
            for url in urls:
                body = await until(lambda url=url: _names_nats(http, url), DEADLINE_S)
                assert any("NATS unavailable" in reason for reason in body["reasons"]), body
            # writes go on: alerts set through either front, indexed and fired by the worker
            for _ in range(2):
                await fire_round()
            polled = await alice_at_a.call_tool("get_notifications", {})
            assert {n["alert_id"] for n in json.loads(polled.content[0].text)} == set(want["alice"])
            worker_body = (await _ready(http, worker_url))[1]
            assert worker_body["bus_connected"] is False
            await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the outage is the scenario

            await nats_server.start()
            for url in urls:
                await until(lambda url=url: _is_ready(http, url), DEADLINE_S)
            worker_body = (await _ready(http, worker_url))[1]
            assert worker_body["announcements_pending"] == 0 and worker_body["bus_connected"] is True
            await fire_round()
            await until(lambda: alice.has(set(want["alice"])), DEADLINE_S)
            await until(lambda: bob.has(set(want["bob"])), DEADLINE_S)

            for stream, principal in ((alice, "alice"), (bob, "bob")):
                ids = [alert for _, alert in stream.frames]
                seqs = [seq for seq, _ in stream.frames]
                assert sorted(ids) == sorted(want[principal]), f"{principal}: lost or doubled frames"
                assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"{principal}: out of order"
            fired = {r["alert_id"] for r in await db.fetch("SELECT alert_id FROM alert_events WHERE outcome = 'fired'")}
            assert fired == set(want["alice"]) | set(want["bob"])
        log = (tmp_path / "worker-0.log").read_text()
        assert '"push_announce_failed"' in log and '"push_announce_recovered"' in log
    finally:
        for stream in streams:
            await stream.close()
        for front in fronts:
            await front.stop()
        await workers.close()
