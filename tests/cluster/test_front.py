"""Cluster fronts (``chartgen --serve --cluster`` subprocesses) with a worker on a real PostgreSQL,
against the exchange simulator, through the official MCP SDK client and raw SSE.

Two fronts share one cluster: a token created with ``chartgen token create --cluster`` works at
both and a revocation is refused at both on the next request; an alert set through one front is
listed and cancelled through the other and fired by the worker that owns its market; its
notification arrives on a stream open at the other front, a stream opened at the first front with
``Last-Event-ID`` replays it, and it is polled once from either front; the notification channel
the principal routed it to at one front (``subscribe_notifications {"channels": [...]}``) gets it
once, delivered by the worker holding the channel lease, and ``chartgen cluster status`` counts it.
Tools whose stores have no PostgreSQL implementation answer that fronts do not serve them yet; an
alert action's arguments are checked at the front (the actions themselves: tests/cluster/test_cluster_alert_actions.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from alerts import verify_signature
from cluster.membership import Membership
from storage import PostgresDatabase
from testkit.channel_receivers import Receiver
from testkit.daemon_proc import DaemonProc, clean_env, mcp_client, start_fronts
from testkit.workers import Workers, real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["FA0USDT", "FA1USDT"]
HEARTBEAT_S = 0.5
LIVENESS_S = 2.0
DEADLINE_S = 60.0


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def token_command(dsn: str, *args: str) -> tuple[int, str, str]:
    """``chartgen token --cluster ARGS`` against the cluster's PostgreSQL."""
    return await chartgen(dsn, "token", "--cluster", *args)


async def cluster_status(dsn: str) -> Any:
    """``chartgen cluster status --json``."""
    code, out, err = await chartgen(dsn, "cluster", "status", "--json")
    assert code == 0, err
    return json.loads(out)


async def chartgen(dsn: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        *args,
        env=clean_env({"CHARTGEN_POSTGRES_DSN": dsn}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def call_error(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.content[0].text
    return str(result.content[0].text)


async def next_frame(resp: aiohttp.ClientResponse, timeout_s: float = 30.0) -> tuple[int, dict[str, Any]]:
    """The next ``id:``/``data:`` frame of a raw SSE response."""
    event: dict[str, str] = {}
    async with asyncio.timeout(timeout_s):
        while True:
            raw = await resp.content.readline()
            assert raw, "stream ended"
            line = raw.decode().rstrip("\n")
            if line == "":
                if "data" in event:
                    return int(event["id"]), json.loads(event["data"])
                event = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                event[key] = value


async def worker_alerts(http: aiohttp.ClientSession, url: str, want: int) -> bool:
    """True once the worker's /metrics counts ``want`` armed alerts (it indexed what the fronts set)."""
    async with http.get(f"{url}/metrics") as r:
        m = re.search(r"^chartgen_worker_alerts (\S+)$", await r.text(), re.M)
    return m is not None and float(m.group(1)) == want


async def test_two_fronts_share_tokens_alerts_and_notification_streams(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    code, token, err = await token_command(dsn, "create", "alice", "--scope", "charts,alerts,trade")
    assert code == 0, err
    token = token.strip()
    receiver = await Receiver("webhook", clock=time.time).start()
    hook = {"kind": "webhook", "url": receiver.url, "secret": "whsec", "allow_private_address": True}
    # "hook" is granted to the token named alice; "pager" to nobody (only notify_all_channels would reach it)
    channels = json.dumps({"hook": hook | {"subscribers": ["alice"]}, "pager": hook})
    env = {
        "CHARTGEN_CHANNELS": channels,
        "CHARTGEN_POSTGRES_DSN": dsn,
        "CHARTGEN_BINANCE_REST_URL": sim.url,
        "CHARTGEN_INTERVALS": "1m",
        "CHARTGEN_CLUSTER_HEARTBEAT_S": str(HEARTBEAT_S),
        "CHARTGEN_CLUSTER_LIVENESS_S": str(LIVENESS_S),
        "CHARTGEN_LOG_FORMAT": "json",
    }
    workers = Workers(
        dsn,
        sim.url,
        tmp_path,
        symbols=SYMBOLS,
        heartbeat_s=HEARTBEAT_S,
        liveness_s=LIVENESS_S,
        env={"CHARTGEN_CHANNELS": channels},
    )
    fronts: list[DaemonProc] = []
    try:
        await workers.start(http=True)
        await start_fronts(fronts, 2, env)
        await until(lambda: workers.settled(db, 1), DEADLINE_S)
        worker_url = await workers.http_url(0)
        a, b = fronts
        symbol = SYMBOLS[0]
        base = dict(sim.exchange.start_prices())[symbol]
        level = float(base) * 1.02
        async with (
            aiohttp.ClientSession() as http,
            mcp_client(a.mcp_url, token) as at_a,
            mcp_client(b.mcp_url, token) as at_b,
        ):
            headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
            refused = await at_b.call_tool("subscribe_notifications", {"channels": ["pager"]})  # issue 36
            assert refused.is_error and "channels.pager.subscribers" in refused.content[0].text
            assert await call(at_b, "subscribe_notifications", {"channels": ["hook"]}) == {
                "status": "subscribed",
                "symbols": None,
                "alert_types": None,
                "channels": ["hook"],
            }
            async with http.get(f"{b.base}/mcp", headers=headers) as stream_b:
                assert stream_b.status == 200
                made = await call(at_a, "set_alert", {"symbol": symbol, "condition": {"price_above": level}})
                other = await call(at_b, "set_alert", {"symbol": symbol, "condition": {"price_above": level * 1.01}})
                listed = await call(at_b, "list_alerts")
                assert {x["id"] for x in listed} == {made["alert_id"], other["alert_id"]}
                assert listed[0]["interval"] == "1m"
                assert await call(at_a, "cancel_alert", {"alert_id": other["alert_id"]}) == {"ok": True}
                await until(lambda: worker_alerts(http, worker_url, 1), DEADLINE_S)

                async with http.post(
                    f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{level * 1.015:.8f}"}
                ) as r:
                    assert r.status == 200, await r.text()
                seq, frame = await next_frame(stream_b)
                assert frame["method"] == "notifications/alert_triggered"
                assert frame["params"]["alert_id"] == made["alert_id"]

            # The other front resumes the principal's stream: the frame after Last-Event-ID is the same one.
            async with http.get(f"{a.base}/sse", headers={**headers, "Last-Event-ID": str(seq - 1)}) as stream_a:
                assert stream_a.status == 200
                again_seq, again = await next_frame(stream_a)
                assert (again_seq, again["params"]["alert_id"]) == (seq, made["alert_id"])

            # The channel the principal routed its notifications to got this one, once.
            async def hooked() -> list[str]:
                return [r.key for r in receiver.requests if r.ok]

            assert await until(hooked, DEADLINE_S) == [made["alert_id"]]
            assert verify_signature(
                "whsec", receiver.requests[0].headers["X-Chartgen-Signature"], receiver.requests[0].body, time.time()
            )
            status = await cluster_status(dsn)
            assert status["channels"]["hook"]["delivered"] == 1 and status["channels"]["hook"]["pending"] == 0
            assert any(x["name"] == "channels" and x["holder"].startswith("worker") for x in status["leases"])

            polled = await call(at_a, "get_notifications")
            assert [n["alert_id"] for n in polled] == [made["alert_id"]]
            assert await call(at_b, "get_notifications") == []
            assert await call(at_a, "list_alerts") == [] and await call(at_b, "list_alerts") == []
            outcomes = dict(await db.fetch("SELECT alert_id, outcome FROM alert_events"))
            assert outcomes == {made["alert_id"]: "fired", other["alert_id"]: "cancelled"}

            refused = await call_error(at_a, "place_oco", {})  # served at fronts: its arguments are checked
            assert "symbol is required" in refused
            action = {"place_order": {"side": "buy", "type": "market", "quantity": 1, "client_order_id": "mine"}}
            refused = await call_error(
                at_a, "set_alert", {"symbol": symbol, "condition": {"price_above": level}, "action": action}
            )
            assert "client_order_id is derived from the alert id" in refused  # checked at the front
            subs = await call(at_b, "list_subscriptions")
            assert subs["subscribed"] is True

        async with aiohttp.ClientSession() as http:
            async with http.get(f"{a.base}/status", headers={"Authorization": f"Bearer {token}"}) as r:
                status = await r.json()
            assert status["cluster"]["role"] == "front" and status["cluster"]["ready"] is True
            assert (status["cluster"]["bus"], status["cluster"]["bus_mismatch"]) == ("local", None)
            members = {r["id"] for r in await db.fetch("SELECT id FROM cluster_members WHERE role = 'front'")}
            assert len(members) == 2

            # A worker on the other bus joins: the front names it (it would hear its firings only by sweep).
            await Membership(db, LIVENESS_S).heartbeat("worker@elsewhere", "worker", bus="nats")

            async def mismatch() -> str | None:
                async with http.get(f"{a.base}/status", headers={"Authorization": f"Bearer {token}"}) as r:
                    return (await r.json())["cluster"]["bus_mismatch"]

            assert "worker worker@elsewhere (nats)" in await until(mismatch, 30, every_s=0.1)
            await Membership(db, LIVENESS_S).leave("worker@elsewhere")

            code, out, err = await token_command(dsn, "revoke", "alice")
            assert code == 0 and "revoked" in out, err
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_alerts"}}
            for front in fronts:
                async with http.post(front.mcp_url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
                    assert r.status == 401
    finally:
        for front in fronts:
            await front.stop()
        await workers.close()
        await receiver.close()
    assert await db.fetchval("SELECT COUNT(*) FROM cluster_members WHERE role = 'front'") == 0
    assert [r.key for r in receiver.requests] == [made["alert_id"]]  # never sent twice


async def test_a_front_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    """--cluster without --serve, with --trade, or without a DSN: a clear error, no server."""
    for args, expected in (
        (["--cluster"], "use it with --serve"),
        (["--serve", "--cluster", "--trade"], "cannot be combined with --trade"),
        (["--serve", "--cluster", "--port", "0"], "--cluster: no postgres_dsn"),
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemon",
            *args,
            env=clean_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        assert proc.returncode in (1, 2) and expected in err.decode(), err.decode()
