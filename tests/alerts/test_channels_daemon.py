"""Notification channels through the real daemon (``--serve --trade`` on the exchange simulator) and
local receivers for a webhook, the Telegram Bot API and ntfy that fail, stall and answer 429 at random.

Alerts set over MCP fire on simulator trades and reach every channel they are routed to — the
operator's ``notify_all_channels`` and a client's own ``subscribe_notifications`` channels (only
those the operator granted it in ``subscribers``), each principal's in firing order; the daemon
killed with SIGKILL 20 times during delivery loses nothing; a channel setting that cannot work
stops the daemon at start with one line naming the key.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from simulator import RunningSimulator
from testkit.channel_receivers import Receiver, channel_table
from testkit.daemon_proc import DaemonProc, clean_env, create_token, mcp_client
from testkit.sim_daemon import post_price, sim_env, start_on_sim, tool_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.process,
    pytest.mark.timeout(600),
]  # 20 daemon starts: under `make chaos`'s four workers a start takes several seconds
BASE = 70_000.0
STEP = 10.0


@pytest.fixture
async def receivers() -> AsyncIterator[dict[str, Receiver]]:
    made = {
        "hook": await Receiver("webhook", clock=time.time, seed=11).start(),
        "tg": await Receiver("telegram", clock=time.time, seed=12).start(),
        "topic": await Receiver("ntfy", clock=time.time, seed=13).start(),
    }
    try:
        yield made
    finally:
        for r in made.values():
            await r.close()


GRANTS = {"topic": ["phone"]}
"""Who may subscribe which channel: the token named "phone" may route to the ntfy topic; nobody to the others."""


def write_config(path: Path, receivers: dict[str, Receiver]) -> Path:
    text = 'notify_all_channels = ["hook", "tg"]\n\n' + "\n".join(
        channel_table(name, r, timeout_s=0.5, max_per_minute=60_000, subscribers=GRANTS.get(name))
        for name, r in receivers.items()
    )
    config = path / "chartgen.toml"
    config.write_text(text)
    return config


def in_principal_order(delivered: list[str], ids: list[str], data_dir: Path) -> bool:
    """Every notification delivered, each principal's in firing order (a channel serves principals in turn)."""
    with sqlite3.connect(data_dir / "chartgen.db") as db:
        owner = dict(db.execute("SELECT notification_id, principal FROM outbox").fetchall())
    if sorted(delivered) != sorted(ids):
        return False
    return all(
        [i for i in delivered if owner[i] == p] == [i for i in ids if owner[i] == p] for p in set(owner.values())
    )


def outbox_order(data_dir: Path) -> dict[str, list[str]]:
    """Each channel's notification ids in outbox (= firing) order, from the daemon's database."""
    with sqlite3.connect(data_dir / "chartgen.db") as db:
        rows = db.execute("SELECT channel, notification_id FROM outbox ORDER BY id").fetchall()
    out: dict[str, list[str]] = {}
    for channel, nid in rows:
        out.setdefault(channel, []).append(nid)
    return out


async def wait_delivered(receivers: dict[str, Receiver], expected: dict[str, list[str]], timeout_s: float) -> None:
    """Until every receiver has had each expected id delivered once (woken by each arriving request)."""
    async with asyncio.timeout(timeout_s):
        while True:
            missing = {n: set(ids) - {r.key for r in receivers[n].delivered()} for n, ids in expected.items()}
            if not any(missing.values()):
                return
            for r in receivers.values():
                r.arrived.clear()
            waits = [asyncio.ensure_future(r.arrived.wait()) for r in receivers.values()]
            _, pending = await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()


async def fired_count(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "chartgen.db") as db:
        return int(db.execute("SELECT COUNT(*) FROM alert_events WHERE outcome = 'fired'").fetchone()[0])


async def wait_fired(data_dir: Path, count: int, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if await fired_count(data_dir) >= count:
                return
            await asyncio.sleep(0.05)  # another process's commit; bounded by the timeout


async def start(sim: RunningSimulator, data_dir: Path, config: Path) -> DaemonProc:
    return await start_on_sim(sim, data_dir, sim_env(sim, CHARTGEN_CONFIG=str(config)))


async def daemon_with_receivers(
    sim: RunningSimulator, receivers: dict[str, Receiver], data_dir: Path, *, chaos: float
) -> tuple[DaemonProc, dict[str, str], Path]:
    """Receivers misbehaving with probability ``chaos``, two clients' tokens, the daemon on the simulator."""
    for r in receivers.values():
        r.chaos = chaos
    tokens = {"desk": await create_token(data_dir, "desk"), "phone": await create_token(data_dir, "phone")}
    config = write_config(data_dir, receivers)
    async with aiohttp.ClientSession() as http:
        await post_price(http, sim, BASE)
    return await start(sim, data_dir, config), tokens, config


async def set_and_fire(
    sim: RunningSimulator, daemon: DaemonProc, data_dir: Path, tokens: dict[str, str], n: int
) -> None:
    """``n`` price alerts per token, all crossed by one trade; the "phone" client also routes to ntfy."""
    async with aiohttp.ClientSession() as http:
        for who, token in tokens.items():
            async with mcp_client(daemon.mcp_url, token) as client:
                if who == "phone":
                    answer = await tool_json(client, "subscribe_notifications", {"channels": ["topic"]})
                    assert answer["channels"] == ["topic"]
                for k in range(n):
                    await tool_json(
                        client, "set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": BASE + STEP * (k + 1)}}
                    )
        await post_price(http, sim, BASE + STEP * (n + 2))
    await wait_fired(data_dir, n * len(tokens))


async def test_alerts_reach_every_routed_channel_in_order(
    sim: RunningSimulator, receivers: dict[str, Receiver], tmp_path: Path
) -> None:
    daemon, tokens, _ = await daemon_with_receivers(sim, receivers, tmp_path, chaos=0.2)
    try:
        async with mcp_client(daemon.mcp_url, tokens["desk"]) as client:
            refused = await client.call_tool("subscribe_notifications", {"channels": ["pager"]})
            assert refused.is_error and "channels: unknown channel(s) ['pager']" in refused.content[0].text
            # regression (issue 36): a channel the operator granted to another token, and one granted to nobody
            for name in ("topic", "tg"):
                refused = await client.call_tool("subscribe_notifications", {"channels": [name]})
                text = refused.content[0].text
                assert refused.is_error and f"channels.{name}.subscribers" in text, text
            answer = await tool_json(client, "list_subscriptions", {})
            assert answer["subscribed"] is False
        await set_and_fire(sim, daemon, tmp_path, tokens, 5)
        expected = outbox_order(tmp_path)
        assert len(expected["hook"]) == len(expected["tg"]) == 10 and len(expected["topic"]) == 5
        await wait_delivered(receivers, expected, 60)
        auth = {"Authorization": f"Bearer {tokens['desk']}"}
        async with aiohttp.ClientSession(headers=auth) as http:
            async with http.get(f"{daemon.base}/status") as resp:
                status = (await resp.json())["channels"]
            async with http.get(f"{daemon.base}/metrics") as resp:
                metrics = await resp.text()
    finally:
        await daemon.stop()
    for name, ids in expected.items():
        assert in_principal_order(receivers[name].first_delivery_order(), ids, tmp_path), name
    assert status["hook"]["kind"] == "webhook" and status["topic"]["delivered"] + status["topic"]["pending"] == 5
    assert 'chartgen_channel_deliveries_total{channel="tg",outcome="delivered"}' in metrics
    tg = receivers["tg"].delivered()[0]
    assert tg.path == "/bot123456:TEST-token/sendMessage" and b"price above" in tg.body


async def test_kill_9_during_delivery_20_times_loses_nothing(
    sim: RunningSimulator, receivers: dict[str, Receiver], tmp_path: Path
) -> None:
    rng = random.Random(2027)
    daemon, tokens, config = await daemon_with_receivers(sim, receivers, tmp_path, chaos=0.3)
    await set_and_fire(sim, daemon, tmp_path, tokens, 15)
    expected = outbox_order(tmp_path)
    for _ in range(20):
        await asyncio.sleep(rng.uniform(0.0, 0.4))  # a random moment of delivery, not synchronisation
        await daemon.kill()
        daemon = await start(sim, tmp_path, config)
    try:
        await wait_delivered(receivers, expected, 120)
    finally:
        await daemon.stop()
    for name, ids in expected.items():
        assert set(receivers[name].first_delivery_order()) == set(ids), name
        assert in_principal_order(receivers[name].first_delivery_order(), ids, tmp_path), f"{name}: out of order"
        assert {r.key for r in receivers[name].requests} <= set(ids)
    assert await fired_count(tmp_path) == 30


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('[channels.hook]\nkind = "webhook"\nurl = "http://127.0.0.1:9/x"\n', "channels.hook.secret is required"),
        ('notify_all_channels = ["ops"]\n', "notify_all_channels names 'ops'"),
        ('[channels.hook]\nkind = "carrier-pigeon"\n', "channels.hook"),
        (  # regression (issue 36): a webhook on a private address is refused unless the channel allows it
            '[channels.hook]\nkind = "webhook"\nurl = "http://10.0.0.7/x"\nsecret = "s"\n',
            "channels.hook.url is on a loopback, link-local or private address (10.0.0.7)",
        ),
    ],
)
async def test_a_bad_channel_setting_stops_the_daemon_at_start(tmp_path: Path, toml: str, named: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "--serve", "--trade", "--port", "0", "--data-dir", str(tmp_path),
        env=clean_env({"CHARTGEN_CONFIG": str(config)}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, err = await proc.communicate()
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chartgen: error: invalid settings: ") and named in lines[0]
