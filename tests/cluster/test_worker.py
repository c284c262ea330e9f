"""Cluster workers (``chartgen worker`` subprocesses) on a real PostgreSQL against the exchange
simulator: the markets are shared out by rendezvous hashing, a worker killed with SIGKILL has its
markets followed again by the others, and the gap is closed by backfill-then-evaluate — an alert
whose level was reached only while its market had no owner still fires, exactly once.

The oracle is the simulator's own trade tape (``/api/v3/aggTrades``, read by this test): an alert
must have fired iff a trade after its arming reached its level; none may fire otherwise, and
``alert_events`` holds at most one row per alert (its primary key) — checked as a count anyway.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from alerts.models import Alert
from alerts.pg_store import PgAlertStore
from cluster.membership import owner_of
from config.postgres import PostgresDatabase
from daemon.cluster_command import CLUSTER_MIGRATIONS
from tests.support.external import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
SYMBOLS = [f"W{n:02d}USDT" for n in range(12)]
MARKETS = [f"{s} 1m" for s in SYMBOLS]
LIVENESS_S = 2.0
HEARTBEAT_S = 0.5
DEADLINE_S = 60.0
OFF_LEVEL = [sign * (j + 0.5) / 100 for j in range(7) for sign in (1, -1)]
"""Prices posted: half-way between alert levels (2-6 % away), so the simulator's own noise around a
posted price does not touch a level — a level is reached by a posted trade, which every stream
update after it shows, or not at all."""


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    from brokers.simulator.app import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0, clock="real", symbols=SYMBOLS)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def cluster(postgres: Any) -> AsyncIterator[tuple[str, PostgresDatabase]]:
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn)
    await db.migrate(CLUSTER_MIGRATIONS)
    try:
        yield dsn, db
    finally:
        await db.close()


class Workers:
    """Worker subprocesses, each in its own process group; their logs in ``logs``."""

    def __init__(self, dsn: str, sim: Any, logs: Path) -> None:
        ws = sim.url.replace("http://", "ws://")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_") or k == "CHARTGEN_CI"},
            "CHARTGEN_POSTGRES_DSN": dsn,
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_BINANCE_STREAM_URL": ws,
            "CHARTGEN_SYMBOLS": ",".join(SYMBOLS),
            "CHARTGEN_INTERVALS": "1m",
            "CHARTGEN_ENGINE_WINDOW_BARS": "50",
            "CHARTGEN_CLUSTER_HEARTBEAT_S": str(HEARTBEAT_S),
            "CHARTGEN_CLUSTER_LIVENESS_S": str(LIVENESS_S),
            "CHARTGEN_LOG_FORMAT": "json",
        }
        self.logs = logs
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self) -> asyncio.subprocess.Process:
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemon",
            "worker",
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    async def close(self) -> None:
        for proc in self.procs:
            await stop_process_group(proc)


async def owners(db: PostgresDatabase) -> dict[str, str]:
    """Market → the member whose hand-over mark it carries (its live evaluator)."""
    return {r["market"]: r["member"] for r in await db.fetch("SELECT market, member FROM cluster_market_marks")}


async def live_workers(db: PostgresDatabase) -> set[str]:
    rows = await db.fetch(
        "SELECT id FROM cluster_members WHERE role = 'worker'"
        " AND last_seen > clock_timestamp() - make_interval(secs => $1)",
        LIVENESS_S,
    )
    return {r["id"] for r in rows}


async def until(check: Any, timeout_s: float = DEADLINE_S) -> Any:
    """Poll ``check()`` (a query of other processes' state) until it returns something truthy."""
    async with asyncio.timeout(timeout_s):
        while not (result := await check()):  # noqa: ASYNC110 - the state is in other processes
            await asyncio.sleep(0.05)
        return result


async def all_markets_marked(db: PostgresDatabase, exclude: set[str] = frozenset()) -> dict[str, str] | None:
    """The owners once every market's mark was written by a live worker not in ``exclude``."""
    marks, live = await owners(db), await live_workers(db)
    ok = all(marks.get(m) in live - exclude for m in MARKETS)
    return marks if ok else None


def pid_of(member: str) -> int:
    return int(member.split("/")[1])


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
    rows = await db.fetch("SELECT alert_id, COUNT(*) OVER (PARTITION BY alert_id) AS n, value FROM alert_events")
    assert all(r["n"] == 1 for r in rows)
    return {r["alert_id"]: (int(r["n"]), float(r["value"])) for r in rows}


@pytest.mark.slow
async def test_killed_workers_markets_move_and_alerts_fire_exactly_once(
    sim: Any, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    store = PgAlertStore(db)
    rng = random.Random(7)
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    workers = Workers(dsn, sim, tmp_path)
    alerts: list[Alert] = []
    try:
        for _ in range(3):
            await workers.start()
        marks = await until(lambda: _shared_by(db, 3))  # the first one up may hold them all for a moment

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
            os.kill(pid_of(victim), signal.SIGKILL)
            await post_price(http, sim, symbol, base[symbol] * 1.035)  # reaches the +2 % and +3 % alerts
            await post_price(http, sim, symbol, base[symbol])
            killed_at = time.monotonic()
            marks = await until(lambda: all_markets_marked(db, exclude={victim}))
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

            # 2. Kills at random moments while prices move; a worker is restarted after each.
            for _ in range(3):
                await workers.start()
                await until(lambda: _shared_by(db, 3))
                for _ in range(6):
                    s = rng.choice(SYMBOLS)
                    await post_price(http, sim, s, base[s] * (1 + rng.choice(OFF_LEVEL)))
                live = sorted(await live_workers(db))
                dead = rng.choice(live)
                os.kill(pid_of(dead), signal.SIGKILL)
                for _ in range(6):
                    s = rng.choice(SYMBOLS)
                    await post_price(http, sim, s, base[s] * (1 + rng.choice(OFF_LEVEL)))
                killed_at = time.monotonic()
                await until(lambda dead=dead: all_markets_marked(db, exclude={dead}))
                assert time.monotonic() - killed_at <= 10.0
            for s in SYMBOLS:  # back to the start: nothing more to reach
                await post_price(http, sim, s, base[s])
            end_ms = sim.exchange.now_ms()
            # every market evaluated past the end: whatever the trades reached has fired by now
            await until(lambda: _marked_past(db, end_ms))

            should: set[str] = set()
            for s in SYMBOLS:
                trades = await tape(http, sim, s, started_ms + 1, end_ms)
                for a in (a for a in alerts if a.symbol == s):
                    level = a.threshold or 0.0
                    armed = int((a.armed_at or 0) * 1000)
                    if any(t > armed and (p >= level if a.kind == "price_above" else p <= level) for t, p in trades):
                        should.add(a.id)
        got = await fired(db)
        for aid in sorted(should - set(got)):
            a = by_id[aid]
            print("MISSED", a.symbol, a.kind, a.threshold, a.armed_at)
            trades = await _tape_now(sim, a.symbol, started_ms + 1, end_ms)
            for t, p in trades:
                if p >= (a.threshold or 0) if a.kind == "price_above" else p <= (a.threshold or 0):
                    print("  crossing", t, p)
        assert set(got) == should, (
            f"missed: {sorted(should - set(got))[:5]}, fired without a crossing: {sorted(set(got) - should)[:5]}"
        )
        assert len(should) > 20, "the scenario reached too few alerts to mean anything"
        left = {r["id"] for r in await db.fetch("SELECT id FROM alerts")}
        assert left == {a.id for a in alerts} - should
    finally:
        await workers.close()


async def _shared_by(db: PostgresDatabase, n: int) -> dict[str, str] | None:
    """The owners once ``n`` workers are live and every market is evaluated by its rendezvous owner."""
    live = sorted(await live_workers(db))
    marks = await owners(db)
    if len(live) != n or any(marks.get(m) != owner_of(m, live) for m in MARKETS):
        return None
    return marks


async def _marked_past(db: PostgresDatabase, end_ms: int) -> bool:
    rows = await db.fetch("SELECT evaluated_ms FROM cluster_market_marks WHERE market = ANY($1::text[])", MARKETS)
    return len(rows) == len(MARKETS) and all(r["evaluated_ms"] > end_ms for r in rows)


async def _tape_now(sim: Any, symbol: str, start_ms: int, end_ms: int) -> list[tuple[int, float]]:
    async with aiohttp.ClientSession() as http:
        return await tape(http, sim, symbol, start_ms, end_ms)
