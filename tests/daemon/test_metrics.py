"""GET /metrics: Prometheus text from a running daemon; loopback scrapers free, others need a bearer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp.server.lowlevel import Server
from starlette.testclient import TestClient

from mcp_bridge import Caller, build_http_app
from testkit.daemon_proc import DaemonProc, mcp_client, start_daemon


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    proc = await start_daemon(
        ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"], data_dir=tmp_path
    )
    try:
        yield proc
    finally:
        await proc.stop()


def sample(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return None


@pytest.mark.process
async def test_metrics_report_tools_engine_alerts_and_queues(daemon: DaemonProc) -> None:
    assert daemon.token is not None
    async with mcp_client(daemon.mcp_url, daemon.token) as client:
        assert not (await client.call_tool("list_indicators", {})).is_error
        alert = await client.call_tool("set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 1_000_000}})
        assert not alert.is_error, alert.content[0].text
    async with aiohttp.ClientSession() as http, asyncio.timeout(30):
        async with http.get(f"{daemon.base}/metrics") as r:
            assert r.status == 200 and r.headers["content-type"].startswith("text/plain")
            text = await r.text()
    assert sample(text, "chartgen_tool_call_seconds_count", outcome="ok", tool="list_indicators") == 1.0
    assert sample(text, "chartgen_markets_followed") == 1.0
    assert sample(text, "chartgen_symbols_followed") == 1.0
    assert sample(text, "chartgen_alerts_active") == 1.0
    assert sample(text, "chartgen_notification_queue_depth", queue="push") == 0.0
    assert sample(text, "chartgen_stream_messages_total") is not None
    assert sample(text, "chartgen_request_weight_used") is not None


def test_remote_scrapers_need_a_valid_bearer() -> None:
    async def authenticate(token: str) -> Caller | None:
        return Caller("ops", frozenset({"charts"})) if token == "good" else None

    async def metrics() -> bytes:
        return b"chartgen_up 1\n"

    app: Any = build_http_app(Server("t"), authenticate=authenticate, metrics=metrics)
    # a Host the DNS-rebinding check allows (TestClient's default "testserver" is refused with 421)
    with TestClient(app, base_url="http://127.0.0.1:9315", client=("203.0.113.9", 5000)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"authorization": "Bearer bad"}).status_code == 401
        ok = client.get("/metrics", headers={"authorization": "Bearer good"})
        assert ok.status_code == 200 and ok.text == "chartgen_up 1\n"
