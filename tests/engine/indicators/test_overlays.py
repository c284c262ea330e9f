"""Overlay indicators: agreement with `ta`/talipp or a textbook reference, structure, robustness."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import ta
from talipp.indicators import ParabolicSAR
from talipp.ohlcv import OHLCV

from engine.bars import Bars
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.model import PanelResult
from engine.indicators.overlays.bands import BBANDS, DONCHIAN, KELTNER
from engine.indicators.overlays.heikin_ashi import HEIKIN_ASHI
from engine.indicators.overlays.ichimoku import ICHIMOKU
from engine.indicators.overlays.moving_averages import EMA_STACK
from engine.indicators.overlays.pivot import PIVOT
from engine.indicators.overlays.sar import SAR
from engine.indicators.overlays.supertrend import SUPERTREND
from engine.indicators.overlays.vwap import VWAP, VWAP_BANDS
from engine.indicators.params import IndicatorParamError

ALL = (EMA_STACK, BBANDS, KELTNER, DONCHIAN, VWAP, VWAP_BANDS, SUPERTREND, SAR, ICHIMOKU, HEIKIN_ASHI, PIVOT)
REL = 1e-6


def walk(n: int = 3000, seed: int = 11, times: bool = False) -> Bars:
    rng = np.random.default_rng(seed)
    close = 100 + np.cumsum(rng.normal(0, 1, n))
    open_ = np.concatenate(([100.0], close[:-1]))
    high = np.maximum(open_, close) + rng.uniform(0, 1, n)
    low = np.minimum(open_, close) - rng.uniform(0, 1, n)
    volume = rng.uniform(100, 1000, n)
    t = np.arange(n, dtype=np.int64) * 3600 + 1_700_000_000 if times else None
    return Bars(open_, high, low, close, volume, t)


def run(d: IndicatorDef, bars: Bars, **params: object) -> PanelResult:
    return d.compute(bars, d.configure(params), ComputeContext())


def lines(d: IndicatorDef, bars: Bars, **params: object) -> dict[str, np.ndarray]:
    return {ln.label or "": ln.y for ln in run(d, bars, **params).lines}


def close_enough(ours: np.ndarray, ref: np.ndarray, start: int) -> None:
    a, b = ours[start:], np.asarray(ref, dtype=float)[start:]
    assert np.isfinite(a).all() and np.isfinite(b).all()
    np.testing.assert_allclose(a, b, rtol=REL, atol=0)


def test_ema_stack_matches_ta_once_the_seed_has_decayed() -> None:
    """Each EMA agrees with ta's EMA (first-value seeded) after the seed difference decays."""
    bars = walk()
    ours = lines(EMA_STACK, bars)
    for n in (8, 21, 50, 200):
        ref = ta.trend.EMAIndicator(pd.Series(bars.close), window=n).ema_indicator().to_numpy()
        close_enough(ours[f"EMA {n}"], ref, 2500)
        assert np.isnan(ours[f"EMA {n}"][n - 2]) and np.isfinite(ours[f"EMA {n}"][n - 1])


def test_bollinger_matches_ta() -> None:
    """Upper/mid/lower equal ta's population-std Bollinger Bands from the first value."""
    bars = walk(600)
    ours = lines(BBANDS, bars)
    bb = ta.volatility.BollingerBands(pd.Series(bars.close), window=20, window_dev=2)
    close_enough(ours["BB Upper"], bb.bollinger_hband().to_numpy(), 19)
    close_enough(ours["BB Mid"], bb.bollinger_mavg().to_numpy(), 19)
    close_enough(ours["BB Lower"], bb.bollinger_lband().to_numpy(), 19)


def test_donchian_matches_ta() -> None:
    """Donchian bands equal ta's DonchianChannel."""
    bars = walk(600)
    ours = lines(DONCHIAN, bars)
    dc = ta.volatility.DonchianChannel(pd.Series(bars.high), pd.Series(bars.low), pd.Series(bars.close), window=20)
    close_enough(ours["DC Upper"], dc.donchian_channel_hband().to_numpy(), 19)
    close_enough(ours["DC Lower"], dc.donchian_channel_lband().to_numpy(), 19)
    close_enough(ours["DC Mid"], dc.donchian_channel_mband().to_numpy(), 19)


def test_keltner_matches_ta_ema_and_atr_channel() -> None:
    """Keltner = EMA(close) ± 1.5·ATR agrees with ta's (non-original) KeltnerChannel after seeding decays."""
    bars = walk()
    ours = lines(KELTNER, bars)
    kc = ta.volatility.KeltnerChannel(
        pd.Series(bars.high),
        pd.Series(bars.low),
        pd.Series(bars.close),
        window=20,
        window_atr=20,
        original_version=False,
        multiplier=1.5,
    )
    close_enough(ours["KC Mid"], kc.keltner_channel_mband().to_numpy(), 1000)
    close_enough(ours["KC Upper"], kc.keltner_channel_hband().to_numpy(), 1000)
    close_enough(ours["KC Lower"], kc.keltner_channel_lband().to_numpy(), 1000)


def test_ichimoku_matches_ta_without_displacement() -> None:
    """Tenkan, Kijun and both spans equal ta's IchimokuIndicator(visual=False)."""
    bars = walk(600)
    ours = lines(ICHIMOKU, bars)
    ich = ta.trend.IchimokuIndicator(pd.Series(bars.high), pd.Series(bars.low), window1=9, window2=26, window3=52)
    close_enough(ours["Tenkan"], ich.ichimoku_conversion_line().to_numpy(), 8)
    close_enough(ours["Kijun"], ich.ichimoku_base_line().to_numpy(), 25)
    close_enough(ours["Senkou A"], ich.ichimoku_a().to_numpy(), 25)
    close_enough(ours["Senkou B"], ich.ichimoku_b().to_numpy(), 51)


def test_parabolic_sar_matches_talipp() -> None:
    """Every SAR dot equals talipp's ParabolicSAR once both have started."""
    bars = walk(1000)
    result = run(SAR, bars)
    ours = np.full(len(bars), np.nan)
    for d in result.dots:
        if d.label is None:
            ours[d.x] = d.y
    ohlcv = [OHLCV(*row) for row in zip(bars.open, bars.high, bars.low, bars.close, bars.volume, strict=True)]
    ref = [np.nan if v is None else v.value for v in ParabolicSAR(0.02, 0.02, 0.2, input_values=ohlcv)]
    close_enough(ours, np.asarray(ref), 50)


def test_vwap_matches_a_per_day_reference_and_resets_at_midnight() -> None:
    """VWAP equals Σ(TP·V)/ΣV accumulated within each UTC day."""
    bars = walk(200, times=True)
    ours = lines(VWAP, bars)["VWAP"]
    tp = (bars.high + bars.low + bars.close) / 3
    ref = np.empty(len(bars))
    assert bars.times is not None
    day = bars.times // 86400
    num = den = 0.0
    for i in range(len(bars)):
        if i and day[i] != day[i - 1]:
            num = den = 0.0
        num += tp[i] * bars.volume[i]
        den += bars.volume[i]
        ref[i] = num / den
    close_enough(ours, ref, 0)
    first_of_day = np.flatnonzero(np.diff(day)) + 1
    np.testing.assert_allclose(ours[first_of_day], tp[first_of_day], rtol=1e-12)


def test_vwap_bands_bracket_the_vwap() -> None:
    """Upper ≥ VWAP ≥ Lower wherever defined, and the middle line is the VWAP."""
    bars = walk(300, times=True)
    got = lines(VWAP_BANDS, bars, std_dev=2.0)
    np.testing.assert_allclose(got["VWAP"], lines(VWAP, bars)["VWAP"])
    assert (got["VWAP Upper"] >= got["VWAP"] - 1e-9).all() and (got["VWAP Lower"] <= got["VWAP"] + 1e-9).all()


def test_pivot_uses_the_previous_bar() -> None:
    """P, R1, S1, R2, S2 come from bar i−1; bar 0 has none."""
    bars = walk(10)
    got = lines(PIVOT, bars)
    p = (bars.high[3] + bars.low[3] + bars.close[3]) / 3
    assert got["Pivot"][4] == pytest.approx(p)
    assert got["R1"][4] == pytest.approx(2 * p - bars.low[3])
    assert got["S2"][4] == pytest.approx(p - (bars.high[3] - bars.low[3]))
    assert np.isnan(got["Pivot"][0])


@pytest.mark.parametrize("d", [SUPERTREND, SAR, HEIKIN_ASHI], ids=lambda d: d.name)
def test_trend_overlays_flip_only_where_the_trend_changes(d: IndicatorDef) -> None:
    """flip_up/flip_down dots alternate and are causal: computing on a prefix gives the same flips."""
    bars = walk(400)
    result = run(d, bars)
    flips = [(s.x, s.label) for s in result.signals()]
    assert flips and {lab for _, lab in flips} <= {"flip_up", "flip_down"}
    labels = [lab for _, lab in sorted(flips)]
    assert all(a != b for a, b in itertools.pairwise(labels))
    cut = flips[len(flips) // 2][0]
    prefix = run(
        d,
        Bars(
            bars.open[: cut + 1],
            bars.high[: cut + 1],
            bars.low[: cut + 1],
            bars.close[: cut + 1],
            bars.volume[: cut + 1],
        ),
    )
    assert [(s.x, s.label) for s in prefix.signals()] == [f for f in flips if f[0] <= cut]


def test_labels_and_structure_follow_chartgen() -> None:
    """Labels, line labels and fills are chartgen's."""
    bars = walk(300)
    assert [ln.label for ln in run(EMA_STACK, bars).lines] == ["EMA 8", "EMA 21", "EMA 50", "EMA 200"]
    assert run(BBANDS, bars).label == "BB" and len(run(BBANDS, bars).fills) == 1
    assert run(KELTNER, bars).label == "KC" and run(DONCHIAN, bars).label == "DC"
    assert [ln.label for ln in run(ICHIMOKU, bars).lines] == ["Tenkan", "Kijun", "Senkou A", "Senkou B"]
    assert run(SUPERTREND, bars).lines == [] and run(SUPERTREND, bars).label == "Supertrend"
    assert all(d.is_overlay for d in ALL)
    assert {"bb", "bollinger"} <= set(BBANDS.aliases) and "psar" in SAR.aliases and "st" in SUPERTREND.aliases


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 2, 5, 200, 5000])
def test_every_overlay_computes_on_any_length_without_infinities(d: IndicatorDef, n: int) -> None:
    """No exception, no ±inf, arrays one value per bar."""
    result = run(d, walk(n, times=True) if n else Bars.empty())
    for arr in [ln.y for ln in result.lines] + [f.y1 for f in result.fills] + [f.y2 for f in result.fills]:
        assert len(arr) == n and not np.isinf(arr).any()
    assert all(np.isfinite(dot.y) for dot in result.dots)


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_flat_zero_volume_data_is_harmless(d: IndicatorDef) -> None:
    """Constant prices and no volume give no infinities and no warnings."""
    a = np.full(60, 5.0)
    result = run(d, Bars(a, a.copy(), a.copy(), a.copy(), np.zeros(60)))
    for ln in result.lines:
        assert not np.isinf(ln.y).any()


@pytest.mark.parametrize(
    ("d", "param"),
    [(BBANDS, "period"), (KELTNER, "period"), (DONCHIAN, "period"), (SUPERTREND, "period"), (ICHIMOKU, "kijun")],
)
def test_a_period_of_zero_is_refused_naming_the_parameter(d: IndicatorDef, param: str) -> None:
    """period 0 → IndicatorParamError that names the parameter."""
    with pytest.raises(IndicatorParamError, match=f"'{param}'"):
        d.configure({param: 0})
