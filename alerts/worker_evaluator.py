"""The alert evaluator of a cluster worker: the single-process evaluator plus what a market's
hand-over needs (daemon/worker/runtime.py, daemon/worker/handover.py).

- ``ticks_through``: per (symbol, interval) stream, the exchange time of the newest tick checked
  against every indexed touch alert with its firings committed — the worker's hand-over mark.
- :meth:`wait_ticks_past`: the first tick a new owner evaluated (from then on the live path
  covers the market).
- :meth:`fire_missed`: fire alerts for prices the live path did not see (the gap's trades and
  closes), taken out of their books first so a live event and the backfill never both fire one.
- ``on_fired``: told of every committed firing (the worker forgets the alerts it held).
- :meth:`recent_prices`: the ticks evaluated in the last :data:`RECENT_S` seconds per symbol.  An
  alert set at a front reaches its worker by ``NOTIFY`` a few milliseconds after it was armed;
  ticks evaluated meanwhile did not see it.  The worker checks them when it indexes the alert
  (daemon/worker/runtime.py) — in the same step, with no await between, so a tick is either in
  this record or evaluated with the alert indexed.
- ``pending``: firings PostgreSQL did not confirm because it could not be reached.  The
  single-process evaluator puts such alerts back into their books, to fire on a later price —
  which loses a crossing if the price has moved back by then.  Here they stay out of the books
  and are fired again with their original price and time (:meth:`retry_pending`, each heartbeat)
  until PostgreSQL answers; firing again is safe (an alert fires at most once in the store).  The
  worker does not move the hand-over marks of their markets meanwhile, so if it dies with firings
  pending, the next owner's backfill finds those trades again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from alerts.evaluator import AlertEvaluator, AlertMarket, _close_key
from alerts.models import Alert, Firing
from alerts.price_book import Crossed, PriceBook
from alerts.push import PushHub
from alerts.repository import AlertRepository
from alerts.store import Fired
from engine import Tick, TradePrint, interval_seconds
from storage import StorageUnavailable

log = structlog.get_logger(__name__)

RECENT_S = 10.0
"""How long evaluated ticks are kept for alerts indexed after them (a notification's delay is
milliseconds; a busy worker's loop may add a second)."""


def _keep_out() -> None:
    """A firing that did not commit leaves its alerts out of the books: they are pending."""


class WorkerEvaluator(AlertEvaluator):
    def __init__(self, store: AlertRepository, market: AlertMarket, hub: PushHub, **options: Any) -> None:
        super().__init__(store, market, hub, **options)
        self.ticks_through: dict[tuple[str, str], int] = {}
        self.on_fired: Callable[[list[Fired]], None] | None = None
        self._tick_waiters: list[asyncio.Future[None]] = []
        self.pending: dict[str, Firing] = {}
        self._recent: dict[str, deque[TradePrint]] = {}

    def recent_prices(self, symbol: str) -> list[TradePrint]:
        """The ticks of ``symbol`` evaluated in the last :data:`RECENT_S` seconds, oldest first."""
        return list(self._recent.get(symbol, ()))

    async def on_ticks(self, ticks: Sequence[Tick]) -> list[Fired]:
        horizon_ms = int(RECENT_S * 1000)
        for tick in ticks:  # recorded before the crossing check below, with no await between
            ring = self._recent.get(tick.symbol)
            if ring is None:
                ring = self._recent[tick.symbol] = deque()
            ring.append(TradePrint(tick.time_ms, tick.price))
            while ring[0].time_ms < tick.time_ms - horizon_ms:
                ring.popleft()
        fired = await super().on_ticks(ticks)  # raises if the firing was not committed: no mark moves
        through = self.ticks_through
        for tick in ticks:
            if tick.interval:  # a resync tick has none
                through[(tick.symbol, tick.interval)] = tick.time_ms
        if self._tick_waiters:
            for waiter in self._tick_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._tick_waiters.clear()
        return fired

    async def on_tick(self, tick: Tick) -> list[Fired]:
        return await self.on_ticks([tick])

    async def _fire(self, firings: list[Firing], restore: Callable[[], None]) -> list[Fired]:
        try:
            return await super()._fire(firings, _keep_out)
        except StorageUnavailable:
            for f in firings:
                self.pending.setdefault(f.alert_id, f)
            log.warning("alert_firings_pending", alerts=len(firings), pending=len(self.pending))
            return []
        except Exception:
            restore()
            raise

    async def retry_pending(self) -> list[str]:
        """Fire the pending firings again; the ids the store no longer had (fired or cancelled
        meanwhile).  Raises :class:`StorageUnavailable` while PostgreSQL is still away."""
        if not self.pending:
            return []
        firings = list(self.pending.values())
        fired = await super()._fire(firings, _keep_out)
        for f in firings:
            self.pending.pop(f.alert_id, None)
        done = {f.alert.id for f in fired}
        if fired:
            log.info("alert_firings_confirmed", alerts=len(fired))
        return [f.alert_id for f in firings if f.alert_id not in done]

    def _fired(self, firings: list[Firing], fired: list[Fired]) -> None:
        super()._fired(firings, fired)
        if fired and self.on_fired is not None:
            self.on_fired(fired)

    async def wait_ticks_past(self, symbol: str, interval: str, after_ms: int | None) -> int:
        """Wait until a tick of the stream newer than ``after_ms`` was evaluated; its exchange time
        (wrap in a timeout: a stream that is down sends none)."""
        key = (symbol, interval)
        while True:
            through = self.ticks_through.get(key)
            if through is not None and (after_ms is None or through > after_ms):
                return through
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._tick_waiters.append(waiter)
            await waiter

    async def fire_missed(self, missed: Sequence[tuple[Alert, float, int]]) -> list[Fired]:
        """Fire indexed alerts for (alert, value, time in ms): a trade for a touch alert, a bar's close
        for a close alert, a signal's value and bar for an indicator-signal alert.  A price alert a
        live event took already is skipped (that firing owns it) and, if the firing is not committed,
        goes back into its book; an indicator-signal alert stays indexed (the store fires it once)."""
        taken: list[tuple[PriceBook, str, Crossed]] = []
        firings: list[Firing] = []
        now = self._clock()
        for alert, price, time_ms in missed:
            step = interval_seconds(alert.interval)
            if alert.kind == "indicator_signal":  # no book: the store fires it at most once, live or not
                firings.append(
                    Firing(alert_id=alert.id, value=price, triggered_at=now, bar_time=time_ms // 1000 // step * step)
                )
                continue
            above = alert.kind == "price_above"
            level = alert.threshold or 0.0
            book, key = (
                (self.close, _close_key(alert.symbol, alert.interval))
                if alert.trigger == "close"
                else (self.touch, alert.symbol)
            )
            if not book.remove(key, above, level, alert.id):
                continue
            taken.append((book, key, Crossed(alert.id, above, level)))
            firings.append(
                Firing(alert_id=alert.id, value=price, triggered_at=now, bar_time=time_ms // 1000 // step * step)
            )
        if not firings:
            return []

        def restore() -> None:
            for book, key, crossed in taken:
                book.put_back(key, [crossed])

        return await self._fire(firings, restore)
