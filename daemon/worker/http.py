"""A cluster worker's own HTTP endpoints (``chartgen worker --port N``): ``GET /healthz``,
``/readyz``, ``/metrics`` and ``/window``, on loopback only (no authentication: a scraper or a load
balancer's health check on the same host, or through a proxy that adds its own).

``/window?market=SYMBOL%20INTERVAL`` returns the closed bars the worker's engine holds for a market
it owns and whose hand-over finished (``[open time, open, high, low, close, volume]`` each, oldest
first; 404 for another market): what an operator or a bench compares with the exchange's klines
to see that a window equals the exchange's history after the market moved.

``/readyz`` is 200 once the worker has its share of the markets and every one of them finished its
hand-over and its firings are all committed; 503 with the reasons otherwise (PostgreSQL away, a
hand-over still running, firings waiting for PostgreSQL, and with ``bus = "nats"`` NATS away or
push announcements it has not taken).  ``/metrics`` (Prometheus text) is read
from the live objects at scrape time, like the daemon's (daemon/metrics.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.metrics import CONTENT_TYPE, channel_attempts
from daemon.parts.market_bus import MarketPublisher
from daemon.parts.push_bus import PushAnnouncer
from daemon.worker.bus_commands import WorkerCommands
from daemon.worker.channels import ChannelDelivery
from daemon.worker.handover import split_market
from daemon.worker.runtime import Worker
from engine import Bars


class _WorkerCollector(Collector):
    def __init__(
        self,
        worker: Worker,
        announcer: PushAnnouncer | None,
        publisher: MarketPublisher | None,
        channels: ChannelDelivery | None,
        commands: WorkerCommands | None,
    ) -> None:
        self.worker = worker
        self.commands = commands
        self.announcer = announcer
        self.publisher = publisher
        self.channels = channels

    def collect(self) -> Iterator[Metric]:
        w = self.worker
        yield GaugeMetricFamily("chartgen_worker_markets", "markets this worker owns", len(w.owned))
        yield GaugeMetricFamily("chartgen_worker_markets_live", "owned markets whose hand-over finished", len(w.live))
        yield GaugeMetricFamily("chartgen_worker_alerts", "armed alerts this worker evaluates", len(w.indexed))
        yield GaugeMetricFamily(
            "chartgen_worker_firings_pending", "firings waiting for PostgreSQL", len(w.evaluator.pending)
        )
        yield GaugeMetricFamily(
            "chartgen_worker_degraded", "1 while the last heartbeat did not reach PostgreSQL", int(w.degraded)
        )
        yield CounterMetricFamily("chartgen_worker_alerts_fired", "alerts fired by this worker", w.evaluator.fired)
        yield CounterMetricFamily("chartgen_worker_handovers", "markets taken over", len(w.stats.handover_s))
        yield CounterMetricFamily("chartgen_worker_refreshes", "heartbeats that reached PostgreSQL", w.stats.refreshes)
        runner = w.evaluator.actions
        if runner is not None:
            yield CounterMetricFamily(
                "chartgen_worker_alert_actions_answered", "alert actions the order leader answered", runner.sent
            )
        took = w.stats.handover_s
        yield GaugeMetricFamily(
            "chartgen_worker_handover_seconds_max",
            "longest hand-over among the newest 1,000 (taken → first evaluated tick and backfill)",
            max(took) if took else 0.0,
        )
        if self.announcer is not None:
            a = self.announcer
            yield GaugeMetricFamily(
                "chartgen_worker_bus_connected", "1 while the NATS connection is up", int(a.bus.status().connected)
            )
            yield GaugeMetricFamily(
                "chartgen_worker_push_announcements_pending",
                "principals whose new frames NATS has not taken",
                len(a.pending),
            )
            yield CounterMetricFamily(
                "chartgen_worker_push_announcements", "push announcements NATS acknowledged", a.published
            )
        if self.publisher is not None:
            p = self.publisher
            yield CounterMetricFamily(
                "chartgen_worker_market_published", "bars, indicator updates and ticks sent to NATS", p.published
            )
            yield CounterMetricFamily(
                "chartgen_worker_market_dropped",
                "market messages not sent (NATS away, or the queue overflowed)",
                p.dropped,
            )
        if self.channels is not None:
            yield from _channel_metrics(self.channels)
        if self.commands is not None:
            yield CounterMetricFamily(
                "chartgen_worker_commands",
                "commands received on NATS (each ran the heartbeat at once)",
                self.commands.subscription.received,
            )


def _channel_metrics(channels: ChannelDelivery) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "chartgen_worker_channels_delivering",
        "1 while this worker holds the channel lease and delivers the outbox",
        int(channels.delivering),
    )
    yield channel_attempts(channels.sender)


def worker_app(
    worker: Worker,
    announcer: PushAnnouncer | None = None,
    publisher: MarketPublisher | None = None,
    channels: ChannelDelivery | None = None,
    commands: WorkerCommands | None = None,
) -> Starlette:
    """The worker's endpoints; with ``bus = "nats"`` its announcer's state joins readiness and metrics,
    and its market publisher's counts join the metrics and the status; with notification channels,
    whether it delivers them and its delivery attempts join the metrics and the status; the commands
    it received on NATS join both too."""
    registry = CollectorRegistry()
    registry.register(_WorkerCollector(worker, announcer, publisher, channels, commands))

    def readiness() -> tuple[bool, list[str], dict[str, object]]:
        ready, reasons = worker.readiness()
        status: dict[str, object] = dict(worker.status())
        if announcer is not None:
            bus_ready, bus_reasons = announcer.readiness()
            ready, reasons = ready and bus_ready, reasons + bus_reasons
            status |= announcer.status()
        if publisher is not None:
            status |= publisher.status()
        if channels is not None:
            status["channels_delivering"] = channels.delivering
        if commands is not None:
            status |= commands.status()
        return ready, reasons, status

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "member": worker.member_id})

    async def readyz(request: Request) -> Response:
        ready, reasons, status = readiness()
        body = {"status": "ready" if ready else "not_ready", "reasons": reasons, **status}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE)

    async def window(request: Request) -> Response:
        market = request.query_params.get("market", "")
        if market not in worker.live:
            return JSONResponse(
                {"error": f"market {market[:40]!r} is not live on this worker (market=SYMBOL%20INTERVAL)"},
                status_code=404,
            )
        symbol, interval = split_market(market)
        bars = worker.engine.window_bars(symbol, interval)
        rows = [] if bars is None or bars.times is None else _rows(bars)
        return JSONResponse({"market": market, "member": worker.member_id, "bars": rows})

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/window", window, methods=["GET"]),
        ]
    )


def _rows(bars: Bars) -> list[list[float]]:
    assert bars.times is not None
    columns = (bars.times, bars.open, bars.high, bars.low, bars.close, bars.volume)
    return [[float(c[i]) for c in columns] for i in range(len(bars))]
