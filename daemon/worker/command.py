"""``chartgen worker``: a cluster worker — the live engine for its share of the markets and the
alert evaluation for them, on the cluster's PostgreSQL (docs/design.md §11, docs/cluster.md).

It reads the daemon's settings (``--config`` TOML, ``CHARTGEN_*``): ``postgres_dsn`` (required),
the exchange and its URLs, ``symbols`` × ``intervals`` (markets followed even without alerts),
the engine's tuning, ``cluster_heartbeat_s``, ``cluster_liveness_s``, and with ``bus = "nats"``
``nats_url`` (fired notifications are announced to the fronts over NATS: daemon/parts/push_bus.py; the
worker's closed bars, indicator updates and prices are published there: daemon/parts/market_bus.py).
Notification channels (``[channels.NAME]``, the same on every worker): the firing transaction
writes their outbox rows and the worker holding the lease ``channels`` delivers them
(daemon/worker/channels.py).  Alert actions: a fired alert's order intent is recorded in its
firing transaction for the order leader of ``cluster_account`` and its outcome settled when the
leader answered (daemon/parts/cluster_actions.py).  It keeps no local state, so ``--data-dir`` is
refused.  It applies the cluster schema at start (migrations are advisory-locked: workers starting
together migrate once).  SIGTERM/SIGINT leave the membership at once (the others take the markets
without waiting out the liveness window), give up the channel lease, and exit 0.

A worker answers no MCP: fronts (``chartgen --serve --cluster``) do.  Its status:
``--port N`` serves ``/healthz``, ``/readyz`` and ``/metrics`` on loopback (daemon/worker/http.py),
a ``worker_status`` log line every minute, and ``chartgen cluster status`` (members, market marks
and their lag).  systemd: ``Type=notify`` (READY once the first heartbeat was tried).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog

from alerts import ActionRunner, ChannelRouting, PgActionOutcomes, PgAlertStore, PushHub, QueueLimits, WorkerEvaluator
from cluster import Bus, MarketAssignment, MarketMarks, Membership, OrderIntents, new_member_id
from config import Settings
from daemon.commands.cluster import CLUSTER_MIGRATIONS, NO_CLUSTER_DSN
from daemon.commands.role import role_parser, run_role, stop_event
from daemon.http_server import serving
from daemon.parts.cluster_actions import ClusterActionExecutor
from daemon.parts.engine import EngineSources, running_engine
from daemon.parts.market_bus import TICK_EVERY_S, MarketPublisher
from daemon.parts.push_bus import PushAnnouncer, connect_bus
from daemon.scheduler import DaemonScheduler
from daemon.sd_notify import Notifier
from daemon.supervisor import Supervisor
from daemon.worker.bus_commands import HEARTBEAT_JOB, WorkerCommands
from daemon.worker.channels import ChannelDelivery
from daemon.worker.http import worker_app
from daemon.worker.runtime import Worker
from engine import to_binance
from storage import UNREACHABLE, PostgresDatabase, StorageUnavailable

log = structlog.get_logger(__name__)

STATUS_EVERY_S = 60.0
ACTIONS_SETTLE_S = 5.0


def _parser() -> argparse.ArgumentParser:
    return role_parser(
        "chartgen worker", "A cluster worker: the engine and the alert evaluation for its share of the markets."
    )


def _problem(settings: Settings) -> str | None:
    return f"{NO_CLUSTER_DSN}, or pass --postgres-dsn" if settings.cluster_dsn() is None else None


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    return run_role(
        "chartgen worker", "a worker", ns, lambda settings, port: run_worker(settings, http_port=port), problem=_problem
    )


async def run_worker(settings: Settings, *, http_port: int | None = None) -> None:
    dsn = settings.cluster_dsn()
    assert dsn is not None
    db = await PostgresDatabase.open(dsn, min_size=2, max_size=8)
    stop = stop_event()
    notifier = Notifier()
    stack = contextlib.AsyncExitStack()
    try:
        await db.migrate(CLUSTER_MIGRATIONS)
        limits = QueueLimits(
            push_cap=settings.notify_queue_cap,
            push_ttl_s=settings.notify_queue_ttl_s,
            poll_cap=settings.notify_poll_cap,
        )
        member_id = new_member_id("worker")
        announcer: PushAnnouncer | None = None
        bus: Bus | None = None
        if settings.bus == "nats":
            bus = await connect_bus(settings, member_id, ensure_streams=True)
            stack.push_async_callback(bus.close)
            announcer = PushAnnouncer(bus)
        store = PgAlertStore(
            db,
            limits,
            ChannelRouting.configured(settings),
            announce_push=None if announcer is None else announcer.announce,
        )
        membership = Membership(db, settings.cluster_liveness_s)
        assignment = MarketAssignment(membership, member_id, bus=settings.bus)
        sources: list[EngineSources] = []
        async with (
            Supervisor() as supervisor,
            running_engine(settings, follow_configured=False, sources_out=sources) as engine,
        ):
            hub = PushHub(store.mark_delivered)
            intents = OrderIntents(db)
            stack.push_async_callback(intents.close)
            executor = ClusterActionExecutor(
                intents, settings.cluster_account, queue_wait_s=settings.cluster_order_wait_s
            )
            actions = ActionRunner(executor, PgActionOutcomes(store), hub)
            stack.push_async_callback(actions.close)
            evaluator = WorkerEvaluator(store, engine, hub, actions=actions)
            worker = Worker(
                store=store,
                evaluator=evaluator,
                engine=engine,
                assignment=assignment,
                marks=MarketMarks(db),
                history=sources[0].trades,
                listener_dsn=dsn,
                configured=[(s, to_binance(i)) for s in settings.symbols for i in settings.intervals],
                backfill_max_s=settings.cluster_backfill_max_s,
            )
            supervisor.start("alert-evaluator", evaluator.run)
            supervisor.start("worker-alert-changes", worker.run_changes)
            publisher: MarketPublisher | None = None
            commands: WorkerCommands | None = None
            scheduler = DaemonScheduler()
            if announcer is not None and bus is not None:
                supervisor.start("push-announcer", announcer.run)
                publisher = MarketPublisher(bus, engine, member_id)
                supervisor.start("market-publisher", publisher.run)
                scheduler.every("worker-market-ticks", TICK_EVERY_S, publisher.publish_ticks)
            scheduler.every(HEARTBEAT_JOB, settings.cluster_heartbeat_s, worker.refresh)
            if bus is not None:  # after the heartbeat job: a command may arrive while subscribing
                commands = WorkerCommands(bus, scheduler, HEARTBEAT_JOB)
                await commands.open()
                stack.push_async_callback(commands.close)
            scheduler.every("worker-alert-expiry", 5.0, worker.expire_due_job)
            scheduler.every("worker-alert-actions", ACTIONS_SETTLE_S, _settle_actions(actions))
            scheduler.every("worker-status", STATUS_EVERY_S, _log_status(worker))
            channels: ChannelDelivery | None = None
            if settings.channels:
                channels = ChannelDelivery(db, settings, member_id)
                stack.push_async_callback(channels.close)
                scheduler.every("worker-channels", channels.ttl_s / 3, channels.step)
            try:
                async with contextlib.AsyncExitStack() as http, scheduler.running():
                    url = None
                    if http_port is not None:
                        url = await http.enter_async_context(
                            serving(
                                worker_app(worker, announcer, publisher, channels, commands), "127.0.0.1", http_port
                            )
                        )
                    await worker.refresh()  # PostgreSQL away: degraded, the heartbeat job tries again
                    log.info("worker_started", member=worker.member_id, markets=len(worker.owned), http=url)
                    notifier.ready(f"worker {worker.member_id}: {len(worker.owned)} markets")
                    await stop.wait()
                    notifier.stopping()
            finally:
                with contextlib.suppress(Exception):
                    await membership.leave(worker.member_id)
                await worker.close()
                log.info("worker_stopped", member=worker.member_id, fired=evaluator.fired)
    finally:
        notifier.close()
        await stack.aclose()
        await db.close()


def _settle_actions(actions: ActionRunner) -> Callable[[], Awaitable[None]]:
    """The periodic settle of alert actions left pending (a worker that died waiting, a slow leader):
    any worker may settle any action, once (alerts/pg_action_outcomes.py)."""

    async def run() -> None:
        with contextlib.suppress(StorageUnavailable, *UNREACHABLE):  # the heartbeat reports the outage
            await actions.finish_pending()

    return run


def _log_status(worker: Worker) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        log.info("worker_status", **worker.status())

    return run
