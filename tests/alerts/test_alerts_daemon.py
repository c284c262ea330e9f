"""Alerts end to end: `chartgen --serve --trade --sim --clock manual`, the SDK client over HTTP, raw SSE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from mcp_bridge import TOOL_NAMES
from testkit.daemon_proc import DaemonProc, create_token, mcp_client, running_daemon

pytestmark = pytest.mark.process


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    args = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
    async with running_daemon(args, data_dir=tmp_path) as proc:
        yield proc


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def call_error(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.content[0].text
    return result.content[0].text


class SseReader:
    """A raw GET /mcp stream: yields (id, data) frames."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next_frame(self, timeout_s: float = 30.0) -> tuple[int, dict[str, Any]]:
        event: dict[str, str] = {}
        async with asyncio.timeout(timeout_s):
            while True:
                raw = await self.resp.content.readline()
                assert raw, "stream ended"
                line = raw.decode().rstrip("\n")
                if line == "":
                    if "data" in event:
                        return int(event["id"]), json.loads(event["data"])
                    event = {}
                    continue
                if line.startswith(":"):
                    continue
                key, _, value = line.partition(": ")
                event[key] = value


async def post_price(http: aiohttp.ClientSession, sim: str, price: float, symbol: str = "BTCUSDT") -> None:
    async with http.post(f"{sim}/sim/v1/price", json={"symbol": symbol, "price": str(price)}) as r:
        assert r.status == 200, await r.text()


async def test_price_alert_fires_once_to_poll_and_to_a_stream_opened_before_subscribing(daemon: DaemonProc) -> None:
    """set_alert → price crosses → one notification polled, one SSE frame, alert gone; other tokens see nothing."""
    assert daemon.sim_url is not None and daemon.token is not None
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {daemon.token}", "Accept": "text/event-stream"}
        async with http.get(f"{daemon.base}/mcp", headers=headers) as stream_resp:
            assert stream_resp.status == 200
            assert (await stream_resp.content.readline()).startswith(b": connected")
            sse = SseReader(stream_resp)
            async with mcp_client(daemon.mcp_url, daemon.token) as client:
                created = await call(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 90000}})
                alert_id = created["alert_id"]
                listed = await call(client, "list_alerts")
                assert [a["id"] for a in listed] == [alert_id]
                assert listed[0]["interval"] == "1m" and listed[0]["condition"] == {"price_above": 90000.0}
                sub = await call(client, "subscribe_notifications")
                assert sub == {"status": "subscribed", "symbols": None, "alert_types": None}

                await post_price(http, daemon.sim_url, 90500)
                seq, frame = await sse.next_frame()
                assert frame["method"] == "notifications/alert_triggered"
                params = frame["params"]
                assert params["alert_id"] == alert_id and params["interval"] == "1m"
                assert params["condition"] == {"type": "price_above", "threshold": 90000.0}
                assert params["value"] == 90500.0

                polled = await call(client, "get_notifications")
                assert [n["alert_id"] for n in polled] == [alert_id]
                assert polled[0]["interval"] == "1m" and polled[0]["value"] == 90500.0
                assert polled[0]["triggered_at"].endswith("+00:00") and polled[0]["bar_time"] is not None
                assert await call(client, "get_notifications") == []
                assert await call(client, "list_alerts") == []

                # A second alert proves the first produced exactly one frame: the next frame is the new one.
                second = await call(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_below": 80000}})
                await post_price(http, daemon.sim_url, 79000)
                seq2, frame2 = await sse.next_frame()
                assert frame2["params"]["alert_id"] == second["alert_id"] and seq2 > seq
                subs = await call(client, "list_subscriptions")
                assert subs["subscribed"] is True and subs["connected"] is True


async def test_tokens_are_isolated_and_http_requires_a_bearer(daemon: DaemonProc, tmp_path: Path) -> None:
    """Another token sees no alerts, notifications or subscription of the first; no token → 401."""
    assert daemon.sim_url is not None and daemon.token is not None
    other_token = await create_token(tmp_path, "other")  # the daemon's data dir is this test's tmp_path
    async with aiohttp.ClientSession() as http:
        async with mcp_client(daemon.mcp_url, daemon.token) as a, mcp_client(daemon.mcp_url, other_token) as b:
            await call(a, "subscribe_notifications", {"symbols": ["BTCUSDT"]})
            made = await call(a, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 91000}})
            assert await call(b, "list_alerts") == []
            assert await call(b, "list_subscriptions") == {"subscribed": False}
            text = await call_error(b, "cancel_alert", {"alert_id": made["alert_id"]})
            assert "alert not found" in text
            await post_price(http, daemon.sim_url, 91500)
            async with asyncio.timeout(30):
                while not (got := await call(a, "get_notifications")):  # noqa: ASYNC110 - polling another process
                    await asyncio.sleep(0.05)  # the trade travels sim → stream → engine → evaluator
            assert [n["alert_id"] for n in got] == [made["alert_id"]]
            assert await call(b, "get_notifications") == []

        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "list_alerts", "arguments": {}}}
        async with http.post(daemon.mcp_url, json=body) as r:
            assert r.status == 401
            assert (await r.json())["error"] == {"code": -32000, "message": "Missing Authorization header"}
        async with http.post(daemon.mcp_url, json=body, headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401
            assert (await r.json())["error"]["message"] == "Invalid or expired token"
        async with http.get(f"{daemon.base}/sse") as r:
            assert r.status == 401 and await r.text() == "Missing Authorization header"
        listing = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
        async with http.post(daemon.mcp_url, json=listing) as r:
            assert r.status == 200 and len((await r.json())["result"]["tools"]) == len(TOOL_NAMES)


async def _advance(http: aiohttp.ClientSession, sim: str, seconds: int) -> None:
    async with http.post(f"{sim}/sim/v1/advance", json={"seconds": seconds}) as r:
        assert r.status == 200, await r.text()


async def _close_bar_at(http: aiohttp.ClientSession, client: Client, sim: str, price: float) -> int:
    """Trade at ``price`` then close the bar; wait until the engine has updated that window. Returns its time."""
    before = await call(client, "get_indicators", {"symbol": "BTCUSDT", "interval": "1m", "indicators": ["rsi"]})
    await post_price(http, sim, price)
    await _advance(http, sim, 60)
    async with asyncio.timeout(30):
        while True:
            now = await call(client, "get_indicators", {"symbol": "BTCUSDT", "interval": "1m", "indicators": ["rsi"]})
            if now["last_bar_time"] > before["last_bar_time"]:
                return int(now["last_bar_time"])
            await asyncio.sleep(0.05)  # the close travels sim → stream → engine; bounded above


async def _newest_bar_labels(http: aiohttp.ClientSession, sim: str, last_time: int) -> list[str]:
    """Labels heikin_ashi confirms on the newest closed bar, computed here from the simulator's klines."""
    from engine import compute_sync, on_newest_bar, parse_requests, rows_to_bars

    params = {"symbol": "BTCUSDT", "interval": "1m", "limit": "300", "endTime": str(last_time * 1000)}
    async with http.get(f"{sim}/api/v3/klines", params=params) as r:
        bars = rows_to_bars(await r.json())
    assert int(bars.times[-1]) == last_time
    (req,) = parse_requests(["heikin_ashi"])
    return [s.label for s in on_newest_bar(compute_sync(req, bars), bars)]


async def _signals_checked(http: aiohttp.ClientSession, daemon: DaemonProc, bar_time: int) -> None:
    """Wait until the alert evaluator has checked the signals of the bar opened at ``bar_time``."""
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with asyncio.timeout(30):
        while True:
            async with http.get(f"{daemon.base}/status", headers=headers) as r:
                assert r.status == 200
                checked = (await r.json())["alerts"]["signals_checked"]
            if checked.get("BTCUSDT 1m", 0) >= bar_time:
                return
            await asyncio.sleep(0.05)  # bounded by the timeout


async def test_signal_alert_fires_on_the_newest_closed_bar_only(daemon: DaemonProc) -> None:
    """A heikin_ashi flip_up only in older bars does not fire; a flip_up on the newest closed bar does."""
    assert daemon.sim_url is not None and daemon.token is not None
    sim = daemon.sim_url
    async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, daemon.token) as client:
        bad = await call_error(
            client,
            "set_alert",
            {
                "symbol": "BTCUSDT",
                "condition": {"indicator_signal": {"indicator": "heikin_ashi", "signal": "gold_buy"}},
            },
        )
        assert "valid labels: flip_up, flip_down" in bad
        # History: a fall, then a flip up — all before the alert exists.
        for price in (60000, 57000, 54000, 51000, 56000, 60000):
            last = await _close_bar_at(http, client, sim, price)
        cond = {"indicator_signal": {"indicator": "heikin_ashi", "signal": "flip_up"}}
        made = await call(client, "set_alert", {"symbol": "BTCUSDT", "condition": cond, "interval": "1m"})
        last = await _close_bar_at(http, client, sim, 63000)
        assert "flip_up" not in await _newest_bar_labels(http, sim, last)
        await _signals_checked(http, daemon, last)
        assert await call(client, "get_notifications") == []
        assert made["alert_id"] in [a["id"] for a in await call(client, "list_alerts")]

        # Now a fall and a flip up on the newest closed bar.
        for price in (58000, 54000, 50000, 46000):
            await _close_bar_at(http, client, sim, price)
        last = await _close_bar_at(http, client, sim, 56000)
        assert "flip_up" in await _newest_bar_labels(http, sim, last)
        await _signals_checked(http, daemon, last)
        fired = await call(client, "get_notifications")
        assert len(fired) == 1
        assert fired[0]["condition"] == cond and fired[0]["interval"] == "1m"
        from alerts.models import rfc3339

        assert fired[0]["bar_time"] == rfc3339(last)
        assert made["alert_id"] not in [a["id"] for a in await call(client, "list_alerts")]
