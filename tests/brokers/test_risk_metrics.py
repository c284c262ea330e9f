"""brokers.risk_metrics against a hand-checked 5-day series, an independent pure-Python implementation on a
two-asset portfolio (to 1e-9), its edge cases, and random series (hypothesis)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.risk_metrics import (
    align_closes,
    daily_risk_free,
    historical_var,
    max_drawdown,
    risk_metrics,
    sharpe_ratio,
    simple_returns,
    value_series,
)
from testkit.risk_oracle import percentile


def test_a_five_day_series_checked_by_hand() -> None:
    # V = 100, 110, 99, 104.5, 95
    # r = 110/100-1 = 0.1; 99/110-1 = -0.1; 104.5/99-1 = 1/18 = 0.0555…; 95/104.5-1 = -1/11 = -0.0909…
    # sorted r = [-0.1, -1/11, 1/18, 0.1]; the 5th percentile (linear) sits at rank 0.05·(4−1) = 0.15:
    #   P5 = -0.1 + 0.15·(-1/11 + 0.1) = -0.1 + 0.15/110 = -0.0986363…  → VaR = 0.0986363…
    # running peaks 100, 110, 110, 110, 110; drawdowns 0, 0, 0.1, 0.05, 15/110 → max 15/110 = 0.136363…
    # mean(r) = (0.1 - 0.1 + 1/18 - 1/11)/4 = -7/792 = -0.0088383…;
    # Σ(r - mean)² = Σr² - 4·mean² = (0.02 + 1/324 + 1/121) - 4·(7/792)² = 0.0310384…; /3 → var 0.0103461…
    #   std = 0.1017160; Sharpe (rf 0) = -0.0088384 / 0.1017160 · √365 (19.104973) = -1.66008
    v = np.array([100.0, 110.0, 99.0, 104.5, 95.0])
    m = risk_metrics(v, 0.0)
    assert m.observations == 4 and m.reasons == {}
    assert m.var_95_1d == pytest.approx(0.1 - 0.15 / 110, abs=1e-12)
    assert m.max_drawdown == pytest.approx(15 / 110, abs=1e-12)
    mean = -7 / 792
    var = (0.02 + 1 / 324 + 1 / 121 - 4 * mean**2) / 3
    assert m.sharpe_ratio == pytest.approx(mean / math.sqrt(var) * math.sqrt(365), abs=1e-9)
    assert m.sharpe_ratio == pytest.approx(-1.66008, abs=1e-5)


def test_the_risk_free_rate_is_compounded_daily() -> None:
    # 5 % a year: (1.05)^(1/365) - 1 = 0.000133681…
    assert daily_risk_free(0.05) == pytest.approx(1.05 ** (1 / 365) - 1, abs=1e-15)
    r = np.array([0.01, -0.005, 0.002, 0.004])
    expected = (r.mean() - daily_risk_free(0.05)) / r.std(ddof=1) * math.sqrt(365)
    assert sharpe_ratio(r, 0.05) == pytest.approx(expected, abs=1e-12)


# --- an independent implementation: loops, a sorted list, no numpy ----------------------------------


def _reference(quantities: list[float], closes: list[list[float]], cash: float, rf: float) -> tuple[float, ...]:
    days = len(closes[0])
    values = []
    for t in range(days):
        total = cash
        for i, q in enumerate(quantities):
            total += q * closes[i][t]
        values.append(total)
    returns = [values[t] / values[t - 1] - 1 for t in range(1, days)]
    var = max(0.0, -percentile(returns, 5))
    peak, worst = values[0], 0.0
    for x in values:
        peak = max(peak, x)
        worst = max(worst, 1 - x / peak)
    mean = sum(returns) / len(returns)
    sd = math.sqrt(sum((x - mean) ** 2 for x in returns) / (len(returns) - 1))
    rf_daily = math.exp(math.log(1 + rf) / 365) - 1
    return var, worst, (mean - rf_daily) / sd * math.sqrt(365)


def _walk(start: float, n: int, rng: random.Random, vol: float) -> list[float]:
    out = [start]
    for _ in range(n - 1):
        out.append(out[-1] * math.exp(rng.gauss(0.0003, vol)))
    return out


def test_a_two_asset_portfolio_matches_an_independent_implementation() -> None:
    rng = random.Random(7)
    btc, eth = _walk(65000.0, 366, rng, 0.03), _walk(3200.0, 366, rng, 0.04)
    quantities, cash, rf = [0.15, 2.5], 4321.5, 0.04
    m = risk_metrics(value_series(np.array(quantities), np.array([btc, eth]), cash), rf)
    var, dd, sharpe = _reference(quantities, [btc, eth], cash, rf)
    assert m.observations == 365
    assert m.var_95_1d == pytest.approx(var, abs=1e-9)
    assert m.max_drawdown == pytest.approx(dd, abs=1e-9)
    assert m.sharpe_ratio == pytest.approx(sharpe, abs=1e-9)


def test_closes_are_aligned_on_the_days_every_asset_has_and_cut_to_the_look_back() -> None:
    day = 86400
    a = (np.arange(10, dtype=np.int64) * day, np.arange(10, dtype=np.float64) + 100)
    b = (np.arange(3, 10, dtype=np.int64) * day, np.arange(7, dtype=np.float64) + 10)  # listed 3 days later
    times, matrix = align_closes([a, b], days=4)
    assert list(times) == [5 * day, 6 * day, 7 * day, 8 * day, 9 * day]
    assert matrix.tolist() == [[105.0, 106.0, 107.0, 108.0, 109.0], [12.0, 13.0, 14.0, 15.0, 16.0]]


# --- edge cases ------------------------------------------------------------------------------------


def test_fewer_than_two_returns_give_null_with_a_reason() -> None:
    m = risk_metrics(np.array([100.0, 101.0]), 0.0)
    assert m.var_95_1d is None and m.sharpe_ratio is None and m.observations == 1
    assert "at least 2" in m.reasons["var_95_1d"] and "at least 2" in m.reasons["sharpe_ratio"]
    assert m.max_drawdown == 0.0
    empty = risk_metrics(np.array([]), 0.0)
    assert empty.max_drawdown is None and empty.reasons["max_drawdown"] == "no daily history"


def test_an_all_cash_portfolio_has_no_risk_and_no_sharpe() -> None:
    m = risk_metrics(np.full(366, 10_000.0), 0.02)
    assert m.var_95_1d == 0.0 and m.max_drawdown == 0.0 and m.sharpe_ratio is None
    assert "zero standard deviation" in m.reasons["sharpe_ratio"]


def test_a_series_that_is_not_positive_gives_null_everywhere() -> None:
    m = risk_metrics(np.array([100.0, 0.0, 50.0, 60.0]), 0.0)
    assert m.var_95_1d is None and m.max_drawdown is None and m.sharpe_ratio is None
    assert set(m.reasons) == {"var_95_1d", "max_drawdown", "sharpe_ratio"}


def test_var_is_floored_at_zero_when_every_return_is_a_gain() -> None:
    assert historical_var(simple_returns(np.array([1.0, 1.1, 1.2, 1.3, 1.5]))) == 0.0
    assert max_drawdown(np.array([1.0, 2.0, 3.0])) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False), min_size=0, max_size=60),
    st.floats(min_value=-0.05, max_value=0.5),
)
def test_random_series_never_raise_and_stay_in_bounds(values: list[float], rf: float) -> None:
    m = risk_metrics(np.array(values, dtype=np.float64), rf)
    if m.var_95_1d is not None:
        assert 0.0 <= m.var_95_1d <= 1.0
    if m.max_drawdown is not None:
        assert 0.0 <= m.max_drawdown <= 1.0
    if m.sharpe_ratio is not None:
        assert math.isfinite(m.sharpe_ratio)
    for name in ("var_95_1d", "max_drawdown", "sharpe_ratio"):
        assert (getattr(m, name) is None) == (name in m.reasons)
