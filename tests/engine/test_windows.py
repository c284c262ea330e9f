"""RollingWindow: contiguous closed bars, idempotent by open time, open kline kept apart."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.windows import Applied, OpenKline, RollingWindow

STEP = 60


def _row(t: int) -> tuple[int, float, float, float, float, float]:
    return t, float(t), t + 1.0, t - 1.0, t + 0.5, 1.0


def test_closed_bars_append_in_order_and_trim_to_capacity() -> None:
    """Only the newest ``capacity`` bars are kept, oldest first."""
    w = RollingWindow("btcusdt", "1m", capacity=5, headroom=2)
    for i in range(12):
        assert w.apply_closed(*_row(i * STEP)) is Applied.APPENDED
    assert len(w) == 5
    assert w.bars().times.tolist() == [i * STEP for i in range(7, 12)]
    assert w.bars().close.tolist() == [i * STEP + 0.5 for i in range(7, 12)]
    assert w.symbol == "BTCUSDT"


def test_duplicate_and_older_bars_are_ignored() -> None:
    """Applying a bar twice, or an older one, changes nothing."""
    w = RollingWindow("X", "1m", capacity=10)
    w.apply_closed(*_row(0))
    w.apply_closed(*_row(60))
    assert w.apply_closed(*_row(60)) is Applied.DUPLICATE
    assert w.apply_closed(*_row(0)) is Applied.STALE
    assert w.bars().times.tolist() == [0, 60]


def test_a_bar_that_would_leave_a_hole_is_reported_as_gap() -> None:
    """A bar more than one interval after the last is refused as a gap."""
    w = RollingWindow("X", "1m", capacity=10)
    w.apply_closed(*_row(0))
    assert w.apply_closed(*_row(180)) is Applied.GAP
    assert len(w) == 1


def test_open_kline_is_never_part_of_the_closed_bars() -> None:
    """The forming kline is returned only on request and dropped once its bar closes."""
    w = RollingWindow("X", "1m", capacity=10)
    w.apply_closed(*_row(0))
    assert w.update_open(OpenKline(60, 1.0, 2.0, 0.5, 1.5, 3.0))
    assert len(w.bars()) == 1
    with_open = w.bars(include_open=True)
    assert with_open.times.tolist() == [0, 60] and with_open.close[-1] == 1.5
    assert w.bars(1, include_open=True).times.tolist() == [60]
    w.apply_closed(*_row(60))
    assert w.open_kline is None
    assert not w.update_open(OpenKline(60, 1.0, 2.0, 0.5, 1.5, 3.0))


def test_merge_appends_only_newer_bars_of_a_batch() -> None:
    """A REST batch overlapping the window adds just the new bars."""
    w = RollingWindow("X", "1m", capacity=100)
    for i in range(3):
        w.apply_closed(*_row(i * STEP))
    times = np.array([60, 120, 180, 240], dtype=np.int64)
    values = np.vstack([times + k for k in range(5)]).astype(np.float64)
    assert w.merge_closed(times, values) == 2
    assert w.bars().times.tolist() == [0, 60, 120, 180, 240]
    assert w.merge_closed(times, values) == 0


def test_a_batch_larger_than_the_buffer_keeps_the_newest_capacity_bars() -> None:
    """Merging more bars than fit keeps the newest ``capacity``."""
    w = RollingWindow("X", "1m", capacity=4, headroom=1)
    times = np.arange(0, 10 * STEP, STEP, dtype=np.int64)
    values = np.vstack([times] * 5).astype(np.float64)
    assert w.merge_closed(times, values) == 4
    assert w.bars().times.tolist() == times[-4:].tolist()
    w.apply_closed(*_row(10 * STEP))
    assert w.bars().times.tolist() == [7 * STEP, 8 * STEP, 9 * STEP, 10 * STEP]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=120), st.integers(2, 12))
def test_any_delivery_order_yields_a_contiguous_deduplicated_window(order: list[int], capacity: int) -> None:
    """Whatever arrives (repeats, old bars), the window is strictly increasing and contiguous."""
    w = RollingWindow("X", "1m", capacity=capacity, headroom=3)
    for i in order:
        w.apply_closed(*_row(i * STEP))
    t = w.bars().times
    assert len(t) <= capacity
    assert (np.diff(t) == STEP).all()
