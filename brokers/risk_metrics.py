"""Risk metrics of a portfolio from daily closes: pure functions over numpy arrays (no I/O).

This module owns the estimators trade_simulate reports (``risk_metrics``):

- the portfolio's daily value series ``V_t = Σ_i q_i · close_i(t) + cash`` — today's holdings
  replayed over history (constant quantities, not constant weights), see :func:`value_series`;
- daily simple returns ``r_t = V_t / V_{t-1} − 1``;
- ``var_95_1d``: historical VaR at 95 % over one day, a positive fraction of the portfolio's
  value: ``max(0, −P5(r))`` where ``P5`` is numpy's default (linear interpolation between
  closest ranks, ``numpy.percentile(r, 5)``); floored at 0 because a loss is never negative;
- ``max_drawdown``: ``max_t (1 − V_t / max_{s≤t} V_s)``, a positive fraction (0: never below a peak);
- ``sharpe_ratio``: ``(mean(r) − rf_daily) / std(r, ddof=1) · √365`` with
  ``rf_daily = (1 + rf_annual)^(1/365) − 1``; 365 periods a year because crypto trades every day.

A metric that cannot be computed is None with a reason (:attr:`RiskMetrics.reasons`): fewer than
two returns, a zero standard deviation (Sharpe), a value series that is not positive and finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PERIODS_PER_YEAR = 365
"""Crypto markets trade every day of the year."""
VAR_LEVEL = 0.95
METHOD = (
    "today's holdings replayed over daily closes: V_t = sum(quantity_i * close_i(t)) + cash on the days every "
    "held asset has a bar; r_t = V_t/V_(t-1) - 1; var_95_1d = max(0, -numpy.percentile(r, 5)) (linear "
    "interpolation); max_drawdown = max(1 - V_t/max_(s<=t) V_s); sharpe = (mean(r) - rf_daily)/std(r, ddof=1) * "
    "sqrt(365), rf_daily = (1+risk_free_rate)^(1/365) - 1"
)
"""The estimators in one line (trade_simulate's risk_metrics.method)."""
ZERO_STD = 1e-15
"""A return standard deviation at or below this is treated as zero (Sharpe undefined)."""


@dataclass(frozen=True, slots=True)
class RiskMetrics:
    """The three metrics (None where undefined) and why any of them is None."""

    var_95_1d: float | None
    max_drawdown: float | None
    sharpe_ratio: float | None
    observations: int
    """The number of daily returns used."""
    reasons: dict[str, str] = field(default_factory=dict)


def align_closes(
    series: Sequence[tuple[npt.NDArray[np.int64], FloatArray]], days: int
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The bar times every series has, the newest ``days + 1`` of them, and a (assets × times) matrix of
    closes on those times.  ``series`` holds one (open times, closes) pair per asset."""
    if not series:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    common = series[0][0]
    for times, _ in series[1:]:
        common = np.intersect1d(common, times)
    common = np.sort(common)[-(days + 1) :] if days >= 0 else np.sort(common)
    rows = []
    for times, closes in series:
        index = {int(t): k for k, t in enumerate(times)}
        rows.append(np.asarray([closes[index[int(t)]] for t in common], dtype=np.float64))
    return common, np.vstack(rows) if rows else np.zeros((0, len(common)))


def value_series(quantities: FloatArray, closes: FloatArray, cash: float) -> FloatArray:
    """``V_t = Σ_i quantities[i] · closes[i, t] + cash`` (``closes`` is assets × times)."""
    if closes.size == 0:
        return np.zeros(closes.shape[1] if closes.ndim == 2 else 0) + cash
    return np.asarray(quantities, dtype=np.float64) @ closes + cash


def simple_returns(values: FloatArray) -> FloatArray:
    """``r_t = V_t / V_{t-1} − 1`` for t = 1..n−1."""
    v = np.asarray(values, dtype=np.float64)
    return v[1:] / v[:-1] - 1.0


def historical_var(returns: FloatArray, level: float = VAR_LEVEL) -> float:
    """``max(0, −percentile(r, 100·(1−level)))`` with numpy's default linear interpolation."""
    return max(0.0, -float(np.percentile(returns, 100.0 * (1.0 - level))))


def max_drawdown(values: FloatArray) -> float:
    """``max_t (1 − V_t / max_{s≤t} V_s)``; 0 for a series that never falls below its running peak."""
    v = np.asarray(values, dtype=np.float64)
    peaks = np.maximum.accumulate(v)
    return max(0.0, float(np.max(1.0 - v / peaks)))


def daily_risk_free(rf_annual: float, periods: int = PERIODS_PER_YEAR) -> float:
    """The daily rate compounding to ``rf_annual`` over ``periods`` days."""
    return float((1.0 + rf_annual) ** (1.0 / periods) - 1.0)


def sharpe_ratio(returns: FloatArray, rf_annual: float, periods: int = PERIODS_PER_YEAR) -> float | None:
    """``(mean(r) − rf_daily) / std(r, ddof=1) · √periods``; None when the deviation is zero."""
    r = np.asarray(returns, dtype=np.float64)
    std = float(np.std(r, ddof=1))
    if not math.isfinite(std) or std <= ZERO_STD:
        return None
    return (float(np.mean(r)) - daily_risk_free(rf_annual, periods)) / std * math.sqrt(periods)


def risk_metrics(values: FloatArray, rf_annual: float, periods: int = PERIODS_PER_YEAR) -> RiskMetrics:
    """All three metrics of a daily value series, None with a reason where one is undefined."""
    v = np.asarray(values, dtype=np.float64)
    if v.size and (not np.all(np.isfinite(v)) or np.any(v <= 0)):
        why = "the portfolio's value series is not positive on every day (returns are undefined)"
        return RiskMetrics(None, None, None, 0, {k: why for k in ("var_95_1d", "max_drawdown", "sharpe_ratio")})
    n = max(0, v.size - 1)
    if n < 2:
        why = f"{n} daily return(s) available; at least 2 are needed"
        reasons = {"var_95_1d": why, "sharpe_ratio": why}
        drawdown = max_drawdown(v) if v.size else None
        if drawdown is None:
            reasons["max_drawdown"] = "no daily history"
        return RiskMetrics(None, drawdown, None, n, reasons)
    r = simple_returns(v)
    sharpe = sharpe_ratio(r, rf_annual, periods)
    reasons = {}
    if sharpe is None:
        reasons["sharpe_ratio"] = "the daily returns have zero standard deviation (e.g. an all-cash portfolio)"
    return RiskMetrics(historical_var(r), max_drawdown(v), sharpe, n, reasons)
