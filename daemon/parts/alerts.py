"""Building and running the alert engine (``--trade``): store, evaluator, push hub, service, jobs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from alerts import (
    ActionOutcomes,
    ActionRunner,
    AlertEvaluator,
    AlertService,
    AlertStore,
    ChannelRouting,
    NotificationFeed,
    OutboxSender,
    PushHub,
    QueueLimits,
)
from brokers import OrderService
from config import Settings
from daemon.parts.alert_actions import OrderActionExecutor
from daemon.parts.channels import running_channels
from daemon.scheduler import DaemonScheduler, Job
from daemon.supervisor import Supervisor
from daemon.trades_log import TradesLog
from engine import LiveEngine, SymbolCatalogue
from storage import Database


@dataclass(slots=True)
class AlertRuntime:
    store: AlertStore
    evaluator: AlertEvaluator
    hub: PushHub
    service: AlertService
    feed: NotificationFeed
    channels: OutboxSender | None = None


@contextlib.asynccontextmanager
async def running_alerts(
    settings: Settings,
    *,
    db: Database,
    engine: LiveEngine,
    symbols: SymbolCatalogue | None,
    supervisor: Supervisor,
    trades_log: TradesLog,
    orders: OrderService | None = None,
    scheduler: DaemonScheduler,
) -> AsyncIterator[AlertRuntime]:
    """Alerts loaded and indexed, the evaluator consuming engine events, and the periodic jobs.

    With ``orders``, alerts may carry a place_order action (:mod:`alerts.actions`)."""
    limits = QueueLimits(
        push_cap=settings.notify_queue_cap, push_ttl_s=settings.notify_queue_ttl_s, poll_cap=settings.notify_poll_cap
    )
    routing = ChannelRouting.configured(settings)
    store = AlertStore(db, limits, routing)
    hub = PushHub(store.mark_delivered)
    executor = OrderActionExecutor(orders) if orders is not None else None
    runner = ActionRunner(executor, ActionOutcomes(db), hub, trades_log.append) if executor is not None else None
    feed = NotificationFeed()
    evaluator = AlertEvaluator(store, engine, hub, trades_log.append, actions=runner, feed=feed)
    if runner is not None:
        runner.feed = feed
    service = AlertService(
        store,
        evaluator,
        hub,
        default_interval=engine_default_interval(settings),
        check_symbol=symbols.check if symbols is not None else None,
        executor=executor,
        max_alerts_per_principal=settings.alerts_max_per_client,
        channels=settings.channels,
    )
    await service.start()
    supervisor.start("alert-evaluator", evaluator.run)
    supervisor.start("alert-audit-log", evaluator.run_audit)
    supervisor.start("push-delivery-marks", hub.run_flusher)
    scheduler.every("alert-expiry", 5.0, _discard(evaluator.expire_due))
    scheduler.every("push-queue-ttl", 60.0, _discard(lambda: store.sweep(time.time())))
    if runner is not None:
        scheduler.every("alert-action-outcomes", 5.0, _discard(runner.finish_pending))
    async with running_channels(settings, db=db, store=store, supervisor=supervisor, scheduler=scheduler) as sender:
        try:
            yield AlertRuntime(store, evaluator, hub, service, feed, sender)
        finally:
            if runner is not None:
                await runner.close()
            await hub.flush()
            await evaluator.write_audit()


def engine_default_interval(settings: Settings) -> str:
    from engine import to_binance

    return to_binance(settings.intervals[0]) if settings.intervals else "4h"


def _discard(job: Job) -> Job:
    async def run() -> None:
        await job()

    return run
