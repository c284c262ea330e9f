"""``chartgen leader``: a candidate order leader of the cluster's exchange account (docs/cluster.md).

Run two or more (on different hosts): one holds the lease ``orders/<cluster_account>`` and sends the
orders that fronts record; the others stand by and take over within about ``cluster_leader_ttl_s``
when it dies (cluster/orders.py says why no order is ever sent twice).  The leader applies the guard
rails (``trading_max_order_notional``, ``trading_max_daily_notional``, ``trading_allowed_symbols``)
and the cluster's halt switch to each order before sending it (cluster/leader_admission.py),
carries out the halt switch's cancel-open requests, and while it holds the lease fires the
cluster's scheduled orders (daemon/leader/schedules.py; ``schedule_misfire_grace_s``) and mirrors
the account's balances and its orders' states for the fronts (cluster/account_mirror.py).

It reads the daemon's settings: ``postgres_dsn`` (required), the Binance keys (required: a cluster
leads Binance accounts, whose signed requests expire after ``recvWindow`` — what fences a paused
ex-leader; paper and ccxt accounts cannot be led safely and are refused), ``binance_rest_url``
(mainnet needs ``--live``, as on a single node; ``--testnet`` uses the spot testnet).  No local
state (``--data-dir`` is refused).  Status: ``--port N`` serves ``/healthz``, ``/readyz`` and
``/metrics`` on loopback; the membership (role ``leader``) and the lease show in ``chartgen
cluster status``.  SIGTERM gives the lease up at once, so a standby takes over without waiting
out the TTL.  systemd: ``Type=notify``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from brokers import BinanceBroker, PgScheduleStore, SafetyLimits, ScheduleService
from cluster import MIRROR_S, AccountMirror, IntentRuns, Membership, OrderLeader, new_member_id, run_leader
from config import Settings
from daemon.commands.cluster import CLUSTER_MIGRATIONS, NO_CLUSTER_DSN
from daemon.commands.role import role_parser, run_role, stop_event
from daemon.http_server import serving
from daemon.leader.schedules import SYNC_S, LeaderSchedules
from daemon.metrics import CONTENT_TYPE
from daemon.parts.services import testnet_endpoints
from daemon.scheduler import DaemonScheduler, Job
from daemon.sd_notify import Notifier
from daemon.supervisor import Supervisor
from storage import UNREACHABLE, PostgresDatabase, StorageUnavailable

log = structlog.get_logger(__name__)

TIME_SYNC_EVERY_S = 300.0


def _parser() -> argparse.ArgumentParser:
    p = role_parser("chartgen leader", "A candidate order leader of the cluster's exchange account.")
    p.add_argument("--testnet", action="store_true", help="Binance spot testnet endpoints")
    p.add_argument("--live", action="store_true", help="allow orders on Binance mainnet")
    return p


def leader_problem(settings: Settings) -> str | None:
    """Why these settings cannot lead an account (None: they can)."""
    if settings.cluster_dsn() is None:
        return f"{NO_CLUSTER_DSN}, or pass --postgres-dsn"
    if settings.broker in ("paper", "ccxt"):
        return (
            f"broker={settings.broker} cannot be led from a cluster: the order leader sends to Binance, whose"
            " signed requests expire after recvWindow (what keeps a paused ex-leader from sending); use broker"
            " = binance or auto"
        )
    if settings.binance_keys() is None:
        return "the order leader needs BINANCE_API_KEY and BINANCE_API_SECRET (or the systemd credentials)"
    if "api.binance.com" in settings.binance_rest_url and not settings.live:
        return "orders on Binance mainnet need --live; use --testnet for the spot testnet"
    return None


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    return run_role(
        "chartgen leader",
        "a leader",
        ns,
        lambda settings, port: run_leader_role(settings, http_port=port),
        problem=leader_problem,
        overrides={k: True for k in ("testnet", "live") if getattr(ns, k)},
        adjust=testnet_endpoints,
    )


class LeaderRole:
    """One candidate: its OrderLeader, membership heartbeat and status."""

    def __init__(self, leader: OrderLeader, membership: Membership) -> None:
        self.leader = leader
        self.membership = membership
        self.degraded: str | None = None

    async def heartbeat(self) -> None:
        try:
            await self.membership.heartbeat(self.leader.member_id, "leader")
        except (StorageUnavailable, *UNREACHABLE) as exc:
            self.degraded = f"PostgreSQL unreachable: {exc!r}"
            return
        self.degraded = None

    def readiness(self) -> tuple[bool, list[str]]:
        reasons = [r for r in (self.degraded, self.leader.degraded) if r]
        return not reasons, [f"order leader degraded: {r}" for r in reasons]

    def status(self) -> dict[str, Any]:
        lease = self.leader.lease
        return {
            "role": "leader",
            "member": self.leader.member_id,
            "account": self.leader.account,
            "leading": self.leader.leading,
            "token": lease.token if lease is not None else None,
            "orders_sent": self.leader.sent,
            "orders_refused": self.leader.refused,
            "answers_unrecorded": len(self.leader.unrecorded),
        }


async def run_leader_role(settings: Settings, *, http_port: int | None = None) -> None:
    dsn = settings.cluster_dsn()
    keys = settings.binance_keys()
    assert dsn is not None and keys is not None
    ttl = settings.cluster_leader_ttl_s
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=4, idle_in_transaction_timeout_s=ttl / 2)
    stop = stop_event()
    notifier = Notifier()
    broker = BinanceBroker(
        api_key=keys[0], api_secret=keys[1], rest_url=settings.binance_rest_url, timeout_s=settings.http_timeout_s
    )
    try:
        await db.migrate(CLUSTER_MIGRATIONS)
        try:
            await broker.sync_time()
        except Exception as exc:  # noqa: BLE001 — the exchange away at start: the scheduled sync tries again
            log.warning("binance_time_sync_failed", error=repr(exc))
        limits = SafetyLimits(
            max_order_notional=settings.trading_max_order_notional,
            max_daily_notional=settings.trading_max_daily_notional,
            allowed_symbols=frozenset(settings.trading_allowed_symbols),
        )
        leader = OrderLeader(
            db, broker, account=settings.cluster_account, member_id=new_member_id("leader"), ttl_s=ttl, limits=limits
        )
        role = LeaderRole(leader, Membership(db, settings.cluster_liveness_s))
        scheduler = DaemonScheduler()
        scheduler.every("leader-heartbeat", settings.cluster_heartbeat_s, role.heartbeat)
        scheduler.every("binance-time-sync", TIME_SYNC_EVERY_S, _time_sync(broker))  # failures: logged by the scheduler
        schedules = LeaderSchedules(
            ScheduleService(
                (store := PgScheduleStore(db)),
                None,
                runs=IntentRuns(store, settings.cluster_account),
                audit=_log_lines,
                jobs=scheduler,
                misfire_grace_s=settings.schedule_misfire_grace_s,
            ),
            lambda: leader.leading,
        )
        scheduler.every("leader-schedules", SYNC_S, schedules.sync)
        mirror = AccountMirror(db, broker, settings.cluster_account, limits=limits)
        scheduler.every("leader-account-mirror", MIRROR_S, _mirror_job(mirror, leader))
        async with Supervisor() as supervisor, scheduler.running(), contextlib.AsyncExitStack() as http:
            supervisor.start("order-leader", lambda: run_leader(leader, stop, idle_s=ttl / 6))
            url = None
            if http_port is not None:
                url = await http.enter_async_context(serving(leader_app(role), "127.0.0.1", http_port))
            await role.heartbeat()
            log.info("leader_started", member=leader.member_id, account=leader.account, http=url)
            notifier.ready(f"order leader candidate {leader.member_id} for {leader.account}")
            try:
                await stop.wait()
                notifier.stopping()
            finally:
                with contextlib.suppress(Exception):
                    await role.membership.leave(leader.member_id)
        log.info("leader_stopped", member=leader.member_id, sent=leader.sent, refused=leader.refused)
    finally:
        notifier.close()
        await broker.close()
        await db.close()


def _mirror_job(mirror: AccountMirror, leader: OrderLeader) -> Job:
    async def run() -> None:  # the lease holder only: one writer, and the one with the keys in use
        if leader.leading:
            await mirror.refresh()  # the exchange or PostgreSQL away: the scheduler logs it; the snapshot ages

    return run


async def _log_lines(lines: Sequence[str]) -> None:
    """The schedules' audit lines (a single node writes them to trades.log; a leader logs them)."""
    for line in lines:
        log.info("schedule_audit", line=line)


def _time_sync(broker: BinanceBroker) -> Job:
    async def run() -> None:  # the exchange away: the job fails, the last offset stays
        await broker.sync_time()

    return run


class _LeaderCollector(Collector):
    def __init__(self, role: LeaderRole) -> None:
        self.role = role

    def collect(self) -> Iterator[Metric]:
        leader = self.role.leader
        yield GaugeMetricFamily(
            "chartgen_leader_leading", "1 while this candidate holds the order lease", int(leader.leading)
        )
        yield GaugeMetricFamily(
            "chartgen_leader_degraded", "1 while PostgreSQL does not answer", int(not self.role.readiness()[0])
        )
        yield CounterMetricFamily("chartgen_leader_orders_sent", "orders this process sent", leader.sent)
        yield CounterMetricFamily("chartgen_leader_orders_refused", "orders the guard rails refused", leader.refused)


def leader_app(role: LeaderRole) -> Starlette:
    registry = CollectorRegistry()
    registry.register(_LeaderCollector(role))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "member": role.leader.member_id})

    async def readyz(request: Request) -> Response:
        ready, reasons = role.readiness()
        body = {"status": "ready" if ready else "not_ready", "reasons": reasons, **role.status()}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)

    return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)])
