"""A cluster worker's share of the markets and of the alerts (``chartgen worker``).

Every heartbeat (``cluster_heartbeat_s``, a job on the daemon's APScheduler) the worker

1. moves the hand-over marks of its live markets (cluster/marks.py) to the exchange time through
   which its evaluator has checked every tick, firings committed;
2. heartbeats and reads the live workers (cluster/membership.py ``MarketAssignment``) and keeps the
   markets (configured, the operator's: cluster/followed.py, armed alerts') whose rendezvous owner it is;
3. drops the markets it lost (their alerts leave the evaluator's indexes, the engine stops
   following them) and takes the ones it gained: follows them, indexes their armed alerts read
   from PostgreSQL, and closes the gap since the old owner's mark (daemon/worker/handover.py).
   A market is *live* here once that hand-over finished; only live markets' marks move.

A worker that starts and finds no other live worker waits one liveness window before taking
markets (the others starting with it register meanwhile), and a worker back from a PostgreSQL
outage keeps its share for one liveness window (see :meth:`Worker.refresh`).

Alerts set or cancelled through any front reach the worker as PostgreSQL notifications
(alerts/pg_changes.py) on a ``LISTEN`` connection of its own; after that connection was lost
and re-opened, the worker re-reads the alerts of all its markets (a notification sent meanwhile
is lost).  A market that is new to the cluster (the first alert on it) is taken by its owner at
the next heartbeat.  Expiry: the worker removes the expired alerts it holds.

The worker keeps the set of alerts it indexed, so each leaves the evaluator exactly once — fired
(the evaluator's ``on_fired``), cancelled or expired (a ``gone`` notification), or market lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from alerts import ALERTS_CHANNEL, Alert, Fired, PgAlertStore, WorkerEvaluator, alert_of, parse_change
from cluster import UNIVERSE_SQL, MarketAssignment, MarketMarks
from daemon.worker.handover import (
    HANDOVER_CONCURRENCY,
    GatedHistory,
    HandOver,
    hand_over,
    market_name,
    missed_by_trades,
    split_market,
)
from engine import LiveEngine, TradeHistory
from storage import UNREACHABLE, Listener, StorageUnavailable

log = structlog.get_logger(__name__)

MARKS_COALESCE_S = 0.1
"""Hand-overs finishing within this long share one write of the marks."""


def _keep(items: list[Any], item: Any, cap: int = 1000) -> None:
    items.append(item)
    if len(items) > cap:
        del items[: len(items) - cap]


@dataclass(slots=True)
class WorkerStats:
    handovers: list[HandOver] = field(default_factory=list)
    """The newest hand-overs (at most 1,000)."""
    handover_s: list[float] = field(default_factory=list)
    """Seconds from taking a market to its first evaluated tick, newest 1,000."""
    refreshes: int = 0
    reloads: int = 0


class Worker:
    def __init__(
        self,
        *,
        store: PgAlertStore,
        evaluator: WorkerEvaluator,
        engine: LiveEngine,
        assignment: MarketAssignment,
        marks: MarketMarks,
        history: TradeHistory,
        listener_dsn: str,
        configured: Iterable[tuple[str, str]],
        backfill_max_s: float = 300.0,
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.engine = engine
        self.assignment = assignment
        self.marks = marks
        self.history = GatedHistory(history, asyncio.Semaphore(HANDOVER_CONCURRENCY))
        self.configured = sorted({market_name(s, i) for s, i in configured})
        self.backfill_max_ms = int(backfill_max_s * 1000)
        self.owned: set[str] = set()
        self.live: set[str] = set()
        self.indexed: dict[str, Alert] = {}
        self.by_market: dict[str, set[str]] = defaultdict(set)
        self._handovers: dict[str, asyncio.Task[None]] = {}
        self._changes: asyncio.Queue[str] = asyncio.Queue()
        self.listener = Listener(listener_dsn, store.db.where, ALERTS_CHANNEL, self._changes.put_nowait)
        self.stats = WorkerStats()
        self.first_refresh = asyncio.Event()
        self.degraded = False
        self.degraded_since = 0.0
        self._hold_until = 0.0
        self._marks_task: asyncio.Task[None] | None = None
        evaluator.on_fired = self._forget_fired

    @property
    def member_id(self) -> str:
        return self.assignment.member_id

    # --- the heartbeat job ---------------------------------------------------------------
    async def refresh(self) -> None:
        """The heartbeat job.  PostgreSQL unreachable: the worker is degraded — it keeps following
        and evaluating its markets (firings wait in ``evaluator.pending``) and tries again next
        heartbeat.  Back from an outage, it keeps its share for one liveness window before acting
        on assignment changes: every member's heartbeat went stale meanwhile, and the first
        worker back would otherwise see itself alone and take every market."""
        try:
            await self._refresh()
        except (StorageUnavailable, *UNREACHABLE) as exc:
            if not self.degraded:
                self.degraded_since = time.monotonic()
                log.warning("worker_degraded", error=repr(exc)[:300], pending=len(self.evaluator.pending))
            self.degraded = True
            return
        if self.degraded:
            log.info("worker_recovered", after_s=round(time.monotonic() - self.degraded_since, 1))
            self.degraded = False
        self.stats.refreshes += 1
        self.first_refresh.set()

    async def _refresh(self) -> None:
        await self.store.db.fetchval("SELECT 1")  # unreachable: degraded, without a failed firing logged
        for alert_id in await self.evaluator.retry_pending():
            self._unindex(alert_id)  # fired or cancelled meanwhile: it leaves the indexes here
        await self.write_marks()
        reconnected = not self.listener.connected and await self.listener.ensure()
        rows = await self.store.db.fetch(UNIVERSE_SQL)
        universe = set(self.configured) | {market_name(r["symbol"], r["interval"]) for r in rows}
        change = await self.assignment.refresh(universe)
        liveness_s = self.assignment.membership.liveness_s
        if self.degraded:
            self._hold_until = time.monotonic() + liveness_s
        elif not self.stats.refreshes and change.workers == [self.member_id]:
            # a cold start: the workers starting with this one have not heartbeated yet; taking
            # every market now would warm all of them up here and hand most over again a moment
            # later (REST weight spent twice)
            self._hold_until = time.monotonic() + liveness_s
            log.info("worker_waiting_for_peers", seconds=liveness_s)
        if time.monotonic() >= self._hold_until:
            mine = set(self.assignment.owned)
            lost, gained = self.owned - mine, mine - self.owned
            if lost:
                self.drop(lost)
            if gained:
                await self.take(gained)
        if reconnected and self.stats.refreshes:
            await self.reload()

    async def write_marks(self) -> None:
        """Marks of the live markets, except those with firings pending (their crossing is not
        committed: a next owner must find it again)."""
        through = self.evaluator.ticks_through
        frozen = {
            market_name(a.symbol, a.interval) for i in self.evaluator.pending if (a := self.indexed.get(i)) is not None
        }
        marks = {m: t for m in self.live - frozen if (t := through.get(split_market(m))) is not None}
        await self.marks.advance(marks, self.member_id)

    # --- markets -------------------------------------------------------------------------
    def drop(self, markets: Iterable[str]) -> None:
        dropped = sorted(markets)
        for market in dropped:
            task = self._handovers.pop(market, None)
            if task is not None:
                task.cancel()
            for alert_id in list(self.by_market.pop(market, ())):
                if alert_id not in self.evaluator.pending:  # a pending firing still owns its alert
                    self._unindex(alert_id)
            self.owned.discard(market)
            self.live.discard(market)
            self.engine.unfollow(*split_market(market))
        log.info("worker_markets_dropped", count=len(dropped))

    async def take(self, markets: Iterable[str]) -> None:
        """Follow, index the armed alerts, then hand over each market in the background.

        The markets count as owned before their alerts are read, so a ``set`` notification
        committed after the read is not ignored; if the read fails they are not owned (the next
        heartbeat takes them again)."""
        gained = sorted(markets)
        pairs = [split_market(m) for m in gained]
        taken_at = time.monotonic()
        self.owned.update(gained)
        try:
            marks = await self.marks.read(gained)
            alerts = await self.store.active_in(pairs)
        except BaseException:
            self.owned.difference_update(gained)
            raise
        for symbol, interval in pairs:
            self.engine.follow(symbol, interval)
        self._index_new(alerts)
        by_market: dict[str, list[Alert]] = defaultdict(list)
        for alert in alerts:
            by_market[market_name(alert.symbol, alert.interval)].append(alert)
        for market in gained:
            self._handovers[market] = asyncio.create_task(
                self._hand_over(market, by_market.get(market, []), marks.get(market), taken_at),
                name=f"handover {market}",
            )
        log.info("worker_markets_taken", count=len(gained), alerts=len(alerts), with_marks=len(marks))

    async def _hand_over(self, market: str, alerts: list[Alert], mark_ms: int | None, taken_at: float) -> None:
        symbol, interval = split_market(market)
        try:
            result = await self._hand_over_retrying(symbol, interval, alerts, mark_ms)
        finally:
            if self._handovers.get(market) is asyncio.current_task():
                del self._handovers[market]
        self.live.add(market)
        self._write_marks_soon()  # live for the others (cluster status) now, not at the next heartbeat
        took = time.monotonic() - taken_at
        _keep(self.stats.handovers, result)
        _keep(self.stats.handover_s, took)
        log.info("worker_market_live", market=market, seconds=round(took, 3), fired=result.fired, trades=result.trades)

    async def _hand_over_retrying(
        self, symbol: str, interval: str, alerts: list[Alert], mark_ms: int | None
    ) -> HandOver:
        """The hand-over until it succeeds: a REST or PostgreSQL failure is retried (the market is not
        live meanwhile, so its mark stays where the old owner left it)."""
        delay = 0.5
        while True:
            try:
                return await hand_over(
                    self.evaluator,
                    self.history,
                    self.engine.window_bars,
                    symbol,
                    interval,
                    alerts,
                    mark_ms,
                    self.backfill_max_ms,
                    synced=lambda: self.engine.wait_until(lambda: not self.engine.is_stale(symbol, interval)),
                    compute=lambda req, bars: self.engine.indicators.compute_one((symbol, interval), req, bars),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried; named in the log
                log.warning("handover_retry", market=market_name(symbol, interval), error=repr(exc), in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _write_marks_soon(self) -> None:
        if self._marks_task is None or self._marks_task.done():
            self._marks_task = asyncio.create_task(self._write_marks_coalesced(), name="worker-marks")

    async def _write_marks_coalesced(self) -> None:
        await asyncio.sleep(MARKS_COALESCE_S)  # the hand-overs finishing together: one statement
        with contextlib.suppress(StorageUnavailable, *UNREACHABLE):  # the heartbeat writes them again
            await self.write_marks()

    # --- alerts --------------------------------------------------------------------------
    def _index_new(self, alerts: Iterable[Alert]) -> list[tuple[Alert, float, int]]:
        """Index the alerts not indexed yet; returns those a tick evaluated since their arming reached
        (they were set after the tick was evaluated: fire them with :meth:`WorkerEvaluator.fire_missed`)."""
        fresh = [a for a in alerts if a.id not in self.indexed]
        for alert in fresh:
            self.indexed[alert.id] = alert
            self.by_market[market_name(alert.symbol, alert.interval)].add(alert.id)
        self.evaluator.index_many(fresh)
        missed: list[tuple[Alert, float, int]] = []
        for alert in fresh:
            missed += missed_by_trades([alert], self.evaluator.recent_prices(alert.symbol), None)
        return missed

    def _unindex(self, alert_id: str) -> None:
        alert = self.indexed.pop(alert_id, None)
        if alert is None:
            return
        self.by_market.get(market_name(alert.symbol, alert.interval), set()).discard(alert_id)
        self.evaluator.unindex(alert)

    def _forget_fired(self, fired: list[Fired]) -> None:
        """The evaluator fired these (it took them out of its indexes itself)."""
        for f in fired:
            alert = self.indexed.pop(f.alert.id, None)
            if alert is not None:
                self.by_market.get(market_name(alert.symbol, alert.interval), set()).discard(alert.id)

    async def reload(self) -> None:
        """Re-read the alerts of every owned market: index the new ones, forget the ones gone."""
        pairs = [split_market(m) for m in sorted(self.owned)]
        alerts = await self.store.active_in(pairs)
        present = {a.id for a in alerts}
        for alert_id in [i for i in self.indexed if i not in present]:
            self._unindex(alert_id)
        missed = self._index_new(a for a in alerts if market_name(a.symbol, a.interval) in self.owned)
        await self._fire_set_late(missed)
        self.stats.reloads += 1
        log.info("worker_alerts_reloaded", alerts=len(self.indexed))

    async def run_changes(self) -> None:
        """Supervised task: apply the alert changes announced on PostgreSQL, in order."""
        while True:
            payload = await self._changes.get()
            change = parse_change(payload)
            if change is None:
                log.warning("worker_alert_change_unknown", payload=payload[:80])
                continue
            if change.op == "reload":
                await self.reload()
            elif change.op == "gone":
                self._unindex(change.alert_id)
            elif market_name(change.symbol, change.interval) in self.owned and change.alert_id not in self.indexed:
                record = await self.store.db.fetchval("SELECT record FROM alerts WHERE id = $1", change.alert_id)
                if record is not None:  # None: fired or cancelled already
                    await self._fire_set_late(self._index_new([alert_of(record)]))

    async def _fire_set_late(self, missed: list[tuple[Alert, float, int]]) -> None:
        """Fire alerts a tick evaluated before they were indexed had reached (the notification's delay)."""
        if missed:
            fired = await self.evaluator.fire_missed(missed)
            log.info("worker_alerts_fired_late", alerts=len(missed), fired=len(fired))

    async def expire_due(self) -> int:
        """Remove the expired alerts this worker holds (periodic job)."""
        now = time.time()
        count = 0
        for alert_id in await self.store.expired(now):
            if alert_id in self.indexed and await self.store.remove(None, alert_id, "expired", now) is not None:
                self._unindex(alert_id)
                count += 1
        return count

    async def expire_due_job(self) -> None:
        """The expiry job: skipped while degraded (the heartbeat reports the outage)."""
        if self.degraded:
            return
        with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
            await self.expire_due()

    async def close(self) -> None:
        if self._marks_task is not None:
            self._marks_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._marks_task
        for task in list(self._handovers.values()):
            task.cancel()
        for task in list(self._handovers.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.listener.close()

    # --- status --------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, list[str]]:
        if not self.first_refresh.is_set():
            return False, ["no assignment yet (PostgreSQL not reached?)"]
        if self.degraded:
            away = time.monotonic() - self.degraded_since
            pending = len(self.evaluator.pending)
            return False, [f"PostgreSQL unreachable for {away:.0f} s: {pending} firing(s) waiting to be committed"]
        if self.evaluator.pending:
            return False, [f"{len(self.evaluator.pending)} firing(s) waiting to be committed"]
        if time.monotonic() < self._hold_until:
            return False, ["keeping the current share until the other workers heartbeat (start or outage)"]
        waiting = sorted(self.owned - self.live)
        if waiting:
            return False, [f"{len(waiting)} market(s) handing over: {', '.join(waiting[:5])}"]
        return True, []

    def status(self) -> dict[str, Any]:
        took = sorted(self.stats.handover_s)
        return {
            "member": self.member_id,
            "markets": len(self.owned),
            "live": len(self.live),
            "alerts": len(self.indexed),
            "fired": self.evaluator.fired,
            "refreshes": self.stats.refreshes,
            "reloads": self.stats.reloads,
            "handover_s_max": took[-1] if took else None,
            "listening": self.listener.connected,
            "degraded": self.degraded,
            "pending_firings": len(self.evaluator.pending),
        }
