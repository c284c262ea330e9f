"""Markets the operator has the cluster follow (cluster/followed.py, ``chartgen cluster follow``): two
``chartgen worker`` processes configured with no symbols at all, a real PostgreSQL, the simulator.

``chartgen cluster follow`` refuses a symbol the exchange does not list (naming the closest) and an
interval Binance does not have, writing nothing; a followed market is taken by its rendezvous owner
within a heartbeat — without any worker's settings naming it — and its window equals the exchange's
klines; ``chartgen cluster status`` lists it; ``unfollow`` drops it from every worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cluster.membership import owner_of
from storage import PostgresDatabase
from testkit.workers import Workers, real_clock_simulator, until, window_problems
from tests.daemon.test_cli_state_options import chartgen

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["FO0USDT", "FO1USDT", "FO2USDT"]
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def test_followed_markets_are_taken_by_their_owner_and_dropped_when_unfollowed(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    config = tmp_path / "cluster.toml"
    config.write_text(f'binance_rest_url = "{sim.url}"\n')
    cli = ("--config", str(config), "--postgres-dsn", dsn)

    code, _, err = await chartgen("cluster", "follow", "FO0USDTX", "-i", "1m", *cli)
    assert code == 2 and "FO0USDTX" in err and "did you mean FO0USDT" in err
    code, _, err = await chartgen("cluster", "follow", "FO0USDT", "-i", "7m", *cli)
    assert code == 2 and "'7m' is not a Binance interval" in err
    assert await db.fetchval("SELECT COUNT(*) FROM cluster_followed") == 0

    workers = Workers(dsn, sim.url, tmp_path, symbols=[], heartbeat_s=0.5, liveness_s=2.0)
    try:
        await workers.start(http=True)
        await workers.start(http=True)
        code, out, err = await chartgen("cluster", "follow", "FO0USDT", "fo1usdt", "-i", "1m", *cli)
        assert code == 0 and "following 2 markets (2 new)" in out, err
        followed = ["FO0USDT 1m", "FO1USDT 1m"]
        workers.markets = followed

        async def taken() -> dict[str, str] | None:
            return await workers.settled(db, 2)

        marks = await until(taken, DEADLINE_S)
        live = await workers.live(db)
        assert {m: marks[m] for m in followed} == {m: owner_of(m, live) for m in followed}
        async with aiohttp.ClientSession() as http:
            problems = await window_problems(http, await workers.live_urls(), sim.url, followed)
        assert not problems, problems[:5]

        code, out, err = await chartgen("cluster", "status", *cli)
        assert code == 0 and "markets the operator follows (chartgen cluster follow): 2" in out, err
        code, out, err = await chartgen("cluster", "followed", *cli)
        assert out.split("\n")[:2] == followed, err

        code, out, err = await chartgen("cluster", "unfollow", "FO0USDT", "-i", "1m", *cli)
        assert code == 0 and "unfollowed 1 of 1 markets" in out, err

        async def dropped() -> bool:  # no worker holds FO0USDT's window any more
            return "FO0USDT 1m" not in await _followed_by_workers(workers)

        assert await until(dropped, DEADLINE_S)
        assert "FO1USDT 1m" in await _followed_by_workers(workers)
    finally:
        await workers.close()


async def _followed_by_workers(workers: Workers) -> set[str]:
    """The markets some worker holds a window of (``/window`` answers 404 for a market it does not hold)."""
    held: set[str] = set()
    async with aiohttp.ClientSession() as http:
        for url in await workers.live_urls():
            for market in ("FO0USDT 1m", "FO1USDT 1m"):
                async with http.get(f"{url}/window", params={"market": market}) as r:
                    if r.status == 200:
                        held.add(market)
    return held
