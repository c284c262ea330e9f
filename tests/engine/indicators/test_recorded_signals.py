"""Signals fire on the same bars as recorded: 5,000 sample bars × the 25 labels.

``data/signals_5000.json`` was recorded before the engine's per-bar path changed (issue "engine
scale"), twice: ``signals`` from the full computation over all 5,000 bars, and ``per_bar``
what the engine published then — the full computation over its 1,000-bar sliding window, one
closed bar at a time, the signals confirmed on the newest bar.  ``data/signal_bars.npz`` holds
the bars (a random walk with a rally, a sell-off, a flat stretch, a violent stretch and a run
of zero volume).  Checks: the full computation still gives every recorded signal; the engine's
worker now (engine.indicators.newest) publishes the recorded per-bar signals on the same bars
with the same values.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.bars import Bars
from engine.events import EventBus, IndicatorsUpdated
from engine.indicator_state import IndicatorEngine
from engine.indicators.base import ComputeContext
from engine.indicators.registry import IndicatorRequest, lookup
from engine.signals import SIGNAL_LABELS, extract
from engine.windows import Applied, RollingWindow
from testkit.lanes import stretch

DATA = Path(__file__).parent / "data"
WINDOW = 1000


def _load() -> tuple[Bars, dict[str, list[list]]]:
    z = np.load(DATA / "signal_bars.npz")
    bars = Bars(z["open"], z["high"], z["low"], z["close"], z["volume"], z["times"])
    recorded = json.loads((DATA / "signals_5000.json").read_text())
    assert recorded["labels"] == list(SIGNAL_LABELS)
    return bars, recorded["signals"]


BARS, RECORDED = _load()


def _request(key: str) -> tuple[str, dict[str, str]]:
    name, _, query = key.partition("?")
    raw = dict(part.split("=", 1) for part in query.split("&")) if query else {}
    return name, raw


def test_the_recording_covers_every_label_an_indicator_emits() -> None:
    seen = {s[0] for sigs in RECORDED.values() for s in sigs}
    emitted = {label for key in RECORDED for label in lookup(_request(key)[0]).signals}  # type: ignore[union-attr]
    assert seen == emitted
    assert len(emitted) == 21  # the other 4 of the 25 labels have no emitter (docs/chartgen-contract.md §3.5)
    assert set(SIGNAL_LABELS) - emitted == {"rsi_bull_div", "rsi_bear_div", "stoch_bull_div", "stoch_bear_div"}


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_full_computation_gives_the_recorded_signals(key: str) -> None:
    name, raw = _request(key)
    d = lookup(name)
    assert d is not None
    result = d.compute(BARS, d.configure(raw), ComputeContext(symbol="BTCUSDT", interval="1h"))
    got = [[s.label, s.index, s.confirmed_index, s.value] for s in extract(result, BARS)]
    assert [g[:3] for g in got] == [r[:3] for r in RECORDED[key]]
    for g, r in zip(got, RECORDED[key], strict=True):
        assert math.isclose(g[3], r[3], rel_tol=1e-12, abs_tol=1e-12), (g, r)


def _per_bar_recorded(key: str) -> dict[int, list[tuple[str, float]]]:
    out: dict[int, list[tuple[str, float]]] = {}
    for label, i, value in PER_BAR[key]:
        out.setdefault(i, []).append((label, value))
    return out


PER_BAR: dict[str, list[list]] = json.loads((DATA / "signals_5000.json").read_text())["per_bar"]
WITH_NEWEST = sorted(k for k in RECORDED if lookup(_request(k)[0]).newest is not None)  # type: ignore[union-attr]


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]], where: str) -> None:
    assert [g[0] for g in got] == [w[0] for w in want], where
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (where, a, b)


async def test_the_engine_fires_the_recorded_signals_on_the_same_bars() -> None:
    """The live engine's worker, fed one closed bar at a time into a 1,000-bar window, publishes
    exactly the signals the engine published before (recorded per bar) — for every indicator
    with a per-bar path, at every one of the 5,000 bars."""
    assert WITH_NEWEST == sorted(RECORDED)  # every emitter has a per-bar path now
    requests = []
    for k in WITH_NEWEST:
        name, raw = _request(k)
        d = lookup(name)
        assert d is not None
        requests.append(IndicatorRequest(k, d, d.configure(raw)))
    window = RollingWindow("BTCUSDT", "1h", capacity=WINDOW)
    wkey = ("BTCUSDT", "1h")
    bus = EventBus(100_000)
    engine = IndicatorEngine(lambda key: window.bars(), bus, defaults=requests)
    engine.add_window(wkey)
    sub = bus.subscribe([IndicatorsUpdated], maxsize=100_000)
    expected = {k: _per_bar_recorded(k) for k in WITH_NEWEST}
    worker = asyncio.create_task(engine.run())
    compared = 0
    try:
        assert BARS.times is not None
        for i in range(stretch(len(BARS), 2_000)):  # the quick lane's stretch (testkit/lanes.py)
            applied = window.apply_closed(
                int(BARS.times[i]),
                float(BARS.open[i]),
                float(BARS.high[i]),
                float(BARS.low[i]),
                float(BARS.close[i]),
                float(BARS.volume[i]),
            )
            assert applied is Applied.APPENDED
            engine.mark_dirty(wkey)
            event = await asyncio.wait_for(sub.get(), 5)
            assert isinstance(event, IndicatorsUpdated) and event.bar_time == int(BARS.times[i])
            by_key: dict[str, list[tuple[str, float]]] = {k: [] for k in WITH_NEWEST}
            for hit, (name, label) in zip(event.hits, event.signals, strict=True):
                assert hit.label == label
                by_key[name].append((label, hit.value))
            for k in WITH_NEWEST:
                want = expected[k].get(i, [])
                _same(by_key[k], want, f"{k} bar {i}")
                compared += len(want)
    finally:
        worker.cancel()
    assert compared > 3000 * stretch(len(BARS), 2_000) // len(BARS)
