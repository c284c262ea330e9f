"""Prometheus metrics of the daemon (``GET /metrics``): tool calls, streams, windows, alerts, queues, orders.

Latencies are histograms fed as calls finish; everything else is read from the live objects
at scrape time (a custom collector), so nothing on the hot path updates a gauge.  Queue
depths come from one SQL query per scrape.  The route answers loopback clients and
holders of a valid bearer token only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alerts import OutboxSender
from mcp_bridge import Services
from storage import StorageUnavailable

log = structlog.get_logger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector(Collector):
    """Gauges and counters read from the engine, alert evaluator and push hub at scrape time."""

    def __init__(self, services: Services, queues: dict[str, float], channel_counts: dict[str, Any]) -> None:
        self.services = services
        self.queues = queues
        self.channel_counts = channel_counts

    def collect(self) -> Iterator[Metric]:
        engine = self.services.engine
        if engine is not None:
            status = engine.status()
            markets = status["markets"]
            yield GaugeMetricFamily("chartgen_markets_followed", "(symbol, interval) windows followed", len(markets))
            yield GaugeMetricFamily(
                "chartgen_symbols_followed", "distinct symbols followed", len({m["symbol"] for m in markets})
            )
            ready = GaugeMetricFamily("chartgen_windows", "windows by state", labels=["state"])
            ready.add_metric(["synced"], sum(1 for m in markets if m["synced"]))
            ready.add_metric(["live"], sum(1 for m in markets if m["live"]))
            ready.add_metric(["warm"], sum(1 for m in markets if m["warm"]))
            yield ready
            conns = status["connections"]
            yield GaugeMetricFamily(
                "chartgen_stream_connections_up", "stream connections up", sum(1 for c in conns if c.get("connected"))
            )
            for name, key, doc in (
                ("chartgen_stream_connects_total", "connects", "stream (re)connections"),
                ("chartgen_stream_stalls_total", "stalls", "streams replaced after a stall"),
                ("chartgen_stream_messages_total", "messages", "stream messages received (rate() = msg/s)"),
            ):
                yield CounterMetricFamily(name, doc, sum(int(c.get(key, 0)) for c in conns))
            yield GaugeMetricFamily(
                "chartgen_backfill_pending", "backfill jobs queued or running", status["backfill_pending"]
            )
            lag = GaugeMetricFamily(
                "chartgen_stream_lag_seconds", "now minus the exchange time of the newest update", labels=["symbol"]
            )
            now = time.time()
            for symbol, (_price, event_ms) in engine.sync.last_prices.items():
                if event_ms:
                    lag.add_metric([symbol], max(0.0, now - event_ms / 1000))
            yield lag
            weight = engine.sync.request_weight_used
            if weight is not None:
                yield GaugeMetricFamily(
                    "chartgen_request_weight_used", "Binance REQUEST_WEIGHT used this minute", weight
                )
        alerts = self.services.alerts
        if alerts is not None:
            st = alerts.evaluator.status()
            yield GaugeMetricFamily("chartgen_alerts_active", "active alerts", st["active"])
            yield CounterMetricFamily("chartgen_alerts_fired_total", "alerts fired since start", st["fired"])
        if self.services.push is not None:
            yield GaugeMetricFamily("chartgen_push_streams", "open SSE push streams", self.services.push.stream_count())
        halt = getattr(self.services, "halt", None)
        if halt is not None:
            yield GaugeMetricFamily(
                "chartgen_trading_halted", "1 while the operator's halt switch refuses every order", int(halt.halted)
            )
        yield from _channel_metrics(self.services, self.channel_counts)
        depth = GaugeMetricFamily("chartgen_notification_queue_depth", "undelivered notifications", labels=["queue"])
        for queue, value in self.queues.items():
            depth.add_metric([queue], value)
        yield depth


def _channel_metrics(services: Services, counts: dict[str, Any]) -> Iterator[Metric]:
    """Per notification channel: outbox rows pending and failed, and delivery attempts by outcome."""
    channels = getattr(services, "channels", None)
    if channels is None:
        return
    pending = GaugeMetricFamily("chartgen_channel_pending", "outbox rows not yet delivered", labels=["channel"])
    failed = GaugeMetricFamily(
        "chartgen_channel_failed", "outbox rows given up after channel_max_age_s", labels=["channel"]
    )
    for name in channels.states:
        c = counts.get(name)
        pending.add_metric([name], c.pending if c else 0)
        failed.add_metric([name], c.failed if c else 0)
    yield from (pending, failed, channel_attempts(channels))


def channel_attempts(sender: OutboxSender) -> CounterMetricFamily:
    """Per notification channel: the sender's delivery attempts since start by outcome."""
    attempts = CounterMetricFamily(
        "chartgen_channel_deliveries", "delivery attempts since start by outcome", labels=["channel", "outcome"]
    )
    for name, state in sender.states.items():
        attempts.add_metric([name, "delivered"], state.delivered)
        attempts.add_metric([name, "retried"], state.retried)
        attempts.add_metric([name, "failed"], state.failed)
    return attempts


class DaemonMetrics:
    """The registry and the observers the router and the order service call."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.registry = CollectorRegistry()
        self.tool_seconds = Histogram(
            "chartgen_tool_call_seconds",
            "tool call latency by tool and outcome",
            ["tool", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.order_seconds = Histogram(
            "chartgen_order_seconds",
            "place_order latency, tool call in to answer out (exchange round trip included)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._queues: dict[str, float] = {}
        self._channel_counts: dict[str, Any] = {}
        self.registry.register(_StateCollector(services, self._queues, self._channel_counts))

    def observe_tool(self, tool: str, outcome: str, seconds: float) -> None:
        self.tool_seconds.labels(tool, outcome).observe(seconds)
        if tool == "place_order":
            self.order_seconds.observe(seconds)

    async def render(self) -> bytes:
        alerts = self.services.alerts
        if alerts is not None:
            try:  # a front's PostgreSQL may be away: the gauges keep their last values
                push, poll = await alerts.store.queue_sizes()
            except StorageUnavailable as exc:
                log.warning("metrics_queue_sizes_unavailable", error=str(exc))
            else:
                self._queues.update(push=float(push), poll=float(poll))
        channels = getattr(self.services, "channels", None)
        if channels is not None:
            self._channel_counts.clear()
            self._channel_counts.update(await channels.store.counts())
        return generate_latest(self.registry)
