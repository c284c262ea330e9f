"""Acceptance: the live engine against the exchange simulator on a manual clock.

After every ``/sim/v1/advance`` each window equals the simulator's REST klines exactly
(open time and OHLCV), across stream drops at random moments, a stall, a serverShutdown,
a connection-age cut and 429 answers with Retry-After during backfill, and no request is
sent before a Retry-After has passed.  A second test warms up 200 symbols × 2 intervals
with 1000 bars each within the simulator's request-weight limit.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest

from engine.feed.stream_settings import StreamSettings
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate
from simulator import start_simulator  # imported, never skipped: a broken simulator must fail the run

pytestmark = pytest.mark.slow

SYMBOLS = ["BTCUSDT", "ETHUSDT", "SOLUSDT"]
INTERVALS = ["1m", "5m"]
MARKETS = [(s, i) for s in SYMBOLS for i in INTERVALS]
WINDOW = 120
WAIT = 30.0


@dataclass
class RequestLog:
    """Client-side record of every REST request and each rate-limit answer."""

    sent: list[tuple[float, str]] = field(default_factory=list)
    limited: list[tuple[float, float]] = field(default_factory=list)  # (answer time, Retry-After s)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def trace(self) -> aiohttp.TraceConfig:
        tc = aiohttp.TraceConfig()

        async def on_start(_s: Any, _c: Any, params: aiohttp.TraceRequestStartParams) -> None:
            if params.url.path.startswith("/api/"):
                self.sent.append((time.monotonic(), params.url.path))

        async def on_end(_s: Any, _c: Any, params: aiohttp.TraceRequestEndParams) -> None:
            if params.response.status in (418, 429):
                self.limited.append((time.monotonic(), float(params.response.headers.get("Retry-After", "0"))))
                self.changed.set()

        tc.on_request_start.append(on_start)
        tc.on_request_end.append(on_end)
        return tc

    async def wait_limited(self, n: int) -> None:
        """Wait until ``n`` rate-limit answers were received (wrap in a timeout)."""
        while len(self.limited) < n:
            self.changed.clear()
            await self.changed.wait()

    def early_requests(self) -> list[tuple[float, str]]:
        """Requests sent while a Retry-After was still running."""
        return [(t, p) for t, p in self.sent for (at, wait) in self.limited if at < t < at + wait - 0.01]


class Sim:
    """Control-API client for the simulator."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url.rstrip("/")

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(f"{self.url}{path}", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def advance(self, seconds: int) -> None:
        await self.post("/sim/v1/advance", {"seconds": seconds})

    async def fault(self, **body: Any) -> None:
        await self.post("/sim/v1/faults", body)

    async def state(self) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/sim/v1/state") as resp:
            return await resp.json()  # type: ignore[no-any-return]

    async def closed_klines(self, symbol: str, interval: str, n: int) -> tuple[list[int], np.ndarray]:
        """The newest ``n`` closed klines per the simulator's REST API (times in s, (5, n) values)."""
        async with self.session.get(f"{self.url}/api/v3/time") as resp:
            now_ms = (await resp.json())["serverTime"]
        params = {"symbol": symbol, "interval": interval, "limit": str(min(n + 1, 1000))}
        async with self.session.get(f"{self.url}/api/v3/klines", params=params) as resp:
            assert resp.status == 200, await resp.text()
            rows = await resp.json()
        closed = [r for r in rows if int(r[6]) < now_ms]
        if len(closed) < n and rows:  # one more page back when n + 1 exceeds the 1000-row limit
            page = {**params, "endTime": str(int(rows[0][0]) - 1), "limit": str(min(n - len(closed), 1000))}
            async with self.session.get(f"{self.url}/api/v3/klines", params=page) as resp:
                closed = (await resp.json()) + closed
        closed = closed[-n:]
        return [int(r[0]) // 1000 for r in closed], np.array([[float(x) for x in r[1:6]] for r in closed]).T


async def truth(sim: Sim) -> dict[tuple[str, str], tuple[list[int], np.ndarray]]:
    return {m: await sim.closed_klines(m[0], m[1], WINDOW) for m in MARKETS}


def window_equals(engine: LiveEngine, expected: dict[tuple[str, str], tuple[list[int], np.ndarray]]) -> bool:
    for (symbol, interval), (times, values) in expected.items():
        bars = engine.window_bars(symbol, interval)
        if bars is None or bars.times.tolist() != times:
            return False
        got = np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume])
        if not np.array_equal(got, values):
            return False
    return True


async def in_sync(engine: LiveEngine, sim: Sim) -> None:
    """Wait (bounded) until the engine is ready and every window equals the simulator's klines."""
    async with asyncio.timeout(WAIT):
        await engine.wait_ready()
    expected = await truth(sim)
    assert all(len(t) == WINDOW for t, _ in expected.values())
    try:
        async with asyncio.timeout(WAIT):
            await engine.wait_until(lambda: window_equals(engine, expected))
    except TimeoutError:
        pytest.fail(f"windows differ from the simulator's klines: {engine.status()}")


@asynccontextmanager
async def started(symbols: list[str], **kw: Any) -> AsyncIterator[Any]:
    running = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=symbols, seed=11, **kw)
    try:
        yield running
    finally:
        await running.close()


@asynccontextmanager
async def live_engine(
    url: str, markets: list[tuple[str, str]], log: RequestLog, *, window: int, weight_limit: int = 6000
) -> AsyncIterator[LiveEngine]:
    async with aiohttp.ClientSession(trace_configs=[log.trace()]) as session:
        rest = BinanceRest(session, url, gate=RateGate(weight_limit=weight_limit))
        streams = StreamSettings(
            stall_timeout_s=1.5, rotate_after_s=None, backoff_initial_s=0.05, backoff_max_s=0.5, control_interval_s=0.05
        )
        engine = LiveEngine(
            session=session,
            rest=rest,
            stream_url=url.replace("http", "ws", 1),
            config=EngineConfig(window_bars=window, streams=streams, retry_initial_s=0.05),
            rng=random.Random(5),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


@pytest.mark.slow
async def test_windows_equal_the_exchange_after_every_advance_despite_faults() -> None:
    """Drops, a stall, serverShutdown, an age cut and 429s never leave a window wrong."""
    rng = random.Random(20)
    log = RequestLog()
    async with started(SYMBOLS) as running, aiohttp.ClientSession() as ctl_session:
        sim = Sim(ctl_session, running.url)
        async with live_engine(running.url, MARKETS, log, window=WINDOW) as engine:
            await in_sync(engine, sim)

            async def step(seconds: int) -> None:
                await sim.advance(seconds)
                await in_sync(engine, sim)

            # 20 stream drops at random moments, with trades and closes around them
            for i in range(20):
                when = rng.choice(["before", "between", "after"])
                if when == "before":
                    await sim.fault(drop_streams=True)
                await sim.post("/sim/v1/price", {"symbol": rng.choice(SYMBOLS), "price": f"{100 + i}.5"})
                await sim.advance(rng.randint(1, 200))
                if when == "between":
                    await sim.fault(drop_streams=True)
                await step(rng.randint(1, 400))
                if when == "after":
                    await sim.fault(drop_streams=True)

            # a 90-second stall: detected, replaced, backfilled
            stalls_before = sum(c.stats.stalls for c in engine.streams.connections)
            await sim.fault(stall_streams_s=90)
            await step(60)
            await step(60)
            assert sum(c.stats.stalls for c in engine.streams.connections) > stalls_before

            # serverShutdown
            await sim.fault(server_shutdown=True)
            await step(120)
            assert sum(c.stats.shutdowns for c in engine.streams.connections) >= 1

            # the exchange's connection-age cut, and our own proactive rotation
            connects_before = sum(c.stats.connects for c in engine.streams.connections)
            await sim.fault(max_connection_age_s=1)
            async with asyncio.timeout(WAIT):  # the exchange cuts the connection after one second
                await engine.wait_until(
                    lambda: sum(c.stats.connects for c in engine.streams.connections) > connects_before
                )
            await step(180)
            await sim.fault(reset=True)
            engine.streams.restart_all("rotate")
            await step(60)
            assert sum(c.stats.connects for c in engine.streams.connections) > connects_before + 1

            # three 429 answers with Retry-After during a backfill
            await sim.fault(http_error={"status": 429, "retry_after": 2, "count": 3})
            await sim.fault(drop_streams=True)
            async with asyncio.timeout(WAIT):
                await log.wait_limited(3)  # the engine's backfill met all three
            await step(240)
            assert len(log.limited) == 3
            assert log.early_requests() == []

            status = engine.status()
            assert all(m["bars"] == WINDOW for m in status["markets"])


@pytest.mark.slow
async def test_two_hundred_symbols_warm_up_within_the_weight_limit() -> None:
    """200 symbols × 2 intervals × 1000 bars warm up without a single rate-limit answer."""
    symbols = [f"T{i:03d}USDT" for i in range(200)]
    markets = [(s, i) for s in symbols for i in INTERVALS]
    log = RequestLog()
    async with started(symbols) as running, aiohttp.ClientSession() as ctl_session:
        sim = Sim(ctl_session, running.url)
        async with live_engine(running.url, markets, log, window=1000) as engine:
            async with asyncio.timeout(120):
                await engine.wait_ready()
            state = await sim.state()
            assert log.limited == []
            assert all(m["bars"] == 1000 for m in engine.status()["markets"])
            assert int(state.get("weight_used_1m", 0)) <= 6000
            times, values = await sim.closed_klines(symbols[17], "5m", 1000)
            bars = engine.window_bars(symbols[17], "5m")
            assert bars is not None and bars.times.tolist() == times
            assert np.array_equal(np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume]), values)
