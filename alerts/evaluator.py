"""Evaluating alerts against engine events and firing them exactly once.

The evaluator keeps the in-memory indexes of the active alerts (the store is the truth and
rebuilds them at start): ``touch`` price alerts in a :class:`PriceBook` keyed by symbol and
checked on every tick; ``close`` price alerts in a book keyed by ``SYMBOL interval`` and
checked on each closed bar; indicator-signal alerts indexed by (symbol, interval,
indicator instance, label) and checked against the signals of the newest closed bar only.
A bar or signal counts only if the bar closed after the alert was created, so a signal
already on the chart never fires a new alert.

Firing takes the crossed alerts out of the index, commits them through
:meth:`AlertStore.fire` (one transaction), then publishes their push frames and has their
audit lines written (:mod:`alerts.audit_log`).  If the commit fails the alerts go back into
the index and fire on a later event; a crash before the commit loses nothing (the alerts
are still in the store) and a crash after it cannot fire them again (they are gone from it).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol

import structlog

from alerts.action_runner import ActionRunner
from alerts.audit_log import AUDIT_COALESCE_S, AlertAuditLog, AuditWriter
from alerts.feed import NotificationFeed
from alerts.models import Alert, Firing, notification_payload
from alerts.price_book import Crossed, PriceBook
from alerts.push import PushHub
from alerts.repository import AlertRepository
from alerts.store import Fired
from engine import BarClosed, IndicatorRequest, IndicatorsUpdated, Lagged, Tick, interval_seconds, parse_requests

log = structlog.get_logger(__name__)


class AlertMarket(Protocol):
    """What the evaluator needs from the live engine (LiveEngine satisfies it)."""

    def follow(self, symbol: str, interval: str, *, priority: bool = False) -> Any: ...
    def unfollow(self, symbol: str, interval: str, *, priority: bool = False) -> None: ...
    def register_indicator(self, symbol: str, interval: str, request: IndicatorRequest) -> Hashable: ...
    def subscribe(self, kinds: Any = None, *, symbols: Any = None, maxsize: int | None = None) -> Any: ...
    def last_price(self, symbol: str) -> float | None: ...
    def exchange_time_ms(self, symbol: str) -> int | None: ...


def _armed(alert: Alert) -> float:
    """When the alert started watching, on the exchange's clock (wall clock if the exchange's was unknown)."""
    return alert.armed_at if alert.armed_at is not None else alert.created_at


def _close_key(symbol: str, interval: str) -> str:
    return f"{symbol} {interval}"


class AlertEvaluator:
    """Active-alert indexes, the engine event loop, and exactly-once firing."""

    def __init__(
        self,
        store: AlertRepository,
        market: AlertMarket,
        hub: PushHub,
        audit: AuditWriter | None = None,
        *,
        clock: Callable[[], float] = time.time,
        queue_size: int = 100_000,
        actions: ActionRunner | None = None,
        feed: NotificationFeed | None = None,
    ) -> None:
        self.store = store
        self.feed = feed
        """Every firing, for live viewers (the dashboard); None: nobody watches."""
        self.actions = actions
        """Runs the order actions of action alerts (None: an action alert fires with a refusal)."""
        self._action_alerts: dict[str, Alert] = {}
        self.market = market
        self.hub = hub
        self.audit_log = AlertAuditLog(store, audit)
        """The trades.log lines of the firings (:meth:`run_audit`, :meth:`write_audit`)."""
        self._clock = clock
        self._queue_size = queue_size
        self.touch = PriceBook()
        self.close = PriceBook()
        self._close_created: dict[str, float] = {}
        self._signals: dict[tuple[str, str], dict[tuple[Hashable, str], dict[str, float]]] = defaultdict(dict)
        self._requests: dict[str, Hashable] = {}
        self.fired = 0
        self.lagged = 0
        self.evaluated: dict[str, int] = {}
        """Per ``SYMBOL interval``: open time of the newest bar whose signals were checked."""
        self._fire_lock = asyncio.Lock()
        self.pipelined = False
        """Set by :meth:`run`: firings without an action return once committed and are pushed when
        on disk, so the next batch is evaluated during the flush (a direct call waits for it)."""
        self._unsynced: asyncio.Future[None] | None = None
        """The newest firing still waiting for its disk flush (its frames are not pushed yet)."""

    # --- index maintenance ---------------------------------------------------------------
    def index(self, alert: Alert, request: IndicatorRequest | None = None) -> None:
        """Add an active alert to the indexes and make the engine follow its market."""
        self.market.follow(alert.symbol, alert.interval, priority=True)
        if alert.action is not None:
            self._action_alerts[alert.id] = alert
        if alert.kind == "indicator_signal":
            if request is None:
                (request,) = parse_requests([{"name": alert.indicator_name or alert.indicator, **alert.params}])
            rid = self.market.register_indicator(alert.symbol, alert.interval, request)
            self._requests[alert.id] = rid
            per = self._signals[(alert.symbol, alert.interval)]
            per.setdefault((rid, alert.signal or ""), {})[alert.id] = _armed(alert)
        elif alert.trigger == "close":
            self.close.add(
                _close_key(alert.symbol, alert.interval), alert.kind == "price_above", alert.threshold or 0.0, alert.id
            )
            self._close_created[alert.id] = _armed(alert)
        else:
            self.touch.add(alert.symbol, alert.kind == "price_above", alert.threshold or 0.0, alert.id)

    def index_many(self, alerts: Iterable[Alert]) -> None:
        """Bulk index at start-up (touch alerts are sorted once, not inserted one by one)."""
        bulk: list[tuple[str, bool, float, str]] = []
        for a in alerts:
            if a.kind != "indicator_signal" and a.trigger == "touch":
                self.market.follow(a.symbol, a.interval, priority=True)
                if a.action is not None:
                    self._action_alerts[a.id] = a
                bulk.append((a.symbol, a.kind == "price_above", a.threshold or 0.0, a.id))
            else:
                self.index(a)
        self.touch.bulk_load(bulk)

    def unindex(self, alert: Alert) -> None:
        """Remove an alert that ended (cancelled, expired, fired) and release its market."""
        self._action_alerts.pop(alert.id, None)
        if alert.kind == "indicator_signal":
            rid = self._requests.pop(alert.id, None)
            per = self._signals.get((alert.symbol, alert.interval))
            if per is not None and rid is not None:
                ids = per.get((rid, alert.signal or ""))
                if ids is not None:
                    ids.pop(alert.id, None)
                    if not ids:
                        del per[(rid, alert.signal or "")]
                if not per:
                    del self._signals[(alert.symbol, alert.interval)]
        elif alert.trigger == "close":
            self.close.remove(
                _close_key(alert.symbol, alert.interval), alert.kind == "price_above", alert.threshold or 0.0, alert.id
            )
            self._close_created.pop(alert.id, None)
        else:
            self.touch.remove(alert.symbol, alert.kind == "price_above", alert.threshold or 0.0, alert.id)
        self.market.unfollow(alert.symbol, alert.interval, priority=True)

    def status(self) -> dict[str, Any]:
        return {
            "active": self.active_count,
            "fired": self.fired,
            "lagged_events": self.lagged,
            "signals_checked": dict(self.evaluated),
        }

    @property
    def active_count(self) -> int:
        signals = sum(len(ids) for per in self._signals.values() for ids in per.values())
        return len(self.touch) + len(self.close) + signals

    # --- evaluation ----------------------------------------------------------------------
    def crossed_by_tick(self, tick: Tick) -> list[Crossed]:
        return self.touch.take_crossed(tick.symbol, tick.price)

    async def on_ticks(self, ticks: Sequence[Tick]) -> list[Fired]:
        """Several ticks at once (a backlog drained from the queue): one transaction for all they cross."""
        taken: list[tuple[str, list[Crossed]]] = []
        firings: list[Firing] = []
        now = self._clock()
        for tick in ticks:
            crossed = self.touch.take_crossed(tick.symbol, tick.price)
            if crossed:
                taken.append((tick.symbol, crossed))
                firings.extend(
                    Firing(alert_id=c.alert_id, value=tick.price, triggered_at=now, bar_time=tick.bar_time or None)
                    for c in crossed
                )
        if not firings:
            return []

        def restore() -> None:
            for symbol, crossed in taken:
                self.touch.put_back(symbol, crossed)

        return await self._fire(firings, restore)

    async def on_tick(self, tick: Tick) -> list[Fired]:
        crossed = self.touch.take_crossed(tick.symbol, tick.price)
        if not crossed:
            return []
        now = self._clock()
        firings = [
            Firing(alert_id=c.alert_id, value=tick.price, triggered_at=now, bar_time=tick.bar_time or None)
            for c in crossed
        ]
        return await self._fire(firings, lambda: self.touch.put_back(tick.symbol, crossed))

    async def on_bar_closed(self, bar: BarClosed) -> list[Fired]:
        key = _close_key(bar.symbol, bar.interval)
        crossed = self.close.take_crossed(key, bar.close)
        if not crossed:
            return []
        closed_at = bar.time + interval_seconds(bar.interval)
        early = [c for c in crossed if self._close_created.get(c.alert_id, 0.0) >= closed_at]
        if early:
            self.close.put_back(key, early)
            crossed = [c for c in crossed if c not in early]
            if not crossed:
                return []
        now = self._clock()
        firings = [Firing(alert_id=c.alert_id, value=bar.close, triggered_at=now, bar_time=bar.time) for c in crossed]
        return await self._fire(firings, lambda: self.close.put_back(key, crossed))

    async def on_indicators(self, event: IndicatorsUpdated) -> list[Fired]:
        self.evaluated[f"{event.symbol} {event.interval}"] = event.bar_time
        per = self._signals.get((event.symbol, event.interval))
        if not per or not event.hits:
            return []
        closed_at = event.bar_time + interval_seconds(event.interval)
        firings: list[Firing] = []
        now = self._clock()
        for hit in event.hits:
            ids = per.get((hit.request, hit.label))
            if not ids:
                continue
            for alert_id, created in list(ids.items()):
                if created < closed_at:
                    firings.append(
                        Firing(alert_id=alert_id, value=hit.value, triggered_at=now, bar_time=event.bar_time)
                    )
        if not firings:
            return []
        return await self._fire(firings, lambda: None)

    async def _fire(self, firings: list[Firing], restore: Callable[[], None]) -> list[Fired]:
        with_action = [a for f in firings if (a := self._action_alerts.get(f.alert_id)) is not None]
        runner = self.actions
        if not with_action:
            return await self._fire_plain(firings, restore)
        plans = await runner.plan(with_action) if runner is not None else {}
        async with self._fire_lock:
            try:
                fired = await self.store.fire(firings, plans, runner.executor.commit_in if runner is not None else None)
            except Exception:
                if runner is not None:
                    runner.release(plans)
                restore()
                log.exception("alert_fire_failed", alerts=len(firings))
                raise
        publish_now = await runner.after_commit(fired, plans) if runner is not None else fired
        if self._unsynced is not None:  # earlier frames first: a stream skips a sequence number below its last
            await asyncio.wait({self._unsynced})
        self._publish(publish_now, fired)
        self._fired(firings, fired)
        return fired

    async def _fire_plain(self, firings: list[Firing], restore: Callable[[], None]) -> list[Fired]:
        """Alerts without an action: committed, then pushed once the disk flush says the firing is durable."""
        async with self._fire_lock:
            try:
                fired, synced = await self.store.fire_synced_later(firings)
            except Exception:
                restore()
                log.exception("alert_fire_failed", alerts=len(firings))
                raise
        self._unsynced = synced
        synced.add_done_callback(lambda done: self._on_synced(done, fired))
        self._fired(firings, fired)
        if not self.pipelined:
            await asyncio.wait({synced})
        return fired

    def _on_synced(self, synced: asyncio.Future[None], fired: list[Fired]) -> None:
        if self._unsynced is synced:
            self._unsynced = None
        if synced.cancelled() or synced.exception() is not None:
            # Committed but maybe not on disk: nothing leaves live; the frames wait in the offline
            # queue (replayed to the next stream) and the outbox is retried by its sender later.
            log.error("alert_push_held", alerts=len(fired), error=str(synced.exception()))
            return
        self._publish(fired, fired)

    def _publish(self, publish_now: list[Fired], fired: list[Fired]) -> None:
        """Frames to the open streams, firings to the live feed, a wake-up to the channel senders."""
        for f in publish_now:
            if f.push_seq is not None and f.push_data is not None:
                self.hub.publish(f.alert.principal, f.push_seq, f.push_data)
        if self.feed is not None:
            for f in fired:
                self.feed.publish(f.alert.principal, notification_payload(f.alert, f.firing, f.action))
        self.store.wake_senders(fired)

    def _fired(self, firings: list[Firing], fired: list[Fired]) -> None:
        """The in-memory side of a committed firing: counters, indexes, followed markets, audit."""
        fired_ids = {f.alert.id for f in fired}
        for f in fired:
            self.fired += 1
            self._action_alerts.pop(f.alert.id, None)
            if f.alert.kind == "indicator_signal" or f.alert.trigger == "close":
                self.unindex(f.alert)
            else:
                self.market.unfollow(f.alert.symbol, f.alert.interval, priority=True)
        missing = [f.alert_id for f in firings if f.alert_id not in fired_ids]
        if missing:
            log.debug("alert_already_gone", alerts=len(missing))
        if fired:
            log.debug("alerts_fired", count=len(fired), first=fired[0].alert.id)
            self.audit_log.mark_due()

    async def run_audit(self, coalesce_s: float = AUDIT_COALESCE_S) -> None:
        """Background task: append trades.log lines for fired alerts, batched (see :meth:`AlertAuditLog.run`)."""
        await self.audit_log.run(coalesce_s)

    async def write_audit(self) -> None:
        """Append trades.log lines for fired alerts not yet logged (also run at start-up)."""
        await self.audit_log.write()

    # --- the event loop ------------------------------------------------------------------
    async def run(self) -> None:
        """Consume engine events until cancelled (the daemon supervises and restarts this task).

        Ticks waiting in the queue are taken together (up to 1,000) and their firings written
        in one transaction, so a burst costs one commit instead of one per tick.
        """
        sub = self.market.subscribe((Tick, BarClosed, IndicatorsUpdated), maxsize=self._queue_size)
        self.pipelined = True
        try:
            async for event in sub:
                batch: list[Tick] = []
                following: Any = event
                while isinstance(following, Tick) and len(batch) < 1000:
                    batch.append(following)
                    following = sub.get_nowait()
                try:
                    if batch:
                        await self.on_ticks(batch)
                    if following is not None and not isinstance(following, Tick):
                        await self._dispatch(following)
                    elif following is not None:
                        await self.on_ticks([following])
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("alert_event_failed", event=type(event).__name__)
        finally:
            sub.close()

    async def _dispatch(self, event: object) -> None:
        if isinstance(event, BarClosed):
            await self.on_bar_closed(event)
        elif isinstance(event, IndicatorsUpdated):
            await self.on_indicators(event)
        elif isinstance(event, Lagged):
            self.lagged += event.dropped
            log.warning("alert_evaluator_lagged", dropped=event.dropped)
            await self.resync_prices()

    async def resync_prices(self) -> None:
        """After dropped events, check every touch book against the engine's latest prices."""
        for symbol in self.touch.markets():
            price = self.market.last_price(symbol)
            if price is not None:
                await self.on_tick(Tick(symbol, "", price, int(self._clock() * 1000), 0))

    async def expire_due(self) -> int:
        """Remove alerts whose expires_at has passed (periodic job); returns how many."""
        now = self._clock()
        count = 0
        for alert_id in await self.store.expired(now):
            alert = await self.store.remove(None, alert_id, "expired", now)
            if alert is not None:
                self.unindex(alert)
                count += 1
                log.info("alert_expired", alert_id=alert_id)
        return count
