"""Indicator benchmarks: every indicator on 5000 bars, the default engine set on 1000, and the
engine's per-closed-bar work against TA-Lib recomputing the same indicators in the same run."""

from __future__ import annotations

import time
import timeit
from typing import Any

import numpy as np
import talib

from engine import (
    Bars,
    ComputeContext,
    EventBus,
    IndicatorEngine,
    RollingWindow,
    all_indicators,
    from_result,
    parse_requests,
)


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


def _window_of(bars: Bars) -> RollingWindow:
    w = RollingWindow("BTCUSDT", "1h", capacity=len(bars))
    assert bars.times is not None
    w.merge_closed(bars.times, np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume]))
    return w


def _per_call_us(fn: Any, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number * 1e6


def _run_to_end(coro: Any) -> None:
    """Run a coroutine that never waits (the worker's per-window step for these indicators) without a loop turn."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("the per-window step waited on something")


def bench_per_closed_bar(window: int = 1000, number: int = 2000, rounds: int = 3) -> dict[str, list[float]]:
    """Microseconds of the engine's work per closed bar of one window, and the references.

    ``engine_*``: the live engine's indicator worker serving one dirty window whose newest bar
    just closed (IndicatorEngine's per-window update: copy of the window's bars, each indicator's
    newest values and signals — RSI, MACD and Bollinger from their incremental state, cipher_b over
    the window — and the IndicatorsUpdated event), for RSI + MACD + Bollinger and for the default
    set (cipher_b, macd, rsi).  ``talib_three``: TA-Lib's RSI, MACD and BBANDS recomputed over the
    whole window.  ``full_*``: the path before this release (every indicator computed in full, the
    newest bar read off it).  Interleaved, ``rounds`` rounds, each the mean of ``number`` bars.
    """
    bars = random_walk(window + number + 1)
    close = bars.close[-window:]
    key = ("BTCUSDT", "1h")
    out: dict[str, list[float]] = {}
    sets = {"three": ["rsi", "macd", "bbands"], "default": ["cipher_b", "macd", "rsi"]}
    assert bars.times is not None
    vals = np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume])

    def engine_run(names: list[str]) -> float:
        """Seed on a window, then time ``number`` closes, each appending the next bar and serving it."""
        w = RollingWindow("BTCUSDT", "1h", capacity=window)
        w.merge_closed(bars.times[:window], vals[:, :window])
        eng = IndicatorEngine(lambda _k: w.bars(), EventBus(), defaults=parse_requests(names))
        eng.add_window(key)
        _run_to_end(eng._update(key))  # seeds the incremental states
        t0 = time.perf_counter()
        for i in range(window, window + number):
            w.apply_closed(int(bars.times[i]), *(float(x) for x in vals[:, i]))
            _run_to_end(eng._update(key))
        return (time.perf_counter() - t0) / number * 1e6

    def append_only() -> float:
        w = RollingWindow("BTCUSDT", "1h", capacity=window)
        w.merge_closed(bars.times[:window], vals[:, :window])
        t0 = time.perf_counter()
        for i in range(window, window + number):
            w.apply_closed(int(bars.times[i]), *(float(x) for x in vals[:, i]))
        return (time.perf_counter() - t0) / number * 1e6

    def talib_three() -> None:
        talib.RSI(close, 14)
        talib.MACD(close, 12, 26, 9)
        talib.BBANDS(close, 20, 2.0, 2.0)

    def full(names: list[str]) -> Any:
        reqs = parse_requests(names)
        ctx = ComputeContext(symbol="BTCUSDT", interval="1h")
        data = bars.tail(window)

        def run() -> None:
            for r in reqs:
                from_result(r.definition.compute(data, r.params, ctx), data)

        return run

    for _ in range(rounds):
        out.setdefault("talib_three_us", []).append(_per_call_us(talib_three, number))
        append = append_only()
        out.setdefault("append_us", []).append(append)
        for name, names in sets.items():
            out.setdefault(f"engine_{name}_us", []).append(engine_run(names) - append)
            out.setdefault(f"full_{name}_us", []).append(_per_call_us(full(names), number // 4))
    return out


def print_per_closed_bar(r: dict[str, list[float]]) -> None:
    def span(values: list[float]) -> str:
        return f"{min(values):.1f}–{max(values):.1f} µs"

    ratio = [e / t for e, t in zip(r["engine_three_us"], r["talib_three_us"], strict=True)]
    print("per closed bar, 1000-bar window (the engine's worker; appending the bar itself excluded):")
    print(f"  RSI+MACD+BB: engine {span(r['engine_three_us'])}; TA-Lib full recompute {span(r['talib_three_us'])}")
    print(f"    ratio {min(ratio):.2f}–{max(ratio):.2f}× (target ≤ 2×); before: {span(r['full_three_us'])}")
    default, before = span(r["engine_default_us"]), span(r["full_default_us"])
    print(f"  default set: engine {default} (target ≤ 100 µs); before: {before}")


def main() -> None:
    """`python -m bench.indicators`: the indicator rows of docs/benchmarks.md."""
    print_per_closed_bar(bench_per_closed_bar())
    engine_set = bench_engine_set(1000)
    print(f"cipher_b + macd + rsi on 1000 bars: {engine_set['total_ms']:.3f} ms")
    for name, ms in sorted(bench_all_indicators(5000).items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {name:<16} {ms:8.3f} ms on 5000 bars")


if __name__ == "__main__":
    main()
