"""Cluster workers ride out a PostgreSQL outage (a private server stopped for
``OUTAGE_S`` and started again on the same port and data):

- each worker reports itself degraded (``/readyz`` 503 naming PostgreSQL) and keeps evaluating;
- a level reached and left again during the outage still fires once PostgreSQL is back: the
  firing waits in memory with its price and time instead of going back to the book;
- the markets stay with their owners across the outage (no worker, first back, takes them all);
- both report ready again by themselves, and the fired set equals the simulator's tape's.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from alerts.models import Alert
from alerts.pg_store import PgAlertStore
from config.postgres import PostgresDatabase
from daemon.cluster_command import CLUSTER_MIGRATIONS
from tests.support.workers import Workers, owners, real_clock_simulator, until

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
    from tests.support.postgres import postgres_server

    own = postgres_server()  # a server of its own: this test stops it
    server = await asyncio.to_thread(own.__enter__)
    workers: Workers | None = None
    db: PostgresDatabase | None = None
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
        workers = Workers(dsn, sim.url, tmp_path, symbols=SYMBOLS, heartbeat_s=0.5, liveness_s=2.0)
        await workers.start(http=True)
        await workers.start(http=True)
        before = await until(lambda: workers.settled(db, 2), DEADLINE_S)  # type: ignore[union-attr]
        urls = [await workers.http_url(0), await workers.http_url(1)]
        async with aiohttp.ClientSession() as http:
            assert [(await _ready(http, u))[0] for u in urls] == [200, 200]

            await asyncio.to_thread(server.stop)
            # both notice: /readyz names PostgreSQL
            for url in urls:
                status, body = await until(lambda url=url: _degraded(http, url), DEADLINE_S)
                assert status == 503 and "PostgreSQL unreachable" in body["reasons"][0]
            # reached and left again while PostgreSQL is away: the +2 % alerts of two markets
            for s in SYMBOLS[:2]:
                await _post(http, sim, s, base[s] * 1.03)
            await until(lambda: _pending_somewhere(http, urls, 2), DEADLINE_S)  # the live path saw both
            for s in SYMBOLS[:2]:
                await _post(http, sim, s, base[s])
            await asyncio.sleep(OUTAGE_S)  # the outage's length is the scenario, not a synchronisation

            await asyncio.to_thread(server.start)
            for url in urls:
                await until(lambda url=url: _is_ready(http, url), DEADLINE_S)
        fired = {r["alert_id"] for r in await db.fetch("SELECT alert_id FROM alert_events WHERE outcome = 'fired'")}
        expected = {a.id for a in alerts if a.symbol in SYMBOLS[:2] and a.threshold <= base[a.symbol] * 1.03}  # type: ignore[operator]
        assert fired == expected
        after = await owners(db)
        assert {m: after[m] for m in before} == before, "a market changed owner across the outage"
        for i in range(2):
            log = (tmp_path / f"worker-{i}.log").read_text()
            assert '"worker_degraded"' in log and '"worker_recovered"' in log
            dropped = [ln for ln in log.splitlines() if '"worker_markets_dropped"' in ln]
            assert not dropped, f"worker {i} dropped markets around the outage: {dropped}"
    finally:
        if workers is not None:
            await workers.close()
        if db is not None:
            await db.close()
        await asyncio.to_thread(own.__exit__, None, None, None)


async def _degraded(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]] | None:
    status, body = await _ready(http, url)
    return (status, body) if body.get("degraded") else None


async def _pending_somewhere(http: aiohttp.ClientSession, urls: list[str], at_least: int) -> bool:
    """At least ``at_least`` firings wait for PostgreSQL across the workers."""
    total = 0
    for url in urls:
        total += (await _ready(http, url))[1]["pending_firings"]
    return total >= at_least


async def _is_ready(http: aiohttp.ClientSession, url: str) -> bool:
    return (await _ready(http, url))[0] == 200
