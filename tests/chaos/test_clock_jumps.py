"""Clock jumps, against a real ``chartgen --serve --trade --sim --clock manual``.

- The exchange's clock leaps three days ahead in one step (a VM resumed after a suspend, a
  daemon whose host slept): the engine refills the gap, its newest bar is the exchange's
  newest closed bar, every request signed with our old idea of the time is resynced (-1021)
  instead of failing, and a price alert armed before the jump fires exactly once.
- Our clock steps an hour ahead of and an hour behind the exchange (an NTP step): orders are
  still signed with the exchange's time and go through once each.

The daemon's own timers (supervisor backoff, stream stall detection, ban waits) run on the
monotonic clock, which an NTP step does not move, and the weight-budget wait is bounded by
one minute whatever the wall clock does (``tests/engine`` covers that unit by itself).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from testkit.daemon_proc import DaemonProc, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(240)]

THREE_DAYS_S = 3 * 86400
INDICATORS = {"symbol": "BTCUSDT", "interval": "1m", "indicators": ["rsi"]}


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    args = ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"]
    async with running_daemon(args, data_dir=tmp_path) as proc:
        yield proc


async def tool(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(name, args or {})
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, f"{name}: {text}"
    return json.loads(text)


async def control(http: aiohttp.ClientSession, sim: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(f"{sim}/sim/v1/{path}", json=body) as r:
        assert r.status == 200, await r.text()
        answer: dict[str, Any] = await r.json()
        return answer


async def test_an_exchange_clock_leap_and_our_clock_stepping_both_ways(daemon: DaemonProc) -> None:
    assert daemon.sim_url is not None and daemon.token is not None
    sim = daemon.sim_url
    async with aiohttp.ClientSession() as http, mcp_client(daemon.mcp_url, daemon.token) as client:
        before = await tool(client, "get_indicators", INDICATORS)
        created = await tool(client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 99000}})

        leap = await control(http, sim, "advance", {"seconds": THREE_DAYS_S})
        newest_closed = (leap["time"] // 60_000 - 1) * 60_000

        async with asyncio.timeout(60):
            while (now := await tool(client, "get_indicators", INDICATORS))["last_bar_time"] < newest_closed // 1000:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # the engine refills three days of bars from REST; bounded above
        assert now["last_bar_time"] == newest_closed // 1000
        assert now["last_bar_time"] - before["last_bar_time"] >= THREE_DAYS_S - 60
        async with http.get(f"{sim}/api/v3/klines", params={"symbol": "BTCUSDT", "interval": "1m", "limit": 3}) as r:
            klines = await r.json()
        assert now["last_bar_time"] == klines[-2][0] // 1000  # the exchange's newest closed bar

        # a signed request after the leap: our offset is three days stale → -1021 → resync → sent once
        placed = await tool(
            client,
            "place_order",
            {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001, "client_order_id": "leap"},
        )
        assert placed["status"] == "Filled", placed

        # the alert armed before the leap fires once
        await control(http, sim, "price", {"symbol": "BTCUSDT", "price": "99500"})
        async with asyncio.timeout(30):
            while not (fired := await tool(client, "get_notifications")):  # noqa: ASYNC110 - another process
                await asyncio.sleep(0.1)  # the tick travels sim → stream → engine → alerts; bounded above
        assert [n["alert_id"] for n in fired] == [created["alert_id"]]
        await control(http, sim, "price", {"symbol": "BTCUSDT", "price": "99600"})
        assert await tool(client, "get_notifications") == []

        # our clock an hour ahead of the exchange's, then an hour behind
        for skew_ms, coid in ((-3_600_000, "ahead"), (3_600_000, "behind")):
            await control(http, sim, "faults", {"clock_skew_ms": skew_ms})
            placed = await tool(
                client,
                "place_order",
                {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001, "client_order_id": coid},
            )
            assert placed["status"] == "Filled", placed
        await control(http, sim, "faults", {"clock_skew_ms": 0})
        async with http.get(f"{sim}/sim/v1/state") as r:
            orders = (await r.json())["orders"]
        assert sorted(o["clientOrderId"] for o in orders) == ["ahead", "behind", "leap"]
