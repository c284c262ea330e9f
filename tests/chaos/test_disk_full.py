"""SQLite errors from a full disk, against a real ``chartgen --serve --trade --sim``.

The disk is "filled" for the daemon alone with ``prlimit(RLIMIT_FSIZE)`` on its process: from
then on every write to a regular file at any offset fails (a short write — SQLite's
SQLITE_FULL, "database or disk is full" — or EFBIG, "disk I/O error"), exactly what the
daemon sees when its file system has no space left; lifting the limit is freeing space. Its
log goes through a pipe, as it does to journald.

While the disk is full: every tool call is answered — reads work, writes are refused with a
message that says what happened and that nothing changed; an alert whose price is crossed
cannot commit its firing and stays armed; the daemon stays healthy. When space returns, the
alert fires exactly once at the next tick, writes work again, and after a restart the stored
alerts are exactly the ones whose creation was answered with success.
"""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, LogTail, mcp_client, start_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(180)]

ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m", "--log-level", "debug"]


def fill_disk(pid: int) -> None:
    # the soft limit only: raising it again needs no privilege
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))


def free_disk(pid: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[bool, str]:
    result = await client.call_tool(tool, args or {})
    return bool(result.is_error), result.content[0].text  # type: ignore[union-attr]


async def post_price(http: aiohttp.ClientSession, sim: str, price: float) -> None:
    async with http.post(f"{sim}/sim/v1/price", json={"symbol": "BTCUSDT", "price": str(price)}) as r:
        assert r.status == 200, await r.text()


async def started(data_dir: Path) -> tuple[DaemonProc, LogTail]:
    proc = await start_daemon(ARGS, data_dir=data_dir, stderr_pipe=True)
    assert proc.proc.stderr is not None
    tail = LogTail(proc.proc.stderr)
    await proc.wait_ready()
    return proc, tail


async def test_a_full_disk_refuses_writes_clearly_loses_nothing_and_recovers(tmp_path: Path) -> None:
    daemon, tail = await started(tmp_path)
    answered: set[str] = set()
    try:
        assert daemon.sim_url is not None and daemon.token is not None
        pid = daemon.proc.pid
        async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, daemon.token) as client:
            failed, text = await call(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 95000}})
            assert not failed, text
            armed = json.loads(text)["alert_id"]
            answered.add(armed)

            fill_disk(pid)
            refusals = 0
            for i in range(40):
                failed, text = await call(
                    client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_below": 1000 + i}}
                )
                if failed:
                    refusals += 1
                    assert "could not use its database" in text and "nothing was changed" in text, text
                    assert "Internal error" not in text
                else:
                    answered.add(json.loads(text)["alert_id"])
            assert refusals > 0, "the full disk refused no write: the fault did not take"

            # reads keep working, and the daemon stays up
            failed, text = await call(client, "list_indicators")
            assert not failed, text
            failed, text = await call(client, "list_alerts")
            assert not failed, text
            async with http.get(f"{daemon.base}/healthz") as r:
                assert r.status == 200

            # the price crosses: the firing cannot be committed, so the alert stays armed
            since = len(tail.events)
            await post_price(http, daemon.sim_url, 95500)
            await tail.wait_for("alert_fire_failed", since=since)
            failed, text = await call(client, "get_notifications")
            assert not failed and json.loads(text) == [], text

            free_disk(pid)
            since = len(tail.events)
            await post_price(http, daemon.sim_url, 95600)
            await tail.wait_for("alerts_fired", since=since)
            failed, text = await call(client, "get_notifications")
            fired = json.loads(text)
            assert [n["alert_id"] for n in fired] == [armed], fired
            answered.discard(armed)

            failed, text = await call(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_below": 500}})
            assert not failed, text
            answered.add(json.loads(text)["alert_id"])
            await post_price(http, daemon.sim_url, 95700)
            failed, text = await call(client, "get_notifications")
            assert not failed and json.loads(text) == [], "the alert fired twice"
        assert await daemon.stop() == 0
    finally:
        if daemon.proc.returncode is None:
            await daemon.stop()

    daemon, tail = await started(tmp_path)
    try:
        assert daemon.token is not None
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            failed, text = await call(client, "list_alerts")
            assert not failed, text
            assert {a["id"] for a in json.loads(text)} == answered
    finally:
        await daemon.stop()
