"""Indicator state: recompute on close off the ingest path, cache per instance, compute on demand."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from engine.bars import Bars
from engine.events import EventBus, IndicatorsUpdated
from engine.indicator_state import IndicatorEngine
from engine.indicators.base import IndicatorDef
from engine.indicators.model import Dot, Line, PanelResult
from engine.indicators.registry import IndicatorRequest

CALLS: list[tuple[str, int, Any]] = []


def _scaled(bars: Bars, params: Any, ctx: Any) -> PanelResult:
    CALLS.append((ctx.symbol, len(bars), params.get("k")))
    k = params.get("k", 1)
    return PanelResult(
        "SCALED", False, lines=[Line(bars.close * k, "w")], dots=[Dot(len(bars) - 1, 1.0, "g", label="buy")]
    )


DEF = IndicatorDef(name="scaled", kind="panel", description="t", compute=_scaled, signals=("buy",))


def _req(k: int | None = None, key: str = "scaled") -> IndicatorRequest:
    return IndicatorRequest(key, DEF, {} if k is None else {"k": k})


def _bars(n: int) -> Bars:
    t = np.arange(n, dtype=np.int64) * 60
    c = np.arange(n, dtype=np.float64) + 1
    return Bars(c, c, c, c, c, t)


def _compute(req: IndicatorRequest, bars: Bars, ctx: Any) -> PanelResult:
    return req.definition.compute(bars, req.params, ctx)


async def _serve_once(eng: IndicatorEngine, bus: EventBus, key: tuple[str, str]) -> Any:
    """Mark ``key`` dirty with the worker running; the IndicatorsUpdated it publishes."""
    sub = bus.subscribe([IndicatorsUpdated])
    worker = asyncio.create_task(eng.run())
    try:
        eng.mark_dirty(key)
        return await asyncio.wait_for(sub.get(), 5)
    finally:
        worker.cancel()


async def test_closed_bars_trigger_one_recompute_per_window_and_an_update_event() -> None:
    """Marking a window dirty twice recomputes it once and publishes IndicatorsUpdated."""
    CALLS.clear()
    bus = EventBus()
    data = {("BTCUSDT", "1m"): _bars(10), ("ETHUSDT", "1m"): _bars(5)}
    eng = IndicatorEngine(data.get, bus, defaults=[_req()], compute=_compute)
    for key in data:
        eng.add_window(key)
    sub = bus.subscribe([IndicatorsUpdated])
    worker = asyncio.create_task(eng.run())
    try:
        eng.mark_dirty(("BTCUSDT", "1m"))
        eng.mark_dirty(("BTCUSDT", "1m"))
        eng.mark_dirty(("ETHUSDT", "1m"))
        got = [await asyncio.wait_for(sub.get(), 5) for _ in range(2)]
    finally:
        worker.cancel()
    assert [(e.symbol, e.bar_time, e.signals) for e in got] == [  # type: ignore[union-attr]
        ("BTCUSDT", 540, (("scaled", "buy"),)),
        ("ETHUSDT", 240, (("scaled", "buy"),)),
    ]
    assert sorted(c[0] for c in CALLS) == ["BTCUSDT", "ETHUSDT"]


async def test_results_are_served_from_cache_and_missing_ones_computed_once() -> None:
    """An instance with new params is computed on demand, then cached until the next bar."""
    CALLS.clear()
    key = ("BTCUSDT", "1m")
    bars = _bars(20)
    eng = IndicatorEngine({key: bars}.get, EventBus(), defaults=[_req()], compute=_compute)
    eng.add_window(key)
    first = await eng.results_for(key, [_req(3, key="x3")], bars)
    again = await eng.results_for(key, [_req(3, key="other-alias")], bars)
    assert first[0][1] is again[0][1]
    assert CALLS == [("BTCUSDT", 20, 3)]
    assert float(first[0][1].lines[0].y[-1]) == 60.0
    newer = _bars(21)
    await eng.results_for(key, [_req(3)], newer)
    assert len(CALLS) == 2


async def test_runtime_registered_instances_are_kept_up_to_date() -> None:
    """register() adds an instance with params that is recomputed with the defaults."""
    CALLS.clear()
    key = ("BTCUSDT", "1m")
    bus = EventBus()
    eng = IndicatorEngine({key: _bars(8)}.get, bus, defaults=[_req()], compute=_compute)
    eng.add_window(key)
    sub = bus.subscribe([IndicatorsUpdated])
    eng.register(key, _req(2, key="scaled2"))
    worker = asyncio.create_task(eng.run())
    try:
        ev = await asyncio.wait_for(sub.get(), 5)
        assert ev.indicators == ("scaled", "scaled2")  # type: ignore[union-attr]
    finally:
        worker.cancel()
    assert sorted(str(c[2]) for c in CALLS) == ["2", "None"]


async def test_a_failing_indicator_does_not_stop_the_others() -> None:
    """An exception in one compute is logged; the rest are still computed."""

    def boom(bars: Bars, params: Any, ctx: Any) -> PanelResult:
        raise RuntimeError("broken")

    bad = IndicatorRequest("boom", IndicatorDef(name="boom", kind="panel", description="t", compute=boom), {})
    key = ("BTCUSDT", "1m")
    bus = EventBus()
    eng = IndicatorEngine({key: _bars(4)}.get, bus, defaults=[bad, _req()], compute=_compute)
    eng.add_window(key)
    ev = await _serve_once(eng, bus, key)
    assert ev.indicators == ("scaled",)  # type: ignore[union-attr]
    assert eng.errors == 1


async def test_per_bar_work_is_the_newest_bar_only_and_payloads_compute_on_request() -> None:
    """Indicators with a per-bar path are not computed in full on close; their newest values are
    kept, equal to TA-Lib's; the full result is computed when a client asks."""
    import talib

    from engine.indicators.registry import parse_requests

    full_calls: list[str] = []

    def counting(req: IndicatorRequest, bars: Bars, ctx: Any) -> PanelResult:
        full_calls.append(req.key)
        return req.definition.compute(bars, req.params, ctx)

    rng = np.random.default_rng(1)
    close = 100 + np.cumsum(rng.normal(0, 1, 300))
    bars = Bars(close, close + 1, close - 1, close, np.full(300, 5.0), np.arange(300, dtype=np.int64) * 60)
    key = ("BTCUSDT", "1m")
    bus = EventBus()
    requests = [*parse_requests(["rsi", "macd"]), _req()]
    eng = IndicatorEngine({key: bars}.get, bus, defaults=requests, compute=counting)
    eng.add_window(key)
    ev = await _serve_once(eng, bus, key)
    assert ev.indicators == ("rsi", "macd", "scaled")  # type: ignore[union-attr]
    assert full_calls == ["scaled"]  # the test indicator has no per-bar path
    newest = {rid[0]: n for rid, n in eng.windows[key].newest.items()}
    assert newest["rsi"].values == (("RSI", float(talib.RSI(close, 14)[-1])),)
    assert newest["macd"].values[0] == ("MACD", float(talib.EMA(close, 12)[-1] - talib.EMA(close, 26)[-1]))
    [(_, result)] = await eng.results_for(key, [requests[0]], bars)
    assert full_calls == ["scaled", "rsi"] and float(result.lines[0].y[-1]) == newest["rsi"].values[0][1]
