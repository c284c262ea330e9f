"""Standard panel indicators: oracle agreement with `ta`/talipp, structure, robustness, params."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import ta
from talipp.indicators import ADX as TalippADX
from talipp.indicators import ATR as TalippATR
from talipp.indicators import MACD as TalippMACD
from talipp.indicators import OBV as TalippOBV
from talipp.indicators import RSI as TalippRSI
from talipp.ohlcv import OHLCV

from engine.bars import Bars, FloatArray
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.model import PanelResult
from engine.indicators.panels.adx import ADX
from engine.indicators.panels.macd import MACD
from engine.indicators.panels.oscillators import CCI, MFI, ROC, RSI, STOCH, WILLIAMS_R
from engine.indicators.panels.volatility import ATR, HISTVOL, bars_per_year
from engine.indicators.panels.volume_flow import AD, CMF, CVD, OBV
from engine.indicators.params import IndicatorParamError
from engine.sample_data import sample_bars

ALL = (MACD, RSI, STOCH, CCI, ROC, MFI, WILLIAMS_R, ATR, HISTVOL, OBV, AD, CMF, CVD, ADX)
N = 600
REL = 1e-6


def walk(n: int = N, seed: int = 7) -> Bars:
    rng = np.random.default_rng(seed)
    close = 100 + np.cumsum(rng.normal(0, 1, n))
    open_ = np.concatenate(([100.0], close[:-1]))[:n]
    high = np.maximum(open_, close) + rng.uniform(0, 1, n)
    low = np.minimum(open_, close) - rng.uniform(0, 1, n)
    volume = rng.uniform(100, 1000, n)
    return Bars(open_, high, low, close, volume)


def flat(n: int) -> Bars:
    a = np.full(n, 5.0)
    return Bars(a, a.copy(), a.copy(), a.copy(), np.zeros(n))


def run(d: IndicatorDef, bars: Bars, ctx: ComputeContext | None = None, **params: object) -> PanelResult:
    return d.compute(bars, d.configure(params), ctx or ComputeContext())


def lines(d: IndicatorDef, bars: Bars, **params: object) -> dict[str, FloatArray]:
    return {ln.label or "": ln.y for ln in run(d, bars, **params).lines}


def series(bars: Bars) -> tuple[pd.Series, pd.Series, pd.Series, pd.Series]:
    return tuple(pd.Series(a) for a in (bars.high, bars.low, bars.close, bars.volume))  # type: ignore[return-value]


def ohlcv(bars: Bars) -> list[OHLCV]:
    return [OHLCV(*row) for row in zip(bars.open, bars.high, bars.low, bars.close, bars.volume, strict=True)]


def nulls(values: object) -> FloatArray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)  # type: ignore[attr-defined]


def assert_close(ours: FloatArray, oracle: object, start: int) -> None:
    """Same NaN pattern from ``start`` on and finite values within REL relative."""
    ref = np.asarray(oracle, dtype=float)
    a, b = ours[start:], ref[start:]
    assert np.array_equal(np.isfinite(a), np.isfinite(b))
    ok = np.isfinite(b)
    np.testing.assert_allclose(a[ok], b[ok], rtol=REL, atol=1e-9)


def first_finite(x: FloatArray) -> int:
    return int(np.flatnonzero(np.isfinite(x))[0])


# --- oracles -----------------------------------------------------------------------------


def test_rsi_matches_talipp_wilder_rsi_from_its_first_value() -> None:
    """RSI equals talipp's SMA-seeded Wilder RSI exactly, starting at bar 14."""
    bars = walk()
    ours = lines(RSI, bars)["RSI"]
    assert first_finite(ours) == 14
    assert_close(ours, nulls(TalippRSI(14, bars.close.tolist())), 0)


def test_rsi_matches_ta_after_its_first_value_seed_decays() -> None:
    """`ta` seeds Wilder smoothing with the first change; after 300 bars (13/14)^300 ≈ 2e-10 it agrees."""
    bars = walk()
    _, _, close, _ = series(bars)
    assert_close(lines(RSI, bars, length=14)["RSI"], ta.momentum.RSIIndicator(close, 14).rsi(), 300)


def test_macd_signal_and_histogram_match_talipp() -> None:
    """MACD and its signal equal talipp's SMA-seeded EMAs; the histogram is their difference."""
    bars = walk()
    res = run(MACD, bars)
    got = {ln.label: ln.y for ln in res.lines}
    ref = list(TalippMACD(12, 26, 9, bars.close.tolist()))
    assert_close(got["MACD"], [None if r is None else r.macd for r in ref], 0)
    assert_close(got["Signal"], [None if r is None or r.signal is None else r.signal for r in ref], 0)
    assert first_finite(got["MACD"]) == 25 and first_finite(got["Signal"]) == 33
    np.testing.assert_array_equal(res.histograms[0].y, got["MACD"] - got["Signal"])


def test_macd_matches_ta_after_the_ema_seed_decays() -> None:
    """`ta` seeds its EMAs with the first close; from bar 400 the seed is gone."""
    bars = walk()
    _, _, close, _ = series(bars)
    ref = ta.trend.MACD(close, window_slow=26, window_fast=12, window_sign=9)
    got = lines(MACD, bars)
    assert_close(got["MACD"], ref.macd(), 400)
    assert_close(got["Signal"], ref.macd_signal(), 400)


def test_atr_matches_ta_and_talipp_after_warm_up() -> None:
    """Wilder ATR agrees with both oracles once their differing seeds decayed (bar 300)."""
    bars = walk()
    high, low, close, _ = series(bars)
    ours = lines(ATR, bars)["ATR"]
    assert first_finite(ours) == 14
    assert_close(ours, ta.volatility.AverageTrueRange(high, low, close, 14).average_true_range(), 300)
    assert_close(ours, nulls(TalippATR(14, input_values=ohlcv(bars))), 300)


def test_adx_and_directional_indices_match_ta_and_talipp_after_warm_up() -> None:
    """ADX, +DI and -DI agree with `ta` and talipp from bar 300; DI starts at bar 14, ADX at 27."""
    bars = walk()
    high, low, close, _ = series(bars)
    got = lines(ADX, bars)
    assert first_finite(got["+DI"]) == 14 and first_finite(got["ADX"]) == 27
    ref = ta.trend.ADXIndicator(high, low, close, 14)
    assert_close(got["ADX"], ref.adx(), 300)
    assert_close(got["+DI"], ref.adx_pos(), 300)
    assert_close(got["-DI"], ref.adx_neg(), 300)
    tal = list(TalippADX(14, 14, input_values=ohlcv(bars)))
    assert_close(got["ADX"], [None if r is None or r.adx is None else r.adx for r in tal], 300)
    assert_close(got["-DI"], [None if r is None else r.minus_di for r in tal], 300)


def test_slow_stochastic_is_sma_of_ta_fast_stochastic() -> None:
    """%K = SMA3 of ta's fast %K and %D = SMA3 of %K, identical from the first value."""
    bars = walk()
    high, low, close, _ = series(bars)
    fast = ta.momentum.StochasticOscillator(high, low, close, window=14, smooth_window=3).stoch()
    k = fast.rolling(3).mean()
    got = lines(STOCH, bars)
    assert_close(got["%K"], k, 0)
    assert_close(got["%D"], k.rolling(3).mean(), 0)


def test_cci_matches_ta_mean_deviation_cci() -> None:
    """CCI uses the mean absolute deviation of typical price, as `ta` does."""
    bars = walk()
    high, low, close, _ = series(bars)
    assert_close(lines(CCI, bars)["CCI"], ta.trend.CCIIndicator(high, low, close, 20, 0.015).cci(), 0)


def test_williams_r_matches_ta() -> None:
    """Williams %R agrees with `ta` from its first value (bar 13)."""
    bars = walk()
    high, low, close, _ = series(bars)
    assert_close(lines(WILLIAMS_R, bars)["%R"], ta.momentum.WilliamsRIndicator(high, low, close, 14).williams_r(), 0)


def test_roc_matches_ta() -> None:
    """ROC agrees with `ta` from its first value (bar 14)."""
    bars = walk()
    _, _, close, _ = series(bars)
    assert_close(lines(ROC, bars)["ROC"], ta.momentum.ROCIndicator(close, 14).roc(), 0)


def test_obv_matches_talipp_and_ta() -> None:
    """OBV starts at the first bar's volume and adds/subtracts volume on up/down closes."""
    bars = walk()
    _, _, close, volume = series(bars)
    ours = lines(OBV, bars)["OBV"]
    assert_close(ours, nulls(TalippOBV(input_values=ohlcv(bars))), 0)
    assert_close(ours, ta.volume.OnBalanceVolumeIndicator(close, volume).on_balance_volume(), 0)


def test_mfi_matches_ta_from_bar_n() -> None:
    """MFI agrees with `ta` from bar 14 (ta also prints a value at bar 13 from only 13 flows)."""
    bars = walk()
    high, low, close, volume = series(bars)
    ours = lines(MFI, bars)["MFI"]
    assert first_finite(ours) == 14
    assert_close(ours, ta.volume.MFIIndicator(high, low, close, volume, 14).money_flow_index(), 14)


def test_accumulation_distribution_matches_ta() -> None:
    """The A/D line agrees with ta's AccDistIndexIndicator on every bar."""
    bars = walk()
    high, low, close, volume = series(bars)
    assert_close(lines(AD, bars)["A/D"], ta.volume.AccDistIndexIndicator(high, low, close, volume).acc_dist_index(), 0)


def test_cmf_matches_ta() -> None:
    """CMF agrees with ta's ChaikinMoneyFlowIndicator from bar 19."""
    bars = walk()
    high, low, close, volume = series(bars)
    ref = ta.volume.ChaikinMoneyFlowIndicator(high, low, close, volume, 20).chaikin_money_flow()
    assert_close(lines(CMF, bars)["CMF"], ref, 0)


def test_cvd_is_the_cumulative_close_location_weighted_volume() -> None:
    """CVD equals a plain-loop Σ V·((C−L)−(H−C))/(H−L)."""
    bars = walk(50)
    total, ref = 0.0, []
    for h, lo, c, v in zip(bars.high, bars.low, bars.close, bars.volume, strict=True):
        total += v * ((c - lo) - (h - c)) / (h - lo) if h != lo else 0.0
        ref.append(total)
    assert_close(lines(CVD, bars)["CVD"], ref, 0)


def test_histvol_is_annualised_sample_stdev_of_log_returns_by_interval() -> None:
    """HV at the last bar equals a hand computation with √(365·6) for 4h bars."""
    bars = walk(100)
    n = 20
    rets = [math.log(bars.close[i] / bars.close[i - 1]) for i in range(len(bars) - n, len(bars))]
    mean = sum(rets) / n
    sd = math.sqrt(sum((r - mean) ** 2 for r in rets) / (n - 1))
    res = run(HISTVOL, bars, ComputeContext(interval="4h"))
    hv = res.lines[0].y
    assert hv[-1] == pytest.approx(sd * math.sqrt(365 * 6) * 100, rel=1e-9)
    assert first_finite(hv) == n


def test_histvol_bars_per_year_follows_the_interval_and_falls_back_to_252() -> None:
    """Crypto intervals use a 365-day year; an unknown interval uses 252 daily bars."""
    assert bars_per_year("1d") == 365
    assert bars_per_year("1h") == 365 * 24
    assert bars_per_year("1m") == 365 * 24 * 60
    assert bars_per_year("1w") == pytest.approx(365 / 7)
    assert bars_per_year("1wk") == pytest.approx(365 / 7)
    assert bars_per_year("1M") == 12
    assert bars_per_year("7x") == 252
    daily = run(HISTVOL, walk(60), ComputeContext(interval="1d")).lines[0].y[-1]
    unknown = run(HISTVOL, walk(60), ComputeContext(interval="7x")).lines[0].y[-1]
    assert daily / unknown == pytest.approx(math.sqrt(365 / 252))


# --- structure ---------------------------------------------------------------------------

STRUCTURE = {
    "macd": ("MACD", ["MACD", "Signal"], [0.0], None),
    "rsi": ("RSI", ["RSI"], [70.0, 30.0, 50.0], (0.0, 100.0)),
    "stoch": ("Stoch", ["%K", "%D"], [80.0, 20.0], (0.0, 100.0)),
    "atr": ("ATR", ["ATR"], [], None),
    "obv": ("OBV", ["OBV"], [], None),
    "cci": ("CCI", ["CCI"], [100.0, -100.0], (-250.0, 250.0)),
    "roc": ("ROC", ["ROC"], [0.0], None),
    "mfi": ("MFI", ["MFI"], [80.0, 20.0], (0.0, 100.0)),
    "williams_r": ("W%R", ["%R"], [-20.0, -80.0], (-100.0, 0.0)),
    "cmf": ("CMF", ["CMF"], [0.0], (-1.0, 1.0)),
    "adx": ("ADX", ["ADX", "+DI", "-DI"], [25.0], (0.0, 100.0)),
    "ad": ("A/D", ["A/D"], [], None),
    "histvol": ("HV", ["HV"], [], None),
    "cvd": ("CVD", ["CVD"], [0.0], None),
}


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_panel_has_the_contract_label_lines_levels_and_range(d: IndicatorDef) -> None:
    """Label, line labels, hline values in order and y_range are chartgen's; it is a panel without signals."""
    label, line_labels, levels, y_range = STRUCTURE[d.name]
    res = run(d, sample_bars(200))
    assert d.kind == "panel" and not d.is_overlay and not res.is_overlay
    assert res.label == label
    assert [ln.label for ln in res.lines] == line_labels
    assert [h.y for h in res.hlines] == levels
    assert res.y_range == y_range
    assert not d.signals and not res.signals()
    assert "Formula:" in d.description


def test_aliases_and_fill_and_histogram_counts_follow_the_contract() -> None:
    """Aliases stochastic/willr/ad_line/hv; stoch has one fill, macd one histogram."""
    assert STOCH.aliases == ("stochastic",)
    assert WILLIAMS_R.aliases == ("willr",)
    assert AD.aliases == ("ad_line",)
    assert HISTVOL.aliases == ("hv",)
    assert len(run(STOCH, sample_bars(100)).fills) == 1
    macd = run(MACD, sample_bars(100))
    assert len(macd.histograms) == 1 and len(macd.histograms[0].colors) == 100


def test_default_params_match_the_contract() -> None:
    """Parameter names and defaults are chartgen's."""
    defaults = {d.name: {p.name: p.default for p in d.params} for d in ALL}
    assert defaults["macd"] == {"fast": 12, "slow": 26, "signal": 9}
    assert defaults["rsi"] == {"length": 14}
    assert defaults["stoch"] == {"period": 14, "k_smooth": 3, "d_smooth": 3}
    for name, p in (("atr", 14), ("cci", 20), ("roc", 14), ("mfi", 14), ("williams_r", 14)):
        assert defaults[name] == {"period": p}
    assert defaults["cmf"] == {"period": 20} and defaults["adx"] == {"period": 14}
    assert defaults["histvol"] == {"period": 20}
    assert defaults["obv"] == defaults["ad"] == defaults["cvd"] == {}


# --- robustness --------------------------------------------------------------------------


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 2, 5, 200, 5000])
def test_panel_computes_on_any_length_without_inf(d: IndicatorDef, n: int) -> None:
    """Every line is 1:1 with the bars and never ±inf, on random and on flat zero-volume data."""
    for bars in (walk(n), flat(n)):
        res = run(d, bars)
        for ln in res.lines:
            assert len(ln.y) == n
            assert not np.isinf(ln.y).any()
        for hist in res.histograms:
            assert len(hist.y) == n == len(hist.colors)


def test_flat_prices_give_neutral_values_not_errors() -> None:
    """On a flat series stochastic is 50, %R 0, CCI 0, ATR 0 and HV 0."""
    bars = flat(60)
    assert lines(STOCH, bars)["%K"][-1] == 50.0
    assert lines(WILLIAMS_R, bars)["%R"][-1] == 0.0
    assert lines(CCI, bars)["CCI"][-1] == 0.0
    assert lines(ATR, bars)["ATR"][-1] == 0.0
    assert lines(HISTVOL, bars)["HV"][-1] == 0.0


def test_roc_and_histvol_skip_non_positive_prices() -> None:
    """A zero close makes ROC/HV NaN where it is used, never inf."""
    bars = walk(60)
    close = bars.close.copy()
    close[30] = 0.0
    broken = Bars(bars.open, bars.high, bars.low, close, bars.volume)
    assert np.isnan(lines(ROC, broken)["ROC"][44])
    hv = lines(HISTVOL, broken)["HV"]
    assert np.isnan(hv[40]) and not np.isinf(hv).any()


# --- params ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "param"),
    [
        (MACD, "fast"),
        (MACD, "slow"),
        (MACD, "signal"),
        (RSI, "length"),
        (STOCH, "period"),
        (STOCH, "k_smooth"),
        (STOCH, "d_smooth"),
        (CCI, "period"),
        (ROC, "period"),
        (MFI, "period"),
        (WILLIAMS_R, "period"),
        (ATR, "period"),
        (HISTVOL, "period"),
        (CMF, "period"),
        (ADX, "period"),
    ],
)
def test_period_zero_is_a_param_error_naming_the_parameter(d: IndicatorDef, param: str) -> None:
    """A zero period raises IndicatorParamError naming the indicator and parameter."""
    with pytest.raises(IndicatorParamError, match=rf"{d.name}: parameter '{param}'"):
        d.configure({param: 0})


def test_non_default_params_change_the_output() -> None:
    """rsi length 7 differs from length 14 and warms up at bar 7."""
    bars = walk(100)
    short = lines(RSI, bars, length=7)["RSI"]
    assert first_finite(short) == 7
    assert not np.allclose(short[20:], lines(RSI, bars)["RSI"][20:])
