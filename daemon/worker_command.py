"""``chartgen worker``: a cluster worker — the live engine for its share of the markets and the
alert evaluation for them, on the cluster's PostgreSQL (docs/design.md §11, docs/cluster.md).

It reads the daemon's settings (``--config`` TOML, ``CHARTGEN_*``): ``postgres_dsn`` (required),
the exchange and its URLs, ``symbols`` × ``intervals`` (markets followed even without alerts),
the engine's tuning, ``cluster_heartbeat_s`` and ``cluster_liveness_s``.  It keeps no local
state, so ``--data-dir`` is refused.  It applies the cluster schema at start (migrations are
advisory-locked: workers starting together migrate once).  SIGTERM/SIGINT leave the membership
at once (the others take the markets without waiting out the liveness window) and exit 0.

A worker answers no MCP: fronts (``chartgen --serve --cluster``, not built yet) do.  Its status:
``--port N`` serves ``/healthz``, ``/readyz`` and ``/metrics`` on loopback (daemon/worker_http.py),
a ``worker_status`` log line every minute, and ``chartgen cluster status`` (members, market marks
and their lag).  systemd: ``Type=notify`` (READY once the first heartbeat was tried).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import structlog
from pydantic import ValidationError

from alerts.pg_store import PgAlertStore
from alerts.push import PushHub
from alerts.store import QueueLimits
from alerts.worker_evaluator import WorkerEvaluator
from cluster.marks import MarketMarks
from cluster.membership import MarketAssignment, Membership, new_member_id
from config import ConfigFileError, Settings, load_settings
from config.migrations import DatabaseError
from config.postgres import PostgresDatabase
from daemon.cluster_command import CLUSTER_MIGRATIONS, NO_CLUSTER_DSN
from daemon.engine_runtime import EngineSources, running_engine
from daemon.http_server import BindError, serving
from daemon.logging import configure_logging
from daemon.scheduler import DaemonScheduler
from daemon.sd_notify import Notifier
from daemon.supervisor import Supervisor
from daemon.worker_http import worker_app
from daemon.worker_runtime import Worker
from engine.market_data.intervals import to_binance

log = structlog.get_logger(__name__)

STATUS_EVERY_S = 60.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chartgen worker",
        description="A cluster worker: the engine and the alert evaluation for its share of the markets.",
    )
    p.add_argument("--config", type=Path, help="TOML settings file")
    p.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--postgres-dsn", help="the cluster's PostgreSQL (default: the postgres_dsn setting)")
    p.add_argument("--port", type=int, help="serve /healthz, /readyz and /metrics on 127.0.0.1:PORT (default: no HTTP)")
    return p


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    if ns.data_dir is not None:
        print(
            "chartgen worker: error: --data-dir does not apply: a worker keeps its state in the cluster's"
            " PostgreSQL (postgres_dsn); drop --data-dir",
            file=sys.stderr,
        )
        return 2
    overrides = {"postgres_dsn": ns.postgres_dsn} if ns.postgres_dsn else {}
    try:
        settings = load_settings(overrides, ns.config)
    except (ValidationError, ConfigFileError) as exc:
        from daemon.cli import settings_problems

        print(f"chartgen worker: error: invalid settings: {settings_problems(exc)}", file=sys.stderr)
        return 2
    if settings.cluster_dsn() is None:
        print(f"chartgen worker: error: {NO_CLUSTER_DSN}, or pass --postgres-dsn", file=sys.stderr)
        return 2
    if ns.port is not None and not 0 <= ns.port <= 65535:
        print(f"chartgen worker: error: --port must be 0-65535, got {ns.port}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        asyncio.run(run_worker(settings, http_port=ns.port))
    except (DatabaseError, BindError) as exc:
        print(f"chartgen worker: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


async def run_worker(settings: Settings, *, http_port: int | None = None) -> None:
    dsn = settings.cluster_dsn()
    assert dsn is not None
    db = await PostgresDatabase.open(dsn, min_size=2, max_size=8)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    notifier = Notifier()
    try:
        await db.migrate(CLUSTER_MIGRATIONS)
        limits = QueueLimits(
            push_cap=settings.notify_queue_cap,
            push_ttl_s=settings.notify_queue_ttl_s,
            poll_cap=settings.notify_poll_cap,
        )
        store = PgAlertStore(db, limits)
        membership = Membership(db, settings.cluster_liveness_s)
        assignment = MarketAssignment(membership, new_member_id("worker"))
        sources: list[EngineSources] = []
        async with (
            Supervisor() as supervisor,
            running_engine(settings, follow_configured=False, sources_out=sources) as engine,
        ):
            evaluator = WorkerEvaluator(store, engine, PushHub(store.mark_delivered))
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
            scheduler = DaemonScheduler()
            scheduler.every("worker-heartbeat", settings.cluster_heartbeat_s, worker.refresh)
            scheduler.every("worker-alert-expiry", 5.0, worker.expire_due_job)
            scheduler.every("worker-status", STATUS_EVERY_S, _log_status(worker))
            try:
                async with contextlib.AsyncExitStack() as http, scheduler.running():
                    url = None
                    if http_port is not None:
                        url = await http.enter_async_context(serving(worker_app(worker), "127.0.0.1", http_port))
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
        await db.close()


def _log_status(worker: Worker) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        log.info("worker_status", **worker.status())

    return run
