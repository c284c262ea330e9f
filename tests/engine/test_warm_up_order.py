"""Warm-up: markets with armed alerts first, progress in the readiness reasons, the weight
budget held over every rolling minute (engine.feed.backfill, engine.market_data.rate_gate)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.market_data.rate_gate as rate_gate
from engine.feed.backfill import BackfillScheduler
from engine.feed.stream_settings import StreamSettings
from engine.live import READINESS_MARKETS, EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import RateLimited
from engine.market_data.rate_gate import RateGate
from simulator import start_simulator


async def test_the_scheduler_serves_ranked_keys_first_then_in_request_order() -> None:
    served: list[Hashable] = []
    done = asyncio.Event()

    async def job(key: Hashable) -> None:
        served.append(key)
        if len(served) == 6:
            done.set()

    urgent = {"c", "e"}
    scheduler = BackfillScheduler(job, concurrency=1, rank=lambda k: 0 if k in urgent else 1)
    for key in "abcdef":
        scheduler.request(key)
    runner = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(done.wait(), 5)
    finally:
        runner.cancel()
    assert served == ["c", "e", "a", "b", "d", "f"]


async def test_markets_with_armed_alerts_warm_first_and_readiness_shows_progress() -> None:
    """30 markets, one backfill at a time: the 5 followed with priority (as the alert evaluator
    follows its markets) are warm before any other; /readyz's first reason counts the warm ones."""
    symbols = [f"P{i:02d}USDT" for i in range(30)]
    urgent = {symbols[i] for i in (3, 11, 17, 25, 29)}
    running = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=symbols, seed=3)
    try:
        async with aiohttp.ClientSession() as session:
            engine = LiveEngine(
                session=session,
                rest=BinanceRest(session, running.url, gate=RateGate()),
                stream_url=running.url.replace("http", "ws", 1),
                config=EngineConfig(
                    window_bars=200, backfill_concurrency=1, streams=StreamSettings(stall_timeout_s=None)
                ),
                rng=random.Random(1),
            )
            for s in symbols:
                engine.follow(s, "1m", priority=s in urgent)
            engine.follow(symbols[3], "1m")  # a second, plain reference keeps the priority
            assert engine.readiness()[1][:2] == ["engine not running", "warming 0/30"]
            order: list[str] = []
            progress: list[str] = []
            async with engine.running():
                async with asyncio.timeout(60):
                    while len(order) < len(symbols):
                        await engine.sync.wait_changed()
                        for (sym, _), state in engine.sync.windows.items():
                            if state.warm and sym not in order:
                                order.append(sym)
                        reasons = engine.readiness()[1]
                        if reasons and reasons[0].startswith("warming "):
                            progress.append(reasons[0])
                    await engine.wait_ready()
                assert engine.readiness() == (True, [])
            assert set(order[:5]) == urgent, order
            counts = [int(p.split()[1].split("/")[0]) for p in progress]
            assert counts == sorted(counts) and counts[-1] >= 20 and all(p.endswith("/30") for p in progress)
            engine.unfollow(symbols[3], "1m", priority=True)
            assert (symbols[3], "1m") not in engine.sync.priority
            engine.unfollow(symbols[11], "1m", priority=True)
            assert (symbols[11], "1m") not in engine.sync.priority and not engine.follows(symbols[11], "1m")
    finally:
        await running.close()


def test_readiness_names_the_first_markets_and_counts_the_rest() -> None:
    engine = LiveEngine(session=None, rest=None, stream_url="ws://127.0.0.1:1")  # type: ignore[arg-type]
    for i in range(READINESS_MARKETS + 7):
        engine.follow(f"R{i:03d}USDT", "1h")
    ready, reasons = engine.readiness()
    assert not ready
    assert reasons[:2] == ["engine not running", f"warming 0/{READINESS_MARKETS + 7}"]
    assert len(reasons) == 2 + READINESS_MARKETS + 1
    assert reasons[-1] == "… and 7 more markets not ready"
    assert reasons[2].startswith("R000USDT 1h: ")


class FakeClocks:
    """Monotonic and wall clocks that only move when the gate sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = 1_800_000_030.0

    def advance(self, s: float) -> None:
        self.mono += s
        self.wall += s


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 40), st.floats(0, 7), st.booleans()),
        min_size=1,
        max_size=300,
    ),
)
def test_the_gate_never_spends_more_than_its_budget_in_any_rolling_minute(
    steps: list[tuple[int, float, bool]],
) -> None:
    """Requests of random weights at random moments, the exchange reporting its per-calendar-minute
    count (Binance) on some answers: over every 60 s span, the weight sent stays within the budget
    — also across a minute boundary, where a calendar count alone restarts from zero."""
    clocks = FakeClocks()
    gate = RateGate(weight_limit=100, budget_fraction=0.8)
    sent: list[tuple[float, int]] = []
    calendar: dict[int, int] = {}

    async def fake_sleep(s: float) -> None:
        clocks.advance(s)

    mp = pytest.MonkeyPatch()
    mp.setattr(rate_gate.time, "monotonic", lambda: clocks.mono)
    mp.setattr(rate_gate.time, "time", lambda: clocks.wall)
    mp.setattr(rate_gate.asyncio, "sleep", fake_sleep)
    try:

        async def run() -> None:
            for weight, gap, report in steps:
                clocks.advance(gap)
                try:
                    await gate.acquire(weight, max_wait_s=120)
                except RateLimited:
                    continue
                sent.append((clocks.mono, weight))
                minute = int(clocks.wall // 60)
                calendar[minute] = calendar.get(minute, 0) + weight
                if report:
                    gate.observe(200, {"X-MBX-USED-WEIGHT-1M": str(calendar[minute])})

        asyncio.run(run())
    finally:
        mp.undo()
    for t, _ in sent:
        in_span = sum(w for u, w in sent if t - 60 < u <= t)
        assert in_span <= gate.budget, (t, in_span)
