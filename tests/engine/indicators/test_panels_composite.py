"""Composite panels (cipher_b, wavetrend, rsi_mfi_stoch, kalman_volume): math, signals, causality."""

from __future__ import annotations

import numpy as np
import pytest

from engine.bars import Bars
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.model import PanelResult
from engine.indicators.panels.cipher_b import CIPHER_B
from engine.indicators.panels.fractals import divergences, fractal_centres
from engine.indicators.panels.kalman_volume import KALMAN_VOLUME
from engine.indicators.panels.rsi_mfi_stoch import RSI_MFI_STOCH
from engine.indicators.panels.wavetrend import WAVETREND, wavetrend_core
from engine.indicators.params import IndicatorParamError
from engine.sample_data import sample_bars

ALL = (CIPHER_B, WAVETREND, RSI_MFI_STOCH, KALMAN_VOLUME)


def walk(n: int, seed: int = 3) -> Bars:
    rng = np.random.default_rng(seed)
    close = 50 + np.cumsum(rng.normal(0, 1, n))
    close = np.abs(close) + 5
    open_ = np.concatenate(([close[0]], close[:-1]))
    high = np.maximum(open_, close) + rng.uniform(0, 1, n)
    low = np.minimum(open_, close) - rng.uniform(0, 0.5, n)
    return Bars(open_, high, low, close, rng.uniform(100, 1000, n))


def run(d: IndicatorDef, bars: Bars, **params: object) -> PanelResult:
    return d.compute(bars, d.configure(params), ComputeContext())


def prefix(bars: Bars, k: int) -> Bars:
    return Bars(bars.open[:k], bars.high[:k], bars.low[:k], bars.close[:k], bars.volume[:k])


def _ema_ref(x: list[float], n: int) -> list[float]:
    out = [float("nan")] * len(x)
    start = next((i for i, v in enumerate(x) if v == v), None)
    if start is None or len(x) - start < n:
        return out
    prev = sum(x[start : start + n]) / n
    out[start + n - 1] = prev
    a = 2 / (n + 1)
    for i in range(start + n, len(x)):
        prev = a * x[i] + (1 - a) * prev
        out[i] = prev
    return out


def test_wavetrend_core_matches_a_plain_python_reference() -> None:
    """esa/de/ci/WT1/WT2 computed with loops agree within 1e-9."""
    bars = walk(400)
    ap = [(h + l + c) / 3 for h, l, c in zip(bars.high, bars.low, bars.close, strict=True)]
    esa = _ema_ref(ap, 9)
    de = _ema_ref([abs(a - e) if e == e else float("nan") for a, e in zip(ap, esa, strict=True)], 9)
    ci = [(a - e) / (0.015 * d) if d == d and d > 0 else float("nan") for a, e, d in zip(ap, esa, de, strict=True)]
    wt1 = _ema_ref(ci, 12)
    wt2 = [float("nan")] * len(wt1)
    for i in range(2, len(wt1)):
        wt2[i] = (wt1[i] + wt1[i - 1] + wt1[i - 2]) / 3
    ours1, ours2 = wavetrend_core(bars, 9, 12)
    np.testing.assert_allclose(ours1, wt1, rtol=1e-9, equal_nan=True)
    np.testing.assert_allclose(ours2, wt2, rtol=1e-9, equal_nan=True)


def test_fractals_and_divergences_on_a_hand_built_oscillator() -> None:
    """Two rising oscillator troughs under two falling price lows make one bullish divergence."""
    osc = np.array([0, -10, -50, -20, -10, -5, -30, -45, -30, -20, -5], dtype=float)
    low = np.array([10, 9, 8, 9, 9.5, 9.5, 8, 7, 8, 9, 9.5])
    _tops, bottoms = fractal_centres(osc)
    assert bottoms.tolist() == [2, 7]
    (div,) = divergences(osc, low + 1, low, bear_min=15, bull_max=-40)
    assert (div.previous, div.centre, div.bullish) == (2, 7, True)


def test_wavetrend_crosses_in_the_oversold_zone_are_cross_up_os() -> None:
    """Labels depend on the WT2 zone at the crossing bar."""
    result = run(WAVETREND, walk(1500))
    wt2 = result.lines[1].y
    for s in result.signals():
        if s.label == "cross_up_os":
            assert wt2[s.x] <= -53
        elif s.label == "cross_down_ob":
            assert wt2[s.x] >= 53
    assert {s.label for s in result.signals()} <= set(WAVETREND.signals)


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_signals_are_causal_a_prefix_sees_the_same_confirmed_signals(d: IndicatorDef) -> None:
    """Computing on bars[:k+1] yields exactly the signals confirmed by bar k."""
    bars = walk(700)
    full = run(d, bars)
    k = 550
    cut = run(d, prefix(bars, k + 1))
    expect = sorted((s.x, s.label, s.confirmed_index) for s in full.signals() if s.confirmed_index <= k)
    got = sorted((s.x, s.label, s.confirmed_index) for s in cut.signals())
    assert got == expect


def test_cipher_b_structure_follows_chartgen() -> None:
    """Lines, hlines in order, three fills, one histogram, y_range and declared signals."""
    result = run(CIPHER_B, sample_bars(300))
    assert result.label == "Cipher B" and not result.is_overlay
    assert [ln.label for ln in result.lines] == ["WT1", "WT2", "RSI", "Stoch K", "Stoch D"]
    assert [h.y for h in result.hlines] == [60.0, 100.0, -60.0, 0.0]
    assert len(result.fills) == 3 and len(result.histograms) == 1 and result.y_range == (-105.0, 105.0)
    labels = {s.label for s in result.signals()}
    assert labels and labels <= set(CIPHER_B.signals)


def test_cipher_b_rsi_zone_signals_fire_on_entry_not_on_every_bar() -> None:
    """rsi_oversold marks only bars where RSI crosses to ≤ 30."""
    result = run(CIPHER_B, sample_bars(500))
    r = result.lines[2].y
    for s in result.signals():
        if s.label == "rsi_oversold":
            assert r[s.x] <= 30 < r[s.x - 1]
    in_zone = int(np.sum(r <= 30))
    entries = sum(1 for s in result.signals() if s.label == "rsi_oversold")
    assert 0 < entries < in_zone


def test_cipher_b_divergence_signals_are_confirmed_two_bars_after_the_fractal() -> None:
    """Divergence dots sit at the fractal centre and confirm two bars later."""
    result = run(CIPHER_B, walk(2000))
    divs = [s for s in result.signals() if s.label.endswith("_div")]
    assert divs
    assert all(s.confirmed_index == s.x + 2 for s in divs)


def test_cipher_b_under_five_bars_is_an_empty_labelled_result() -> None:
    """Fewer than five bars: label and y_range only."""
    result = run(CIPHER_B, sample_bars(4))
    assert result.label == "Cipher B" and result.lines == [] and result.y_range == (-105.0, 105.0)


def test_rsi_mfi_stoch_signals_are_cross_events() -> None:
    """rsi_oversold is an upward cross of the oversold level; stoch signals need K beyond 20/80."""
    result = run(RSI_MFI_STOCH, walk(1500))
    r, k = result.lines[0].y, result.lines[2].y
    for s in result.signals():
        if s.label == "rsi_oversold":
            assert r[s.x - 1] <= 30 < r[s.x]
        if s.label == "stoch_oversold":
            assert k[s.x] < 20
    assert [h.y for h in result.hlines] == [70.0, 50.0, 30.0]


def test_kalman_volume_signals_follow_the_previous_value_zone() -> None:
    """buy_oversold only when the value was below −0.6 before crossing up."""
    result = run(KALMAN_VOLUME, walk(1500))
    assert result.label == "KVF" and len(result.fills) == 4 and len(result.histograms) == 2
    values = {d.x: d.y for d in result.dots if d.label is None and d.size == 1.5}
    for s in result.signals():
        if s.label == "buy_oversold":
            assert values[s.x - 1] < -0.6


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 4, 5, 200, 5000])
def test_composites_compute_on_any_length_without_infinities(d: IndicatorDef, n: int) -> None:
    """No exception and no ±inf on any length, including flat data."""
    for bars in (sample_bars(n), Bars(*(np.full(n, 3.0),) * 4, np.zeros(n))):
        result = run(d, bars)
        for arr in [ln.y for ln in result.lines] + [h.y for h in result.histograms]:
            assert len(arr) == n and not np.isinf(arr).any()
        assert all(np.isfinite(dot.y) for dot in result.dots)


@pytest.mark.parametrize(
    ("d", "param", "value"),
    [
        (CIPHER_B, "wt_channel_length", 0),
        (CIPHER_B, "dot_mode", "loud"),
        (WAVETREND, "ch_len", -1),
        (RSI_MFI_STOCH, "stoch_k", 0),
        (KALMAN_VOLUME, "k", 0),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(d: IndicatorDef, param: str, value: object) -> None:
    """Zero, negative or unknown values give IndicatorParamError naming the field."""
    with pytest.raises(IndicatorParamError, match=f"'{param}'"):
        d.configure({param: value})
