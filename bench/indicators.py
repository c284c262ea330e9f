"""Indicator benchmarks: every indicator on 5000 bars, and the default engine set on 1000."""

from __future__ import annotations

import timeit
from typing import Any

import numpy as np

from engine.bars import Bars
from engine.indicators.base import ComputeContext
from engine.indicators.registry import all_indicators, parse_requests


def random_walk(n: int, seed: int = 7) -> Bars:
    """Realistic hourly OHLCV bars (strictly positive, high/low enclosing open/close)."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = np.concatenate([[close[0]], close[:-1]])
    spread = np.abs(rng.normal(0, 0.004, n)) * close
    high = np.maximum(open_, close) + spread
    low = np.minimum(open_, close) - spread
    vol = rng.lognormal(10, 0.5, n)
    times = 1_700_000_000 + 3600 * np.arange(n, dtype=np.int64)
    return Bars(open=open_, high=high, low=low, close=close, volume=vol, times=times)


def _best_of(fn: Any, number: int, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1000


def bench_all_indicators(n: int = 5000) -> dict[str, float]:
    """Milliseconds per indicator (best of 5) on ``n`` bars; external ones compute their no-data path."""
    bars = random_walk(n)
    ctx = ComputeContext(symbol="BTCUSDT", interval="1h")
    out = {}
    for d in all_indicators():
        params = d.configure(None)
        out[d.name] = _best_of(lambda d=d, params=params: d.compute(bars, params, ctx), number=3)
    return out


def bench_engine_set(n: int = 1000) -> dict[str, float]:
    """The default engine indicators (cipher_b, macd, rsi) on an ``n``-bar window, in ms."""
    bars = random_walk(n)
    reqs = parse_requests(["cipher_b", "macd", "rsi"])
    ctx = ComputeContext(symbol="BTCUSDT", interval="1h")

    def run() -> None:
        for r in reqs:
            r.definition.compute(bars, r.params, ctx)

    per = {r.key: _best_of(lambda r=r: r.definition.compute(bars, r.params, ctx), number=50) for r in reqs}
    return {"total_ms": _best_of(run, number=50), **{f"{k}_ms": v for k, v in per.items()}}


def main() -> None:
    """`python -m bench.indicators`: the indicator rows of the README's benchmark table."""
    engine_set = bench_engine_set(1000)
    print(f"cipher_b + macd + rsi on 1000 bars: {engine_set['total_ms']:.3f} ms")
    for name, ms in sorted(bench_all_indicators(5000).items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {name:<16} {ms:8.3f} ms on 5000 bars")


if __name__ == "__main__":
    main()
