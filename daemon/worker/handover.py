"""Hand-over of a market to a cluster worker: backfill, then evaluate.

While a market moves from a dead worker to a live one nobody evaluates its alerts: from the old
owner's last mark (cluster/marks.py: the exchange time through which it had evaluated every tick,
firings committed) until the new owner's first evaluated tick.  What "missed" means here: an
armed price alert whose level a trade in that gap reached (touch alerts), or that a bar closing in
that gap closed beyond (close alerts), or whose signal an indicator gave on a bar closing in that
gap (indicator-signal alerts), and which the live path will not see because the price has moved
back or the bar is no longer the newest.  The new owner closes the gap in this order:

1. index the market's alerts and follow it (the engine warms it up from REST and streams it);
2. wait for the first tick the evaluator checks with those alerts indexed — from its exchange
   time T on, the live path covers the market;
3. fetch the exchange's trades after ``max(mark, alert armed)`` up to T (engine/market_data/
   trade_history.py) and fire each touch alert the first trade that reached its level; for close
   alerts, the bars of the warmed-up window that closed after that boundary and up to T; for
   indicator-signal alerts, the alert's indicator computed over the warmed-up window, and the
   first of its signals with the alert's label confirmed on a bar that closed after the alert was
   armed and after ``mark − one interval``, up to T (:func:`missed_by_signals`).  The extra
   interval before the mark: the old owner's indicator update for a bar runs after the bar closes,
   so its mark may have passed a close whose signals it had not checked yet.  Checking a bar twice
   is harmless — an alert fires at most once in the store, and one the old owner fired is gone.

Firing goes through the evaluator (exactly once in the store), so a live tick and the backfill
never both fire an alert.  A gap longer than ``cluster_backfill_max_s`` (5 minutes by default, an
hour at most: what Binance serves in one window) is checked for its newest part only and logged as
``handover_gap_truncated`` — a cluster that was entirely down longer than that, or a market's first
owner for alerts armed long before, does not replay the whole time (as a single-node daemon does
not replay its downtime).  A signal is the new owner's computation over the window it warmed
up from REST: an indicator whose value depends on how far back it was seeded may differ slightly
from the old owner's at the gap's bars.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog

from alerts import Alert, WorkerEvaluator
from engine import (
    MAX_SPAN_MS,
    Bars,
    IndicatorRequest,
    PanelResult,
    RequestId,
    TradeHistory,
    TradePrint,
    interval_seconds,
    parse_requests,
    request_id,
)

log = structlog.get_logger(__name__)


HANDOVER_CONCURRENCY = 16
"""Markets whose trade history is fetched at once after a take-over (REST weight 4 each)."""


def market_name(symbol: str, interval: str) -> str:
    return f"{symbol} {interval}"


def split_market(market: str) -> tuple[str, str]:
    symbol, interval = market.split(" ", 1)
    return symbol, interval


class GatedHistory:
    """At most ``gate``'s count of trade-history fetches at once (the waits for first ticks are not gated)."""

    def __init__(self, inner: TradeHistory, gate: asyncio.Semaphore) -> None:
        self.inner = inner
        self.gate = gate

    async def trades(self, symbol: str, start_ms: int, end_ms: int) -> list[TradePrint]:
        async with self.gate:
            return await self.inner.trades(symbol, start_ms, end_ms)


def armed_ms(alert: Alert) -> int:
    """When the alert started watching, in exchange milliseconds."""
    return int((alert.armed_at if alert.armed_at is not None else alert.created_at) * 1000)


def boundary_ms(alert: Alert, mark_ms: int | None) -> int:
    """Trades after this time are the new owner's to check for ``alert``."""
    return armed_ms(alert) if mark_ms is None else max(armed_ms(alert), mark_ms)


def _reaches(alert: Alert, price: float) -> bool:
    level = alert.threshold or 0.0
    return price >= level if alert.kind == "price_above" else price <= level


def missed_by_trades(
    alerts: Iterable[Alert], trades: Sequence[TradePrint], mark_ms: int | None
) -> list[tuple[Alert, float, int]]:
    """Touch price alerts a trade after their boundary reached: (alert, the first such trade's price and time)."""
    out: list[tuple[Alert, float, int]] = []
    for alert in alerts:
        if alert.kind not in ("price_above", "price_below") or alert.trigger == "close":
            continue
        after = boundary_ms(alert, mark_ms)
        for t in trades:
            if t.time_ms > after and _reaches(alert, t.price):
                out.append((alert, t.price, t.time_ms))
                break
    return out


def missed_by_closes(
    alerts: Iterable[Alert], bars: Bars | None, mark_ms: int | None, through_ms: int
) -> list[tuple[Alert, float, int]]:
    """Close price alerts a bar closing after their boundary and by ``through_ms`` closed beyond."""
    out: list[tuple[Alert, float, int]] = []
    if bars is None or bars.times is None:
        return out
    for alert in alerts:
        if alert.kind not in ("price_above", "price_below") or alert.trigger != "close":
            continue
        after = boundary_ms(alert, mark_ms)
        step_ms = interval_seconds(alert.interval) * 1000
        for open_s, close in zip(bars.times.tolist(), bars.close.tolist(), strict=True):
            closed_ms = int(open_s) * 1000 + step_ms
            if after < closed_ms <= through_ms and _reaches(alert, close):
                out.append((alert, float(close), int(open_s) * 1000))
                break
    return out


def signal_request(alert: Alert) -> IndicatorRequest:
    """The indicator an indicator-signal alert watches (as the evaluator registers it)."""
    (request,) = parse_requests([{"name": alert.indicator_name or alert.indicator, **alert.params}])
    return request


def missed_by_signals(
    alerts: Iterable[Alert],
    bars: Bars | None,
    results: Callable[[Alert], PanelResult | None],
    mark_ms: int | None,
    through_ms: int,
) -> list[tuple[Alert, float, int]]:
    """Indicator-signal alerts whose label the indicator gave on a bar closing in the gap (module
    docstring): (alert, the signal's value, the confirming bar's open time in ms), the first such bar."""
    out: list[tuple[Alert, float, int]] = []
    if bars is None or bars.times is None:
        return out
    times = [int(t) for t in bars.times.tolist()]
    for alert in alerts:
        if alert.kind != "indicator_signal":
            continue
        result = results(alert)
        if result is None:
            continue
        step_ms = interval_seconds(alert.interval) * 1000
        after = armed_ms(alert) if mark_ms is None else max(armed_ms(alert), mark_ms - step_ms)
        hits = sorted(
            (d.confirmed_index, d.y)
            for d in result.signals()
            if d.label == (alert.signal or "") and 0 <= d.confirmed_index < len(times)
        )
        for index, value in hits:
            closed_ms = times[index] * 1000 + step_ms
            if after < closed_ms <= through_ms:
                out.append((alert, float(value), times[index] * 1000))
                break
    return out


@dataclass(frozen=True, slots=True)
class HandOver:
    market: str
    live_from_ms: int
    """Exchange time of the first tick evaluated by this owner."""
    checked_from_ms: int | None
    """The earliest boundary checked (None: no price alert needed a check)."""
    trades: int
    fired: int


async def hand_over(
    evaluator: WorkerEvaluator,
    history: TradeHistory,
    bars_of: Callable[[str, str], Bars | None],
    symbol: str,
    interval: str,
    alerts: Sequence[Alert],
    mark_ms: int | None,
    max_gap_ms: int = MAX_SPAN_MS,
    synced: Callable[[], Awaitable[None]] | None = None,
    compute: Callable[[IndicatorRequest, Bars], Awaitable[PanelResult]] | None = None,
) -> HandOver:
    """Steps 2 and 3 above for one market whose alerts are indexed and which is followed.

    ``bars_of(symbol, interval)`` gives the market's closed bars (LiveEngine.window_bars);
    ``synced()`` returns once they include the warm-up (ticks are published before it is done);
    ``compute(request, bars)`` computes an indicator over them (the engine's
    ``indicators.compute_one``; None: indicator-signal alerts are not checked)."""
    market = f"{symbol} {interval}"
    live_from = await evaluator.wait_ticks_past(symbol, interval, evaluator.ticks_through.get((symbol, interval)))
    signalled = [a for a in alerts if a.kind == "indicator_signal"] if compute is not None else []
    missed_signals = await _missed_signals(signalled, bars_of, symbol, interval, mark_ms, live_from, synced, compute)
    priced = [a for a in alerts if a.kind in ("price_above", "price_below")]
    if not priced:
        fired = await evaluator.fire_missed(missed_signals) if missed_signals else []
        return HandOver(market, live_from, None, 0, len(fired))
    start = min(boundary_ms(a, mark_ms) for a in priced)
    max_gap_ms = min(max_gap_ms, MAX_SPAN_MS)
    if live_from - start > max_gap_ms:
        log.warning(
            "handover_gap_truncated", market=market, gap_s=(live_from - start) / 1000, checked_s=max_gap_ms / 1000
        )
        start = live_from - max_gap_ms
    touch = [a for a in priced if a.trigger != "close"]
    trades = await history.trades(symbol, start + 1, live_from) if touch and start < live_from else []
    missed = missed_by_trades(touch, trades, mark_ms) + missed_signals
    if any(a.trigger == "close" for a in priced):
        if synced is not None:  # ticks flow before the warm-up's bars are in: wait for the gap's closes
            await synced()
        missed += missed_by_closes(priced, bars_of(symbol, interval), mark_ms, live_from)
    fired = await evaluator.fire_missed(missed) if missed else []
    if fired:
        log.info("handover_fired", market=market, fired=len(fired), gap_s=(live_from - start) / 1000)
    return HandOver(market, live_from, start, len(trades), len(fired))


async def _missed_signals(
    alerts: Sequence[Alert],
    bars_of: Callable[[str, str], Bars | None],
    symbol: str,
    interval: str,
    mark_ms: int | None,
    live_from: int,
    synced: Callable[[], Awaitable[None]] | None,
    compute: Callable[[IndicatorRequest, Bars], Awaitable[PanelResult]] | None,
) -> list[tuple[Alert, float, int]]:
    """:func:`missed_by_signals` over the warmed-up window, each distinct indicator computed once."""
    if not alerts or compute is None:
        return []
    if synced is not None:  # the gap's bars are in the window only once the warm-up is
        await synced()
    bars = bars_of(symbol, interval)
    if bars is None or len(bars) == 0:
        return []
    computed: dict[RequestId, PanelResult] = {}
    for alert in alerts:
        request = signal_request(alert)
        if request_id(request) not in computed:
            computed[request_id(request)] = await compute(request, bars)
    return missed_by_signals(alerts, bars, lambda a: computed.get(request_id(signal_request(a))), mark_ms, live_from)
