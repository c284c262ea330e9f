"""Incremental state equals a full recompute at every bar (engine.indicators.incremental).

The live engine's worker is driven bar by bar over 10,000 rough bars (price gaps, flat runs,
zero volume, missing hours; tests/engine/indicators/test_newest.py makes them) — with, now and
then, a backfill of several bars at once and a window cleared and refilled (both make the state
re-seed) — and after every update each indicator's newest values must equal the full
computation over all the bars the window holds: relative 1e−9 (the state keeps TA-Lib's own
recurrences; what differs is the rounding of sums taken in another order).

The window first holds every bar (the full recompute then starts where the state was seeded).
A sliding 1,000-bar window is checked too, with the default lengths: there the recompute
re-seeds at the window's first bar each time, which the state does not, and the two agree only
because the seed's weight has decayed below 1e−9 in 1,000 bars (Wilder 14: 13/14 to the 986th).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bars import Bars
from engine.events import EventBus
from engine.indicator_state import IndicatorEngine, request_id
from engine.indicators.base import ComputeContext
from engine.indicators.newest import from_result
from engine.indicators.registry import IndicatorRequest, all_indicators, lookup
from engine.windows import RollingWindow
from testkit.lanes import stretch
from tests.engine.indicators.test_newest import rough_bars

WITH_STATE = sorted(d.name for d in all_indicators() if d.incremental is not None)
KEY = ("BTCUSDT", "1h")


def close_enough(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def drive(requests: list[IndicatorRequest], bars: Bars, window: int, rng: np.random.Generator) -> tuple[int, int]:
    """Feed ``bars`` through the engine's worker; returns (updates served from the state without a
    new seed, seeds), so a test sees both happened.  Several bars at once are stepped through (a
    catch-up); a window refilled after a clear re-seeds."""
    seeds = [0]

    def counted(req: IndicatorRequest) -> IndicatorRequest:
        factory = req.definition.incremental
        assert factory is not None

        def make(params: Any) -> Any:
            seeds[0] += 1
            return factory(params)

        return IndicatorRequest(req.key, dataclasses.replace(req.definition, incremental=make), req.params)

    requests = [counted(r) for r in requests]
    w = RollingWindow(*KEY, capacity=window)
    engine = IndicatorEngine(lambda _key: w.bars(), EventBus(), defaults=requests)
    wi = engine.add_window(KEY)
    ctx = ComputeContext(symbol=KEY[0], interval=KEY[1])
    assert bars.times is not None
    vals = np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume])
    updates = 0
    i = 0
    loop = asyncio.new_event_loop()
    try:
        while i < len(bars):
            roll = rng.random()
            if roll < 0.002 and i > 0:
                w.clear()  # a hole the backfill could not bridge: refilled from scratch
                take = int(rng.integers(1, 400))
            elif roll < 0.022:
                take = int(rng.integers(2, 8))  # closes that arrived together, or a short gap backfill
            else:
                take = 1
            j = min(len(bars), i + take)
            w.merge_closed(bars.times[i:j], vals[:, i:j])
            i = j
            loop.run_until_complete(engine._update(KEY))
            updates += len(requests)
            data = w.bars()
            for req in requests:
                want = from_result(req.definition.compute(data, req.params, ctx), data)
                got = wi.newest[request_id(req)]
                assert [lab for lab, _ in got.values] == [lab for lab, _ in want.values]
                for (label, a), (_, b) in zip(got.values, want.values, strict=True):
                    assert close_enough(a, b), f"{req.key} {req.params} bar {i - 1}: {label} state {a!r} != full {b!r}"
                assert got.signals == want.signals
    finally:
        loop.close()
    return updates - seeds[0], seeds[0]


def test_every_indicator_with_state_is_checked() -> None:
    assert WITH_STATE == ["bbands", "macd", "rsi"]


def _defaults() -> list[IndicatorRequest]:
    requests = []
    for name in WITH_STATE:
        d = lookup(name)
        assert d is not None
        requests.append(IndicatorRequest(name, d, d.configure(None)))
    return requests


def test_incremental_state_equals_full_recompute_on_10000_rough_bars() -> None:
    n = stretch(10_000, 3_000)  # the quick lane's stretch (testkit/lanes.py)
    steps, seeds = drive(_defaults(), rough_bars(n, seed=23), 10_000, np.random.default_rng(4))
    assert steps > 1.5 * n and seeds > n // 200


def test_in_a_sliding_1000_bar_window_too_with_the_default_lengths() -> None:
    n = stretch(6_000, 2_500)
    steps, seeds = drive(_defaults(), rough_bars(n, seed=31), 1000, np.random.default_rng(8))
    assert steps > 1.66 * n and seeds > n // 300


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 600),
    rsi_len=st.integers(2, 40),
    fast=st.integers(2, 30),
    slow=st.integers(2, 60),
    signal=st.integers(1, 20),
    bb_len=st.integers(1, 60),
    bb_k=st.floats(0.1, 4.0),
)
def test_incremental_state_with_random_parameters(
    seed: int, n: int, rsi_len: int, fast: int, slow: int, signal: int, bb_len: int, bb_k: float
) -> None:
    params = {
        "rsi": {"length": rsi_len},
        "macd": {"fast": fast, "slow": slow, "signal": signal},
        "bbands": {"period": bb_len, "std_dev": bb_k},
    }
    requests = []
    for name, raw in params.items():
        d = lookup(name)
        assert d is not None
        requests.append(IndicatorRequest(name, d, d.configure(raw)))
    drive(requests, rough_bars(n, seed), n, np.random.default_rng(seed))


def test_a_flat_run_long_enough_to_underflow_wilders_averages() -> None:
    """TA-Lib keeps RSI at its last ratio while both averages decay, and answers 0 only once they
    are exactly 0 (after ~1,080 flat bars for length 2): the state does the same."""
    rng = np.random.default_rng(2)
    close = np.concatenate([50 + np.cumsum(rng.normal(0, 1, 30)), np.full(1200, 51.0)])
    bars = Bars(close, close, close, close, np.ones(len(close)), np.arange(len(close), dtype=np.int64) * 3600)
    d = lookup("rsi")
    assert d is not None
    request = IndicatorRequest("rsi", d, d.configure({"length": 2}))
    steps, _ = drive([request], bars, len(close), np.random.default_rng(0))
    assert steps > 500
