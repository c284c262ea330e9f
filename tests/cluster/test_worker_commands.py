"""Commands to the workers over NATS (cluster/bus_commands.py, daemon/worker/bus_commands.py): a
``chartgen worker`` process on ``bus = "nats"`` with a 30 s heartbeat, a real nats-server and
PostgreSQL, the simulator as the exchange.

``chartgen cluster follow`` writes the market to PostgreSQL and sends a command; the worker runs its
heartbeat at once and takes the market (its window then equals the exchange's klines) —
before its first scheduled heartbeat: every run of the heartbeat job so far was one a command asked
for.  ``unfollow`` drops it the same way, and after NATS restarts the worker still gets commands.
Without NATS the CLI still writes the change and says the
workers find it at their next heartbeat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cluster.membership import Membership
from storage import PostgresDatabase
from testkit.nats import NatsServer, nats_env
from testkit.nginx import free_port
from testkit.workers import Workers, real_clock_simulator, until, window_problems
from tests.daemon.test_cli_state_options import chartgen

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["CM0USDT", "CM1USDT"]
HEARTBEAT_S = 30.0
"""The longest heartbeat chartgen allows: the test is over long before the first scheduled one."""


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def _status(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/readyz") as r:
        return dict(await r.json())


async def test_follow_and_unfollow_commands_wake_every_worker_at_once(
    sim: Any, nats_server: NatsServer, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    config = tmp_path / "cluster.toml"
    config.write_text(f'binance_rest_url = "{sim.url}"\nbus = "nats"\nnats_url = "{nats_server.url}"\n')
    cli = ("--config", str(config), "--postgres-dsn", dsn)
    env = nats_env(nats_server.url)
    workers = Workers(dsn, sim.url, tmp_path, symbols=[], heartbeat_s=HEARTBEAT_S, liveness_s=3 * HEARTBEAT_S, env=env)
    # A peer heard from a moment ago, so the worker does not hold back for a liveness window as a
    # worker starting alone does; it leaves once the worker has seen it.
    membership = Membership(db, 3 * HEARTBEAT_S)
    await membership.heartbeat("worker-peer", "worker", bus="nats")
    try:
        await workers.start(http=True)
        url = await workers.http_url(0)
        async with aiohttp.ClientSession() as http:

            async def first_refresh() -> dict[str, Any] | None:
                status = await _status(http, url)
                return status if status["refreshes"] >= 1 and status["commands_subscribed"] else None

            status = await until(first_refresh, 60.0)
            assert (status["markets"], status["heartbeat_runs"], status["commands_received"]) == (0, 0, 0)
            await membership.leave("worker-peer")

            code, out, err = await chartgen("cluster", "follow", "CM0USDT", "-i", "1m", *cli)
            assert code == 0, err
            assert "following 1 markets (1 new); their owners take them now (a command went to every worker" in out

            async def live(n: int) -> dict[str, Any] | None:
                status = await _status(http, url)
                return status if status["live"] == n and status["markets"] == n else None

            status = await until(lambda: live(1), 25.0)
            assert status["commands_received"] == 1
            assert status["last_command"]["name"] == "follow"
            assert status["last_command"]["markets"] == ["CM0USDT 1m"]
            assert status["heartbeat_runs"] == status["heartbeats_requested"] == 1  # none on the schedule
            assert not await window_problems(http, [url], sim.url, ["CM0USDT 1m"])

            code, out, err = await chartgen("cluster", "unfollow", "CM0USDT", "-i", "1m", *cli)
            assert code == 0 and "unfollowed 1 of 1 markets, dropped now (a command went" in out, err
            status = await until(lambda: live(0), 25.0)
            assert status["commands_received"] == 2 and status["last_command"]["name"] == "unfollow"
            assert status["heartbeat_runs"] == status["heartbeats_requested"] == 2
            async with http.get(f"{url}/metrics") as r:
                assert "chartgen_worker_commands_total 2.0" in await r.text()

            # NATS restarted: the worker's subscription is renewed with the connection
            await nats_server.stop()
            await nats_server.start()

            async def resubscribed() -> bool:
                return bool((await _status(http, url))["commands_subscribed"])

            await until(resubscribed, 30.0)
            code, out, err = await chartgen("cluster", "follow", "CM1USDT", "-i", "1m", *cli)
            assert code == 0 and "take them now" in out, err
            status = await until(lambda: live(1), 25.0)
            assert status["commands_received"] == 3 and status["last_command"]["markets"] == ["CM1USDT 1m"]
    finally:
        await workers.close()

    # NATS unreachable: the change is written all the same, and the CLI says when it takes effect
    config.write_text(f'binance_rest_url = "{sim.url}"\nbus = "nats"\nnats_url = "nats://127.0.0.1:{free_port()}"\n')
    code, out, err = await chartgen("cluster", "follow", "CM0USDT", "-i", "1m", *cli)
    assert code == 0, err
    assert "their owners take them within a heartbeat (the command to the workers was not sent:" in out
    assert "nats_url" in out
    followed = await db.fetch("SELECT symbol FROM cluster_followed ORDER BY symbol")
    assert [r["symbol"] for r in followed] == ["CM0USDT", "CM1USDT"]
