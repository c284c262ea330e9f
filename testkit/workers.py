"""``chartgen worker`` subprocesses against the simulator and a PostgreSQL, and the cluster state
they write (shared by tests/cluster/test_worker.py and bench/cluster_workers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from cluster import owner_of
from engine import interval_seconds
from storage import PostgresDatabase
from testkit.external import stop_process_group

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


@contextlib.asynccontextmanager
async def real_clock_simulator(symbols: Sequence[str]) -> AsyncIterator[Any]:
    """The exchange simulator on loopback, on the real clock, with ``symbols``."""
    from simulator import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0, clock="real", symbols=symbols)
    try:
        yield running
    finally:
        await running.close()


class Workers:
    """Worker subprocesses, each in its own process group; their logs in ``logs``."""

    def __init__(
        self,
        dsn: str,
        sim_url: str,
        logs: Path,
        *,
        symbols: Sequence[str],
        heartbeat_s: float,
        liveness_s: float,
        window_bars: int = 50,
        env: dict[str, str] | None = None,
    ) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_") or k == "CHARTGEN_CI"},
            "CHARTGEN_POSTGRES_DSN": dsn,
            "CHARTGEN_BINANCE_REST_URL": sim_url,
            "CHARTGEN_BINANCE_STREAM_URL": sim_url.replace("http://", "ws://"),
            "CHARTGEN_SYMBOLS": ",".join(symbols),
            "CHARTGEN_INTERVALS": "1m",
            "CHARTGEN_ENGINE_WINDOW_BARS": str(window_bars),
            "CHARTGEN_CLUSTER_HEARTBEAT_S": str(heartbeat_s),
            "CHARTGEN_CLUSTER_LIVENESS_S": str(liveness_s),
            "CHARTGEN_LOG_FORMAT": "json",
            **(env or {}),
        }
        self.markets = [f"{s} 1m" for s in symbols]
        self.liveness_s = liveness_s
        self.logs = logs
        self.procs: list[asyncio.subprocess.Process] = []
        self.killed: set[str] = set()
        self.with_http: set[int] = set()

    async def start(self, *, http: bool = False) -> asyncio.subprocess.Process:
        """One more worker; with ``http`` it serves /readyz and /metrics on a free loopback port
        (:meth:`http_url`)."""
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemon",
            "worker",
            *(["--port", "0"] if http else []),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        if http:
            self.with_http.add(len(self.procs))
        self.procs.append(proc)
        return proc

    async def http_url(self, index: int, timeout_s: float = 60.0) -> str:
        """The HTTP base URL worker ``index`` logged when it started."""
        path = self.logs / f"worker-{index}.log"

        async def logged() -> str | None:
            for line in path.read_text().splitlines():
                if '"worker_started"' in line:
                    return str(json.loads(line)["http"])
            return None

        return await until(logged, timeout_s)

    async def live_urls(self) -> list[str]:
        """The HTTP base URLs of the workers started with ``http`` whose process still runs."""
        killed = {pid_of(m) for m in self.killed}
        return [
            await self.http_url(i)
            for i, proc in enumerate(self.procs)
            if i in self.with_http and proc.pid not in killed and proc.returncode is None
        ]

    async def close(self) -> None:
        for proc in self.procs:
            await stop_process_group(proc)

    def kill(self, member: str) -> None:
        """SIGKILL the worker ``member``; it stays out of :meth:`live` even while its last heartbeat is
        still inside the liveness window (a killed worker that owned no market is otherwise counted
        live by :meth:`settled` until the window passes)."""
        os.kill(pid_of(member), signal.SIGKILL)
        self.killed.add(member)

    async def live(self, db: PostgresDatabase) -> list[str]:
        """The workers heard from within the liveness window that were not killed."""
        rows = await db.fetch(
            "SELECT id FROM cluster_members WHERE role = 'worker'"
            " AND last_seen > clock_timestamp() - make_interval(secs => $1) ORDER BY id",
            self.liveness_s,
        )
        return [r["id"] for r in rows if r["id"] not in self.killed]

    async def settled(self, db: PostgresDatabase, n: int) -> dict[str, str] | None:
        """Market → owner once ``n`` workers (none killed) are live and every market's mark was last
        written by its rendezvous owner among them (its hand-over done); None until then."""
        live = await self.live(db)
        marks = await owners(db)
        if len(live) != n or any(marks.get(m) != owner_of(m, live) for m in self.markets):
            return None
        return marks


async def window_problems(
    http: aiohttp.ClientSession, worker_urls: Sequence[str], sim_url: str, markets: Sequence[str]
) -> list[str]:
    """What differs between each market's window on the worker that holds it (``GET /window``) and the
    exchange's klines: a market no worker holds, a gap between consecutive bars, a bar whose open
    time or OHLCV is not the exchange's, a window more than one bar behind the newest closed kline.
    Empty when every window equals the exchange's history."""
    problems: list[str] = []
    for market in markets:
        symbol, interval = market.split(" ", 1)
        rows = None
        for url in worker_urls:
            async with http.get(f"{url}/window", params={"market": market}) as r:
                if r.status == 200:
                    rows = (await r.json())["bars"]
                    break
        if not rows:
            problems.append(f"{market}: no worker holds a window")
            continue
        params = {"symbol": symbol, "interval": interval, "limit": str(len(rows) + 5)}
        async with http.get(f"{sim_url}/api/v3/klines", params=params) as r:
            klines = {int(k[0]) // 1000: [float(v) for v in k[1:6]] for k in await r.json()}
        step = interval_seconds(interval)
        for before, bar in itertools.pairwise(rows):
            if bar[0] - before[0] != step:
                problems.append(f"{market}: gap between {int(before[0])} and {int(bar[0])}")
        for bar in rows:
            if klines.get(int(bar[0])) != bar[1:]:
                problems.append(f"{market}: bar {int(bar[0])} is {bar[1:]}, the exchange's {klines.get(int(bar[0]))}")
                break
        newest_closed = max(klines) - step  # the newest kline is the forming bar
        if rows[-1][0] < newest_closed - step:
            problems.append(f"{market}: newest bar {int(rows[-1][0])}, the exchange closed {newest_closed}")
    return problems


async def owners(db: PostgresDatabase) -> dict[str, str]:
    """Market → the member whose hand-over mark it carries (its live evaluator)."""
    return {r["market"]: r["member"] for r in await db.fetch("SELECT market, member FROM cluster_market_marks")}


def pid_of(member: str) -> int:
    """The process id in a member id (``worker@host/pid/random``)."""
    return int(member.split("/")[1])


async def until(
    check: Callable[[], Awaitable[T | None]],
    timeout_s: float,
    every_s: float = 0.05,
    *,
    explain: Callable[[], object] | None = None,
) -> T:
    """Poll ``check()`` — a query of state other processes write — until it returns something truthy.

    ``explain``: on the timeout, an AssertionError carries what it returns (the state that did not
    get there), instead of a bare TimeoutError."""
    try:
        async with asyncio.timeout(timeout_s):
            while not (result := await check()):  # noqa: ASYNC110 - the state is in other processes
                await asyncio.sleep(every_s)
            return result
    except TimeoutError:
        if explain is None:
            raise
        raise AssertionError(f"not within {timeout_s} s: {explain()}") from None


async def next_alert_frame(stream: aiohttp.ClientResponse, timeout_s: float = 60.0) -> tuple[int, str]:
    """(SSE id, alert id) of the stream's next notification frame."""
    seq = None
    async with asyncio.timeout(timeout_s):
        while True:
            line = (await stream.content.readline()).decode()
            assert line, "the stream ended"
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("data: ") and seq is not None:
                return seq, json.loads(line[6:])["params"]["alert_id"]
