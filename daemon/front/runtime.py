"""A cluster front (``chartgen --serve --cluster``): the MCP/HTTP server on the cluster's PostgreSQL.

A front keeps no state of its own, so any number of them can stand behind a load balancer:

- **Tokens** are the cluster's (mcp_bridge/pg_tokens.py; ``chartgen token create --cluster``),
  checked against PostgreSQL on every request.
- **Alerts** are set, listed and cancelled in the PostgreSQL alert store, which announces each
  change to the worker owning the market (alerts/pg_changes.py); the workers evaluate and fire
  them (daemon/worker/runtime.py).  ``get_notifications`` drains the principal's poll queue
  there, so it answers the same at every front.
- **Notification streams** (``GET /mcp``, ``/sse``) open at any front: the first frames come from
  the principal's queue in PostgreSQL (``Last-Event-ID`` resumes after the given frame whichever
  front served the frames before), later ones are announced by the firing's ``NOTIFY``
  (``bus = "local"``) or by the worker over NATS (``bus = "nats"``, daemon/parts/push_bus.py) and read
  by this front's :class:`~alerts.pg_push.PushRelay`, which also sweeps every connected principal
  every :data:`PUSH_SWEEP_S` (an announcement lost anywhere costs at most that delay).
- **Charts and indicators** are computed from the exchange's REST data (the single node's
  ``--serve`` without ``--trade``: a front follows no live stream).

- **place_order** records an order intent for the account's order leader (``chartgen leader``),
  which applies the guard rails and the halt switch and sends it; the front waits for its answer
  (cluster/front_orders.py).  **halt_trading** sets the cluster's halt switch of the account
  (cluster/halt.py); its cancel-open is carried out by the leader.  **set_alert with an action**
  is checked here (daemon/parts/cluster_actions.py); the worker that fires it records the order intent.
  **schedule_order**, **list_schedules**, **cancel_schedule** keep the schedules in PostgreSQL
  (brokers/schedules/pg_store.py); the order leader fires them (daemon/leader/schedules.py).

**cancel_order** records a cancel request the order leader carries out (cluster/cancels.py).
**get_orders**, **get_positions** and **get_balance** read the order leader's mirror of the account
(cluster/account_mirror.py, cluster/account_fills.py).

**log_event** and **get_events** keep the journal in PostgreSQL (mcp_bridge/pg_journal.py).
**trade_simulate** dry-runs legs with the order leader's guard rails on the mirrored balances;
**trade_execute** sends its legs as order intents (cluster/front_desk.py).

**place_oco**, and ``place_order`` with a bracket on a limit entry (an OTOCO), record an order-list
intent the leader sends (cluster/list_intents.py); a bracket on a market entry records the entry with
its exit OCO, which the leader places once the entry filled (cluster/bracket_exits.py).  The
dashboard is wired by daemon/front/dashboard.py.  A tool whose part is missing answers
:data:`NOT_ON_FRONT`.

The front heartbeats its membership (role ``front``, its address) on the scheduler every
``cluster_heartbeat_s``; the same job re-opens the push listener (PostgreSQL ``LISTEN``, or the
NATS subscription) after a lost connection and has the relay re-read after every reconnect.  The
cluster's armed alerts are counted and the halt switch read every :data:`STATUS_REFRESH_S`.
PostgreSQL away: the front is *degraded* (``/readyz`` 503 with the reason) and every tool that
needs the database answers with an error naming it.  NATS away (``bus = "nats"``): ``/readyz`` 503
naming NATS; the tools work (nothing they write goes through NATS) and streams get the frames
fired meanwhile once NATS is back (the relay re-reads) or at the next sweep.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import structlog

from alerts import PUSH_CHANNEL, AlertService, PgAlertStore, PushHub, PushRelay, QueueLimits, StoredAlerts
from brokers import PgScheduleStore, PgSuspensionStore, PublicVenue, ScheduleService, SuspensionService
from cluster import (
    INTENTS_CHANNEL,
    AccountView,
    BusError,
    BusPrices,
    ClusterHalt,
    FrontLegs,
    FrontOrders,
    FrontSimulation,
    IntentRuns,
    Membership,
    OrderIntents,
    PrincipalCancels,
    new_member_id,
)
from config import Settings
from daemon.commands.cluster import NO_CLUSTER_DSN, cluster_database
from daemon.parts.alerts import engine_default_interval
from daemon.parts.cluster_actions import ClusterActionExecutor
from daemon.parts.push_bus import BusPushListener, BusSettingsError, connect_bus
from daemon.parts.services import agent_settings, chart_service, journal_limits, market_data, testnet_endpoints
from daemon.scheduler import DaemonScheduler, Job
from daemon.supervisor import Supervisor
from engine import BinanceRest, SymbolDirectory
from mcp_bridge import PgJournalStore, PgTokenStore, Services
from storage import UNREACHABLE, DatabaseError, StorageUnavailable

log = structlog.get_logger(__name__)

NOT_ON_FRONT = (
    "Not available on a cluster front: this part runs on a single-node daemon (chartgen --serve --trade);"
    " a front places and cancels orders and OCO lists (place_order with brackets, place_oco,"
    " cancel_order, trade_execute), simulates them (trade_simulate), schedules them (schedule_order),"
    " lists them (get_orders), shows the positions, balances and portfolio (get_positions, get_balance,"
    " get_portfolio), halts trading (halt_trading), keeps the journal (log_event, get_events) and routes"
    " notifications to channels (subscribe_notifications); see docs/cluster.md."
)

PUSH_SWEEP_S = 15.0
"""How often a front's relay re-reads every principal with a stream open there (a safety net)."""

STATUS_REFRESH_S = 15.0
"""How often a front counts the cluster's armed alerts (a full count of the alerts table: not every
heartbeat) and re-reads the halt switch, for /status and /metrics; halt_trading reads it afresh."""


class FrontError(DatabaseError):
    """A front cannot start: no cluster database is configured, or the bus cannot be reached (the CLI
    prints it, exit 1)."""


class PushListener(Protocol):
    """Where a front hears of new push frames: :class:`storage.postgres.Listener` (bus = "local") or
    :class:`daemon.parts.push_bus.BusPushListener` (bus = "nats")."""

    @property
    def connected(self) -> bool: ...
    @property
    def connects(self) -> int: ...
    @property
    def problem(self) -> str: ...
    async def ensure(self) -> bool: ...
    async def close(self) -> None: ...


@dataclass(slots=True)
class Front:
    """This front's cluster state: membership, the push relay and its listener, degradation."""

    member_id: str
    membership: Membership
    listener: PushListener
    relay: PushRelay
    alerts: StoredAlerts
    address: str = ""
    degraded: str | None = None
    """Why the front cannot reach PostgreSQL now (None: it can)."""
    degraded_since: float | None = None
    notes: list[str] = field(default_factory=list)
    bus: str = "local"
    """This front's ``bus`` setting, recorded with its heartbeat."""
    bus_mismatch: str | None = None
    """Live workers or fronts on another bus (:meth:`Membership.bus_mismatch`), or None: logged and in
    /status, not a readiness failure — the front still serves, its notifications arrive by the relay's
    sweep, and failing readiness would take every front out of the load balancer while an operator
    moves the cluster from one bus to the other."""
    prices: BusPrices | None = None
    """Quotes' prices from the workers' ticks (``bus = "nats"``), or None."""
    connects_seen: int = 0
    """The listener's :attr:`~PushListener.connects` when the relay last re-read after a reconnect."""

    async def heartbeat(self) -> None:
        """The periodic job: the push listener (the relay re-reads after a reconnect) and membership."""
        if await self.listener.ensure() and self.listener.connects != self.connects_seen:
            self.connects_seen = self.listener.connects
            self.relay.reconnected()
        try:
            await self.membership.heartbeat(self.member_id, "front", self.address, self.bus)
            mismatch = await self.membership.bus_mismatch(self.bus)
        except (StorageUnavailable, *UNREACHABLE) as exc:
            if self.degraded is None:
                self.degraded_since = time.time()
                log.warning("front_degraded", error=repr(exc))
            self.degraded = f"PostgreSQL unreachable: {exc!r}"
            return
        if self.degraded is not None:
            log.info("front_recovered", after_s=round(time.time() - (self.degraded_since or time.time()), 1))
        self.degraded = self.degraded_since = None
        if mismatch != self.bus_mismatch and mismatch is not None:
            log.warning("front_bus_mismatch", problem=mismatch)
        self.bus_mismatch = mismatch

    def readiness(self) -> tuple[bool, list[str]]:
        """/readyz: ready while PostgreSQL answers and the push listener is connected."""
        if self.degraded is not None:
            return False, [f"cluster front degraded: {self.degraded}"]
        if not self.listener.connected:
            return False, [f"cluster front: push listener down: {self.listener.problem}"]
        return True, []

    def status(self) -> dict[str, Any]:
        ready, reasons = self.readiness()
        return {
            "role": "front",
            "member": self.member_id,
            "ready": ready,
            "reasons": reasons,
            "alerts_armed": self.alerts.armed,
            "push_frames_relayed": self.relay.frames,
            "push_listener_connected": self.listener.connected,
            "bus": self.bus,
            "bus_mismatch": self.bus_mismatch,
            **({} if self.prices is None else self.prices.status()),
        }


@contextlib.asynccontextmanager
async def front_services(settings: Settings, *, address: str = "") -> AsyncIterator[tuple[Settings, Services, Front]]:
    """Everything a front's MCP tools need, on the cluster's PostgreSQL; stopped in reverse."""
    settings = testnet_endpoints(settings)
    dsn = settings.cluster_dsn()
    if dsn is None:
        raise FrontError(f"--cluster: {NO_CLUSTER_DSN}")
    async with cluster_database(dsn, min_size=2, max_size=16) as db, contextlib.AsyncExitStack() as stack:
        supervisor = await stack.enter_async_context(Supervisor())
        scheduler = DaemonScheduler()
        session = await stack.enter_async_context(aiohttp.ClientSession())
        charts = await stack.enter_async_context(chart_service(settings, session=session))
        limits = QueueLimits(
            push_cap=settings.notify_queue_cap,
            push_ttl_s=settings.notify_queue_ttl_s,
            poll_cap=settings.notify_poll_cap,
        )
        store = PgAlertStore(db, limits)  # fronts fire nothing: no routing
        hub = PushHub(store.mark_delivered)
        intents = OrderIntents(db)
        stack.push_async_callback(intents.close)
        index = StoredAlerts(lambda: db.fetchval("SELECT COUNT(*) FROM alerts"))
        rest = BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s)
        directory = SymbolDirectory(rest)
        service = AlertService(
            store,
            index,
            hub,
            default_interval=engine_default_interval(settings),
            check_symbol=directory.check,
            max_alerts_per_principal=settings.alerts_max_per_client,
            channels=settings.channels,
            executor=ClusterActionExecutor(
                intents, settings.cluster_account, queue_wait_s=settings.cluster_order_wait_s
            ),
        )
        relay = PushRelay(store, hub)
        member_id = new_member_id("front")
        listener: PushListener
        prices: BusPrices | None = None
        if settings.bus == "nats":
            try:
                bus = await connect_bus(settings, member_id, ensure_streams=False)
            except (BusError, BusSettingsError) as exc:
                raise FrontError(f"--cluster: {exc}") from exc
            listener = BusPushListener(bus, relay.on_payload)
            prices = BusPrices(bus)
            try:
                await prices.open()
            except BusError as exc:
                await listener.close()
                raise FrontError(f"--cluster: {exc}") from exc
        else:
            listener = db.listener(PUSH_CHANNEL, relay.on_payload)
        front = Front(
            member_id=member_id,
            membership=Membership(db, settings.cluster_liveness_s),
            listener=listener,
            relay=relay,
            alerts=index,
            address=address,
            bus=settings.bus,
            prices=prices,
        )
        stack.push_async_callback(front.listener.close)  # closes the bus: after the prices' subscription
        if prices is not None:
            stack.push_async_callback(prices.close)
        stack.push_async_callback(_leave, front)
        halt = ClusterHalt(db, settings.cluster_account, wake_channel=INTENTS_CHANNEL)
        stack.push_async_callback(halt.close)
        venue = PublicVenue(rest, directory)
        front_orders = FrontOrders(
            intents, settings.cluster_account, queue_wait_s=settings.cluster_order_wait_s, last_price=venue.last_price
        )
        services = Services(
            charts=charts,
            max_bars=settings.max_bars,
            tokens=PgTokenStore(db),
            journal=PgJournalStore(db, limits=journal_limits(settings)),
            alerts=service,
            push=hub,
            scheduler=scheduler,
            not_running=NOT_ON_FRONT,
            halt=halt,
            front_orders=front_orders,
            suspensions=SuspensionService(  # cancel-open: asked in the suspending transaction, done by the leader
                PgSuspensionStore(
                    db, cancels=PrincipalCancels(db, settings.cluster_account, wake_channel=INTENTS_CHANNEL)
                ),
                None,
                no_canceller="a cluster front cannot cancel a principal's orders itself: suspend with cancel_open",
                cancel_wait_s=settings.cluster_order_wait_s,
            ),
        )
        schedule_store = PgScheduleStore(db)
        services.schedules = ScheduleService(
            schedule_store,
            None,
            runs=IntentRuns(schedule_store, settings.cluster_account),
            misfire_grace_s=settings.schedule_misfire_grace_s,
        )
        services.front_account = view = AccountView(db, settings.cluster_account)
        services.venue = venue
        services.front_simulation = FrontSimulation(db, settings.cluster_account, view, venue)
        services.front_legs = FrontLegs(front_orders, venue)
        services.market = market_data(settings, session)
        services.live_prices = prices
        services.agent = agent_settings(settings)
        supervisor.start("push-relay", relay.run)
        supervisor.start("push-delivery-marks", hub.run_flusher)
        scheduler.every("front-heartbeat", settings.cluster_heartbeat_s, front.heartbeat)
        scheduler.every("front-alert-count", STATUS_REFRESH_S, quiet(index.count))
        scheduler.every("front-halt-state", STATUS_REFRESH_S, quiet(halt.refresh))
        scheduler.every("push-queue-ttl", 60.0, _sweeper(store))
        scheduler.every("push-relay-sweep", PUSH_SWEEP_S, _relay_sweep(relay))
        await front.heartbeat()  # PostgreSQL away: degraded, the job tries again
        await quiet(index.count)()
        await quiet(halt.refresh)()
        await stack.enter_async_context(scheduler.running())
        stack.push_async_callback(hub.flush)
        log.info("front_started", member=front.member_id)
        yield settings, services, front


async def _leave(front: Front) -> None:
    """A clean stop: gone from the membership at once."""
    with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
        await front.membership.leave(front.member_id)


def quiet(job: Job) -> Job:
    """A status job (or the dashboard's watch) that skips a round while PostgreSQL is away (the
    heartbeat reports the outage)."""

    async def run() -> None:
        with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
            await job()

    return run


def _relay_sweep(relay: PushRelay) -> Job:
    async def sweep() -> None:
        relay.sweep()

    return sweep


def _sweeper(store: PgAlertStore) -> Job:
    async def sweep() -> None:
        await store.sweep(time.time())

    return sweep
