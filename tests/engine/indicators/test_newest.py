"""The per-bar path equals the full computation at every bar (engine.indicators.newest).

For every indicator that declares ``newest``: 10,000 random bars (3,000-4,000 for the four whose
full computation — the reference — costs 0.4-2 ms a bar; a random walk with price
gaps, runs of identical prices, runs of zero volume and missing hours), fed one closed bar at
a time through a 1,000-bar sliding window as the live engine does; at every bar the newest
line values must be bit-identical to the full computation's last values and the signals equal
to the full computation's signals confirmed on that bar (same labels, order and values).
Hypothesis adds short series with random parameters.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.bars import Bars
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.newest import Newest, from_result
from engine.indicators.registry import all_indicators
from testkit.lanes import stretch

WITH_NEWEST = [d for d in all_indicators() if d.newest is not None]
CTX = ComputeContext(symbol="BTCUSDT", interval="1h")


def rough_bars(n: int, seed: int) -> Bars:
    """A random walk with the awkward cases: price gaps, flat runs, zero volume, missing hours."""
    rng = np.random.default_rng(seed)
    rets = rng.normal(0, 0.01, n)
    jumps = rng.random(n) < 0.01
    rets[jumps] += rng.normal(0, 0.08, int(jumps.sum()))
    close = 50 * np.exp(np.cumsum(rets))
    flat = np.zeros(n, dtype=bool)
    for start in rng.integers(0, n, max(1, n // 500)):
        flat[start : start + int(rng.integers(5, 60))] = True
    for i in np.flatnonzero(flat):
        if i > 0:
            close[i] = close[i - 1]
    open_ = np.concatenate([[close[0]], close[:-1]])
    spread = np.where(flat, 0.0, np.abs(rng.normal(0, 0.004, n)) * close)
    high = np.maximum(open_, close) + spread
    low = np.minimum(open_, close) - spread
    volume = rng.lognormal(8, 1.0, n)
    volume[rng.random(n) < 0.05] = 0.0
    for start in rng.integers(0, n, max(1, n // 700)):
        volume[start : start + int(rng.integers(3, 40))] = 0.0
    steps = np.where(rng.random(n) < 0.02, 3600 * rng.integers(2, 6, n), 3600)
    times = 1_600_000_000 + np.cumsum(steps).astype(np.int64)
    return Bars(open_, high, low, close, volume, times)


def window_at(bars: Bars, i: int, size: int) -> Bars:
    s = max(0, i + 1 - size)
    e = i + 1
    assert bars.times is not None
    return Bars(bars.open[s:e], bars.high[s:e], bars.low[s:e], bars.close[s:e], bars.volume[s:e], bars.times[s:e])


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_same(got: Newest, want: Newest, where: str) -> None:
    assert [label for label, _ in got.values] == [label for label, _ in want.values], where
    for (label, a), (_, b) in zip(got.values, want.values, strict=True):
        assert same_float(a, b), f"{where}: {label} per-bar {a!r} != full {b!r}"
    assert [label for label, _ in got.signals] == [label for label, _ in want.signals], where
    for (label, a), (_, b) in zip(got.signals, want.signals, strict=True):
        assert same_float(a, b), f"{where}: signal {label} per-bar {a!r} != full {b!r}"


def check_every_bar(d: IndicatorDef, bars: Bars, params: dict, window: int) -> int:
    """Compare at every bar; returns how many signals were compared (so a test can't pass on none)."""
    assert d.newest is not None
    p = d.configure(params)
    signals = 0
    for i in range(len(bars)):
        w = window_at(bars, i, window)
        want = from_result(d.compute(w, p, CTX), w)
        assert_same(d.newest(w, p), want, f"{d.name} {params} bar {i}")
        signals += len(want.signals)
    return signals


SLOW_FULL = {"heikin_ashi": 3000, "supertrend": 4000, "sar": 4000, "kalman_volume": 4000}
"""Bars for the indicators whose full computation (the reference) costs 0.4-2 ms a bar."""


@pytest.mark.slow  # about 2 minutes over every indicator: run by `make chaos`, keeping `make test` under 15
@pytest.mark.parametrize("d", WITH_NEWEST, ids=lambda d: d.name)
def test_per_bar_path_equals_full_computation_on_10000_rough_bars(d: IndicatorDef) -> None:
    bars = rough_bars(SLOW_FULL.get(d.name, 10_000), seed=11)
    signals = check_every_bar(d, bars, {}, window=1000)
    if d.signals:
        assert signals > 40, f"{d.name}: only {signals} signals compared"


def test_strict_and_classic_cipher_b_both_checked() -> None:
    d = next(x for x in WITH_NEWEST if x.name == "cipher_b")
    bars = stretch(3000, 1500)  # the quick lane's stretch (testkit/lanes.py)
    assert check_every_bar(d, rough_bars(bars, seed=5), {"dot_mode": "classic"}, window=1000) > 100 * bars // 3000


PARAMS = {
    "rsi": st.fixed_dictionaries({"length": st.integers(2, 40)}),
    "macd": st.fixed_dictionaries(
        {"fast": st.integers(2, 20), "slow": st.integers(21, 60), "signal": st.integers(2, 20)}
    ),
    "bbands": st.fixed_dictionaries({"period": st.integers(2, 60), "std_dev": st.floats(0.5, 4.0)}),
    "wavetrend": st.fixed_dictionaries({"ch_len": st.integers(2, 30), "avg_len": st.integers(2, 30)}),
    "cipher_b": st.fixed_dictionaries(
        {
            "dot_mode": st.sampled_from(["strict", "classic"]),
            "wt_channel_length": st.integers(2, 30),
            "wt_average_length": st.integers(2, 30),
            "wt_oversold": st.floats(-100, -10),
            "wt_overbought": st.floats(10, 100),
        }
    ),
    "heikin_ashi": st.fixed_dictionaries({}),
    "supertrend": st.fixed_dictionaries({"period": st.integers(1, 40), "multiplier": st.floats(0.5, 6.0)}),
    "sar": st.fixed_dictionaries(
        {"af_start": st.floats(0.005, 0.05), "af_step": st.floats(0.005, 0.05), "af_max": st.floats(0.05, 0.5)}
    ),
    "kalman_volume": st.fixed_dictionaries(
        {"vzo_length": st.integers(2, 80), "k": st.floats(0.01, 1.0), "sig_length": st.integers(1, 20)}
    ),
    "rsi_mfi_stoch": st.fixed_dictionaries(
        {
            "rsi_length": st.integers(2, 30),
            "mfi_length": st.integers(2, 30),
            "stoch_k": st.integers(2, 30),
            "stoch_d": st.integers(1, 6),
            "stoch_smooth": st.integers(1, 6),
            "oversold": st.floats(5, 45),
            "overbought": st.floats(55, 95),
        }
    ),
}


def test_every_indicator_with_a_per_bar_path_has_random_parameters() -> None:
    assert {d.name for d in WITH_NEWEST} == set(PARAMS)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(PARAMS)),
    data=st.data(),
    n=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
    window=st.sampled_from([5, 60, 250]),
)
def test_per_bar_path_with_random_parameters_and_windows(
    name: str, data: st.DataObject, n: int, seed: int, window: int
) -> None:
    d = next(x for x in WITH_NEWEST if x.name == name)
    params = data.draw(PARAMS[name])
    check_every_bar(d, rough_bars(n, seed), params, window)
