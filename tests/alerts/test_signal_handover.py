"""Hand-over of indicator-signal alerts (daemon/worker/handover.py): a signal the indicator gave on a
bar that closed while the market had no owner fires the alert once the new owner computed the
indicator over its warmed-up window.

- :func:`missed_by_signals` against a brute-force oracle (hypothesis: labels, confirmation bars,
  arming times, marks);
- rsi_mfi_stoch's RSI over a price path built to cross down out of overbought inside the gap: the alert fires with
  the signal's value and bar through :func:`hand_over` on a real evaluator and store, once;
  a second hand-over (or a live firing first) cannot fire it again; a signal before the alert was
  armed, or before ``mark − one interval``, does not fire it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.models import Alert
from alerts.push import PushHub
from alerts.store import AlertStore
from alerts.worker_evaluator import WorkerEvaluator
from daemon import hand_over, missed_by_signals, signal_request
from engine import Bars, ComputeContext, Dot, IndicatorRequest, PanelResult, Tick, compute_sync
from storage import Database
from testkit.null_market import NullMarket

STEP_S = 60
T0 = 1_700_000_000 // STEP_S * STEP_S


def signal_alert(armed_s: float, label: str = "rsi_overbought", **params: Any) -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal="p",
        symbol="BTCUSDT",
        interval="1m",
        kind="indicator_signal",
        indicator="rsi_mfi_stoch",
        indicator_name="rsi_mfi_stoch",
        params=params,
        signal=label,
        created_at=armed_s,
        armed_at=armed_s,
    )


def bars_of(closes: list[float]) -> Bars:
    c = np.asarray(closes, dtype=float)
    times = np.asarray([T0 + i * STEP_S for i in range(len(c))], dtype=np.int64)
    return Bars(open=c, high=c * 1.001, low=c * 0.999, close=c, volume=np.ones_like(c), times=times)


# --- the selection, against a brute-force oracle -------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 30),
    dots=st.lists(
        st.tuples(st.integers(0, 29), st.one_of(st.none(), st.integers(0, 4)), st.sampled_from(["a", "b"])), max_size=12
    ),
    armed=st.integers(0, 32),
    mark=st.one_of(st.none(), st.integers(0, 32)),
    through=st.integers(0, 32),
    label=st.sampled_from(["a", "b"]),
)
def test_missed_by_signals_matches_a_brute_force_oracle(
    n: int, dots: list[tuple[int, int | None, str]], armed: int, mark: int | None, through: int, label: str
) -> None:
    bars = bars_of([100.0] * n)
    result = PanelResult(label="x", is_overlay=False)
    for x, delay, lab in dots:
        result.dots.append(Dot(x, float(x) + 0.5, "#fff", label=lab, confirmed_at=None if delay is None else x + delay))
    alert = signal_alert(T0 + armed * STEP_S - 1, label)
    mark_ms = None if mark is None else (T0 + mark * STEP_S) * 1000
    through_ms = (T0 + through * STEP_S) * 1000
    got = missed_by_signals([alert], bars, lambda _a: result, mark_ms, through_ms)

    expected = None
    for i in range(n):  # bars in order; the first whose close is in the window and that confirms a signal
        closed_ms = (T0 + (i + 1) * STEP_S) * 1000
        after = (alert.armed_at or 0) * 1000
        if mark_ms is not None:
            after = max(after, mark_ms - STEP_S * 1000)
        if not after < closed_ms <= through_ms:
            continue
        values = sorted(d.y for d in result.dots if d.label == label and d.confirmed_index == i)
        if values:
            expected = (values[0], (T0 + i * STEP_S) * 1000)
            break
    assert [(v, t) for _a, v, t in got] == ([] if expected is None else [expected])


# --- a real indicator through hand_over -----------------------------------------------------


def overbought_path() -> list[float]:
    """Flat, a long climb (RSI above 70), then a drop: RSI crosses back under 70 near the end."""
    flat = [100.0 + (0.1 if i % 2 else -0.1) for i in range(40)]
    climb = [100.0 + 1.5 * k for k in range(1, 21)]
    drop = [climb[-1] - 4.0 * k for k in range(1, 8)]
    return flat + climb + drop


def rsi_signals(bars: Bars, request: IndicatorRequest) -> list[int]:
    result = compute_sync(request, bars, ComputeContext(symbol="BTCUSDT", interval="1m"))
    return sorted(d.confirmed_index for d in result.signals() if d.label == "rsi_overbought")


async def test_a_signal_in_the_gap_fires_the_alert_once_through_the_hand_over(db: Database) -> None:
    bars = bars_of(overbought_path())
    probe = signal_alert(T0)
    request = signal_request(probe)
    crossings = rsi_signals(bars, request)
    assert crossings, "the path must give an rsi_overbought signal"
    gap_bar = crossings[-1]
    gap_close_s = T0 + (gap_bar + 1) * STEP_S
    last_close_ms = (T0 + len(bars) * STEP_S) * 1000

    store = AlertStore(db)
    evaluator = WorkerEvaluator(store, NullMarket(), PushHub())
    armed_before = signal_alert(T0 + 5 * STEP_S)  # armed long before the gap
    armed_after = signal_alert(gap_close_s + 1)  # armed after the signal's bar closed: not for this signal
    for a in (armed_before, armed_after):
        await store.insert(a)
        evaluator.index(a)
    live_ms = last_close_ms + 5_000

    async def compute(req: IndicatorRequest, window: Bars) -> PanelResult:
        return compute_sync(req, window, ComputeContext(symbol="BTCUSDT", interval="1m"))

    mark_ms = (gap_close_s - 2 * STEP_S) * 1000  # the old owner's mark: two bars before the signal's close

    async def over() -> Any:
        """One hand-over: it waits for the first tick evaluated after it started (sent here)."""
        running = asyncio.create_task(
            hand_over(
                evaluator,
                history=None,  # type: ignore[arg-type]  # no price alert: trades are never fetched
                bars_of=lambda _s, _i: bars,
                symbol="BTCUSDT",
                interval="1m",
                alerts=[armed_before, armed_after],
                mark_ms=mark_ms,
                compute=compute,
            )
        )
        await asyncio.sleep(0)  # one step: the task reads where the evaluated ticks stand and waits for the next
        tick_ms = live_ms + len(ticks)
        ticks.append(tick_ms)
        await evaluator.on_ticks([Tick("BTCUSDT", "1m", float(bars.close[-1]), tick_ms, tick_ms // 60_000 * 60)])
        return await running

    ticks: list[int] = []
    result = await over()
    assert result.fired == 1
    assert await store.outcome(armed_before.id) == "fired" and await store.outcome(armed_after.id) is None
    [(fired_id, value, bar_time)] = [
        (r["alert_id"], r["value"], r["bar_time"])
        for r in await db.fetchall("SELECT alert_id, value, bar_time FROM alert_events WHERE outcome = 'fired'")
    ]
    assert fired_id == armed_before.id and bar_time == T0 + gap_bar * STEP_S
    [expected] = [
        d.y
        for d in compute_sync(request, bars, ComputeContext("BTCUSDT", "1m")).signals()
        if d.label == "rsi_overbought" and d.confirmed_index == gap_bar
    ]
    assert value == expected and 0 < value < 70  # RSI just under the overbought level it crossed
    assert (await over()).fired == 0  # fired once: a second hand-over cannot fire it again


async def test_signals_before_the_mark_or_the_arming_do_not_fire() -> None:
    bars = bars_of(overbought_path())
    request = signal_request(signal_alert(T0))
    gap_bar = rsi_signals(bars, request)[-1]
    gap_close_ms = (T0 + (gap_bar + 1) * STEP_S) * 1000
    through_ms = (T0 + len(bars) * STEP_S) * 1000
    result = compute_sync(request, bars, ComputeContext("BTCUSDT", "1m"))
    alert = signal_alert(T0)
    # the old owner's mark one interval past the close: within the re-checked interval, so checked again
    assert missed_by_signals([alert], bars, lambda _a: result, gap_close_ms + STEP_S * 1000 - 1, through_ms)
    # two intervals past it: the old owner had evaluated it for certain
    later = [b for b in rsi_signals(bars, request) if b > gap_bar]
    assert not later
    assert missed_by_signals([alert], bars, lambda _a: result, gap_close_ms + STEP_S * 1000, through_ms) == []
    assert missed_by_signals([signal_alert(gap_close_ms / 1000)], bars, lambda _a: result, None, through_ms) == []
    assert missed_by_signals([alert], bars, lambda _a: result, None, gap_close_ms - 1) == []  # closed after T
