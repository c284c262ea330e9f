"""kill -9 the daemon at 20 random moments while 1,000 alerts fire during a price sweep.

The simulator runs in this test process (it survives the kills); the daemon is a
subprocess pointed at it.  In the end every alert fired exactly once: none is left, the
poll queue holds each alert id exactly once, the audit table agrees, and trades.log names
every alert.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from simulator import RunningSimulator, start_simulator
from testkit.daemon_proc import DaemonProc, create_token, mcp_client
from testkit.sim_daemon import post_price, sim_env, start_on_sim, tool_json

ALERTS = 1000
KILLS = 20
BASE = 70_000.0
STEP = 5.0

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(360)]


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", symbols=["BTCUSDT"])
    try:
        yield running
    finally:
        await running.close()


def _env(sim: RunningSimulator) -> dict[str, str]:
    return sim_env(sim, CHARTGEN_ALERTS_MAX_PER_CLIENT="5000")


async def _start(sim: RunningSimulator, data_dir: Path) -> DaemonProc:
    return await start_on_sim(sim, data_dir, _env(sim))


_price = post_price
_tool = tool_json


async def test_kill_9_during_firing_neither_loses_nor_doubles_an_alert(sim: RunningSimulator, tmp_path: Path) -> None:
    """20 kill -9s during a 1,000-alert sweep: every alert fires exactly once and is delivered."""
    rng = random.Random(20261123)
    token = await create_token(tmp_path, "crash-test")
    levels = [BASE + STEP * (i + 1) for i in range(ALERTS)]
    async with aiohttp.ClientSession() as http:
        await _price(http, sim, BASE)
        daemon = await _start(sim, tmp_path)
        try:

            async def set_some(chunk: list[float]) -> None:
                async with mcp_client(daemon.mcp_url, token) as client:
                    for level in chunk:
                        await _tool(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": level}})

            async with asyncio.TaskGroup() as tg:
                for k in range(4):
                    tg.create_task(set_some(levels[k::4]))
            price = BASE
            for _ in range(KILLS):
                # Sweep upwards; kill -9 at a random moment while trades (and firings) are flowing.
                steps = rng.randint(15, 60)
                kill_after = rng.randint(1, steps - 1)
                for i in range(steps):
                    price = min(price + STEP, levels[-1] + STEP)
                    await _price(http, sim, price)
                    if i == kill_after:
                        await asyncio.sleep(rng.random() * 0.02)  # a random moment, not synchronisation
                        await daemon.kill()
                daemon = await _start(sim, tmp_path)
            # Finish the sweep with the last daemon and wait for every alert to fire.
            while price < levels[-1]:
                price = min(price + STEP * 10, levels[-1] + STEP)
                await _price(http, sim, price)
            async with mcp_client(daemon.mcp_url, token) as client:
                async with asyncio.timeout(60):
                    while await _tool(client, "list_alerts"):
                        await _price(http, sim, price)
                        await asyncio.sleep(0.05)  # waiting for another process, bounded by the timeout
                notes = await _tool(client, "get_notifications")
                assert await _tool(client, "get_notifications") == []
        finally:  # a failure must not leave a daemon running after the test
            await daemon.stop()

    ids = [n["alert_id"] for n in notes]
    assert len(ids) == ALERTS, f"{len(ids)} notifications for {ALERTS} alerts"
    assert len(set(ids)) == ALERTS, "a notification id appears twice"
    thresholds = sorted(n["condition"]["price_above"] for n in notes)
    assert thresholds == levels
    for n in notes:
        assert n["value"] >= n["condition"]["price_above"]

    with sqlite3.connect(tmp_path / "chartgen.db") as db:
        fired = db.execute("SELECT COUNT(*), COUNT(DISTINCT alert_id) FROM alert_events WHERE outcome = 'fired'")
        assert fired.fetchone() == (ALERTS, ALERTS)
        assert db.execute("SELECT COUNT(*) FROM alerts").fetchone() == (0,)
    logged = {
        line.split(" id=")[1].split()[0]
        for line in (tmp_path / "trades.log").read_text().splitlines()
        if " ALERT_TRIGGERED " in line
    }
    assert logged == set(ids)
