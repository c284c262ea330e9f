"""Cluster workers (``chartgen worker`` subprocesses) on a real PostgreSQL against the exchange
simulator: the markets are shared out by rendezvous hashing, a worker killed with SIGKILL has its
markets followed again by the others, and the gap is closed by backfill-then-evaluate — an alert
whose level was reached only while its market had no owner still fires, exactly once.

The oracle is the simulator's own trade tape (``/api/v3/aggTrades``, read by this test): an alert
must have fired iff a trade after its arming reached its level; none may fire otherwise, and
``alert_events`` holds at most one row per alert (its primary key) — checked as a count anyway.
After the kills every market's window, on the worker holding it, equals the simulator's klines
(``GET /window`` against ``/api/v3/klines``: gap-free, bar for bar).  Every notification goes to a
webhook channel too (daemon/worker/channels.py), and the worker holding the channel lease is one
of the killed: every fired alert's notification reaches the webhook, none that did not fire.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from alerts import Alert, PgAlertStore
from storage import PostgresDatabase
from testkit.channel_receivers import Receiver
from testkit.workers import Workers, real_clock_simulator, until, window_problems

pytestmark = [pytest.mark.slow, pytest.mark.servers, pytest.mark.process]

SYMBOLS = [f"W{n:02d}USDT" for n in range(12)]
MARKETS = [f"{s} 1m" for s in SYMBOLS]
LIVENESS_S = 2.0
HEARTBEAT_S = 0.5
DEADLINE_S = 60.0
OFF_LEVEL = [sign * (j + 0.5) / 100 for j in range(7) for sign in (1, -1)]
"""Prices posted: half-way between alert levels (1-6 % away), so the simulator's own noise around a
posted price does not touch a level — a level is reached by a posted trade, which every stream
update after it shows, or not at all."""


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator(SYMBOLS) as running:
        yield running


async def post_price(http: aiohttp.ClientSession, sim: Any, symbol: str, price: float) -> None:
    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{price:.8f}"}) as r:
        assert r.status == 200, await r.text()


async def tape(
    http: aiohttp.ClientSession, sim: Any, symbol: str, start_ms: int, end_ms: int
) -> list[tuple[int, float]]:
    """Every trade of ``symbol`` in the window, from the simulator (the oracle's source)."""
    out: list[tuple[int, float]] = []
    t = start_ms
    while t <= end_ms:
        stop = min(end_ms, t + 3_000_000)
        params = {"symbol": symbol, "startTime": t, "endTime": stop, "limit": 1000}
        while True:
            async with http.get(f"{sim.url}/api/v3/aggTrades", params=params) as r:
                rows = await r.json()
            out.extend((int(x["T"]), float(x["p"])) for x in rows if int(x["T"]) <= stop)
            if len(rows) < 1000 or int(rows[-1]["T"]) > stop:
                break
            params = {"symbol": symbol, "fromId": int(rows[-1]["a"]) + 1, "limit": 1000}
        t = stop + 1
    return out


def price_alert(symbol: str, above: bool, level: float, armed_ms: int) -> Alert:
    return Alert(
        id=f"a{uuid.uuid4().hex[:12]}",
        principal="alice",
        symbol=symbol,
        interval="1m",
        kind="price_above" if above else "price_below",
        threshold=level,
        created_at=armed_ms / 1000,
        armed_at=armed_ms / 1000,
    )


async def fired(db: PostgresDatabase) -> dict[str, tuple[int, float]]:
    rows = await db.fetch(
        "SELECT alert_id, outcome, COUNT(*) OVER (PARTITION BY alert_id) AS n, value FROM alert_events"
    )
    assert all(r["n"] == 1 for r in rows)
    return {r["alert_id"]: (int(r["n"]), float(r["value"])) for r in rows if r["outcome"] == "fired"}


@pytest.mark.slow
async def test_killed_workers_markets_move_and_alerts_fire_exactly_once(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    store = PgAlertStore(db)
    rng = random.Random(7)
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    receiver = await Receiver("webhook", clock=time.time).start()
    channels = {"hook": {"kind": "webhook", "url": receiver.url, "secret": "whsec", "allow_private_address": True}}
    workers = Workers(
        dsn,
        sim.url,
        tmp_path,
        symbols=SYMBOLS,
        heartbeat_s=HEARTBEAT_S,
        liveness_s=LIVENESS_S,
        env={"CHARTGEN_CHANNELS": json.dumps(channels), "CHARTGEN_NOTIFY_ALL_CHANNELS": "hook"},
    )
    alerts: list[Alert] = []
    try:
        for _ in range(3):
            await workers.start(http=True)
        marks = await until(lambda: workers.settled(db, 3), DEADLINE_S)  # not the first one up alone

        # Alerts 2-6 % away on both sides of every market (the simulator's own noise moves far less).
        now_ms = sim.exchange.now_ms()
        for s in SYMBOLS:
            for k in range(1, 6):
                alerts.append(price_alert(s, True, base[s] * (1 + 0.01 * (k + 1)), now_ms))
                alerts.append(price_alert(s, False, base[s] * (1 - 0.01 * (k + 1)), now_ms))
        await store.insert_many(alerts)
        by_id = {a.id: a for a in alerts}
        started_ms = now_ms

        async with aiohttp.ClientSession() as http:
            # 1. A crossing only while the market had no owner: killed, the level reached and left
            #    again before anyone took the market over.
            victim_market = MARKETS[0]
            symbol = victim_market.split()[0]
            victim = marks[victim_market]
            workers.kill(victim)
            await post_price(http, sim, symbol, base[symbol] * 1.035)  # reaches the +2 % and +3 % alerts
            await post_price(http, sim, symbol, base[symbol])
            killed_at = time.monotonic()
            await until(lambda: workers.settled(db, 2), DEADLINE_S)
            moved_in = time.monotonic() - killed_at
            assert moved_in <= 10.0, f"the dead worker's markets were followed again after {moved_in:.1f} s"
            gap_fired = {
                aid for aid in await fired(db) if by_id[aid].symbol == symbol and by_id[aid].kind == "price_above"
            }
            expected = {
                a.id
                for a in alerts
                if a.symbol == symbol and a.kind == "price_above" and a.threshold <= base[symbol] * 1.035
            }  # type: ignore[operator]
            assert gap_fired == expected

            # 2. Alerts set one by one reach their owner by notification (1 % away: reached only by
            #    posts 1.5 % away or more).
            for s in SYMBOLS:
                for above in (True, False):
                    one = price_alert(s, above, base[s] * (1.01 if above else 0.99), sim.exchange.now_ms())
                    await store.insert(one)
                    alerts.append(one)
                    by_id[one.id] = one

            # Cancelled and expired ones leave their worker: none of them fires, whatever the price.
            gone = [
                price_alert(s, True, base[s] * 1.005, sim.exchange.now_ms()) for s in SYMBOLS[:4]
            ]  # 0.5 % away: every post above the start price reaches it
            expiring = [a.model_copy(update={"expires_at": time.time() + 1.0}) for a in gone[2:]]
            for a in [*gone[:2], *expiring]:
                await store.insert(a)
            for a in gone[:2]:
                assert await store.remove("alice", a.id, "cancelled", time.time()) is not None
            outcomes = await until(lambda: _outcomes(db, [a.id for a in expiring]), DEADLINE_S)
            assert outcomes == ["expired", "expired"]

            # 3. Kills at random moments while prices move; a worker is restarted after each.
            for round_ in range(3):
                await workers.start(http=True)
                await until(lambda: workers.settled(db, 3), DEADLINE_S)
                for _ in range(6):
                    s = rng.choice(SYMBOLS)
                    await post_price(http, sim, s, base[s] * (1 + rng.choice(OFF_LEVEL)))
                holder = await db.fetchval("SELECT holder FROM cluster_leases WHERE name = 'channels'")
                live = await workers.live(db)
                dead = holder if round_ == 0 and holder in live else rng.choice(live)
                workers.kill(dead)
                for _ in range(6):
                    s = rng.choice(SYMBOLS)
                    await post_price(http, sim, s, base[s] * (1 + rng.choice(OFF_LEVEL)))
                killed_at = time.monotonic()
                await until(lambda: workers.settled(db, 2), DEADLINE_S)
                assert time.monotonic() - killed_at <= 10.0
            for s in SYMBOLS:  # back to the start: nothing more to reach
                await post_price(http, sim, s, base[s])
            end_ms = sim.exchange.now_ms()
            # every market evaluated past the end: whatever the trades reached has fired by now
            await until(lambda: _marked_past(db, end_ms), DEADLINE_S)

            # every window, on whichever worker holds it now, equals the exchange's klines: gap-free
            problems = await window_problems(http, await workers.live_urls(), sim.url, MARKETS)
            assert not problems, problems[:5]

            should: set[str] = set()
            for s in SYMBOLS:
                trades = await tape(http, sim, s, started_ms + 1, end_ms)
                for a in (a for a in alerts if a.symbol == s):
                    level = a.threshold or 0.0
                    armed = int((a.armed_at or 0) * 1000)
                    if any(t > armed and (p >= level if a.kind == "price_above" else p <= level) for t, p in trades):
                        should.add(a.id)
        got = await fired(db)
        assert set(got) == should, (
            f"missed: {sorted(should - set(got))[:5]}, fired without a crossing: {sorted(set(got) - should)[:5]}"
        )
        assert len(should) > 20, "the scenario reached too few alerts to mean anything"
        left = {r["id"] for r in await db.fetch("SELECT id FROM alerts")}
        assert left == {a.id for a in alerts} - should

        async def delivered() -> set[str] | None:
            keys = set(receiver.delivered_ids())  # digests expanded: the channel's rate coalesces a burst
            return keys if keys >= should else None

        assert await until(delivered, DEADLINE_S) == should  # every fired alert's, none other
        token = await db.fetchval("SELECT token FROM cluster_leases WHERE name = 'channels'")
        assert token >= 2, "the channel lease never changed hands: its holder was not among the killed"
    finally:
        await workers.close()
        await receiver.close()


async def _outcomes(db: PostgresDatabase, ids: list[str]) -> list[str] | None:
    """The outcomes of ``ids`` once every one has one."""
    rows = await db.fetch("SELECT alert_id, outcome FROM alert_events WHERE alert_id = ANY($1::text[])", ids)
    found = {r["alert_id"]: r["outcome"] for r in rows}
    return [found[i] for i in ids] if len(found) == len(ids) else None


async def _marked_past(db: PostgresDatabase, end_ms: int) -> bool:
    rows = await db.fetch("SELECT evaluated_ms FROM cluster_market_marks WHERE market = ANY($1::text[])", MARKETS)
    return len(rows) == len(MARKETS) and all(r["evaluated_ms"] > end_ms for r in rows)
