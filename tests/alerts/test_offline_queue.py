"""The offline push queue: kept in SQLite across a restart, delivered in order, capped, replayable."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testkit.daemon_proc import DaemonProc, create_token, mcp_client, start_daemon
from tests.alerts.test_alerts_daemon import SseReader, post_price

pytestmark = pytest.mark.process

ARGS = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]


async def _start(data_dir: Path) -> DaemonProc:
    proc = await start_daemon(ARGS, data_dir=data_dir, env={"CHARTGEN_NOTIFY_QUEUE_CAP": "3"})
    return await proc.wait_ready()


async def _tool(client: Any, name: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _frames(http: aiohttp.ClientSession, daemon: DaemonProc, token: str, n: int, last_id: int | None = None):
    headers = {"Authorization": f"Bearer {token}"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    async with http.get(f"{daemon.base}/mcp", headers=headers) as resp:
        assert resp.status == 200
        reader = SseReader(resp)
        return [await reader.next_frame() for _ in range(n)]


async def test_offline_frames_survive_a_restart_in_order_within_the_cap_and_replay_by_last_event_id(
    tmp_path: Path,
) -> None:
    """5 alerts fire with no stream open and a cap of 3: after a restart a stream gets the newest 3 in order."""
    token = await create_token(tmp_path, "offline")
    levels = [90000.0, 90100.0, 90200.0, 90300.0, 90400.0]
    daemon = await _start(tmp_path)
    try:
        async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, token) as client:
            await _tool(client, "subscribe_notifications", {"alert_types": ["price_above"]})
            ids = [
                (await _tool(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": lv}}))["alert_id"]
                for lv in levels
            ]
            await post_price(http, daemon.sim_url or "", 95000)
            async with asyncio.timeout(30):
                while await _tool(client, "list_alerts"):  # noqa: ASYNC110 - polling another process
                    await asyncio.sleep(0.05)  # polling another process, bounded by the timeout
            subs = await _tool(client, "list_subscriptions")
            assert subs["offline_queue_size"] == 3 and subs["connected"] is False
    finally:
        await daemon.stop()

    daemon = await _start(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            frames = await _frames(http, daemon, token, 3)
            got = [f["params"]["alert_id"] for _, f in frames]
            assert got == ids[2:], "the newest three, in the order the price crossed them"
            seqs = [seq for seq, _ in frames]
            assert seqs == sorted(seqs)
            assert [f["params"]["condition"]["threshold"] for _, f in frames] == levels[2:]

            replay = await _frames(http, daemon, token, 2, last_id=seqs[0])
            assert [seq for seq, _ in replay] == seqs[1:]

            async with mcp_client(daemon.mcp_url, token) as client:
                async with asyncio.timeout(30):
                    while (await _tool(client, "list_subscriptions"))["offline_queue_size"]:  # noqa: ASYNC110 - polling another process
                        await asyncio.sleep(0.05)  # delivery marks are flushed in the background
                # Delivered frames are not sent again to a new stream: the next frame is a new alert's.
                new = await _tool(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 99000}})
                headers = {"Authorization": f"Bearer {token}"}
                async with http.get(f"{daemon.base}/sse", headers=headers) as resp:
                    reader = SseReader(resp)
                    await post_price(http, daemon.sim_url or "", 99500)
                    seq, frame = await reader.next_frame()
                    assert frame["params"]["alert_id"] == new["alert_id"] and seq > seqs[-1]
    finally:
        await daemon.stop()
