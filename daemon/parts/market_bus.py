"""A worker's market data on the NATS bus (``bus = "nats"``): the closed bars and indicator updates
of the markets it follows on ``CHARTGEN_MARKET``, and each market's price once a second on
``CHARTGEN_TICKS`` (cluster/bus_streams.py), under ``chartgen.market.<kind>.<symbol>.<interval>``
(cluster/bus_subjects.py).

What is published (JSON):

- ``bar`` — each :class:`~engine.events.BarClosed`: ``symbol, interval, time`` (open time, unix s),
  ``open, high, low, close, volume, backfilled``, ``worker``, ``published_ms`` (this host's clock);
- ``indicator`` — each :class:`~engine.events.IndicatorsUpdated`: ``symbol, interval, bar_time``,
  ``indicators`` (per indicator key: its newest line ``values`` — NaN as null — and the ``signals``
  confirmed on that bar), ``worker``, ``published_ms`` (this host's clock);
- ``tick`` — once a second per market whose price moved: ``symbol, price, time_ms`` (the exchange's
  event time), ``worker`` (:class:`cluster.bus_prices.TickMessage`; fronts price quotes with them).
  Ticks are sampled, not every trade: at ten thousand markets the engine sees far more kline
  messages than a replay buffer should hold.

Each message carries a ``Nats-Msg-Id`` (kind, market and bar time or event time), so a bar published
twice — by the old and the new owner around a hand-over, or again after a reconnect — is stored once
within the stream's duplicate window.

Fire and forget: messages go out as plain NATS publishes to the stream's subjects (JetStream stores
them) without waiting for an acknowledgement.  A closed-bar storm is thousands of messages at once;
awaiting one acknowledgement per message (a loopback round trip, ~0.2 ms here) would put seconds
between the first and the last window's update.  The stream is a replay buffer, never the record
(windows are rebuilt from the exchange), so a message lost while NATS is away is counted
(:attr:`MarketPublisher.dropped`) and not retried.  Bars and indicator updates are read from the
engine's event bus on their own bounded subscription (a :class:`~engine.events.Lagged` notice is
counted as dropped too); ticks are read from the engine's state by the once-a-second job.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import orjson
import structlog

from cluster import Bus, market_subject
from engine import BarClosed, IndicatorsUpdated, Lagged, LiveEngine, SubscriptionClosed

log = structlog.get_logger(__name__)

QUEUE = 200_000
"""The publisher's subscription to the engine's bars and indicator updates: two storms of 10,000
windows fit with room; beyond it the oldest are dropped and counted."""

TICK_EVERY_S = 1.0
"""How often each market's price is published (when it moved)."""


class MarketPublisher:
    """Publishes one worker's market data (see the module docstring); :meth:`run` is a supervised
    task, :meth:`publish_ticks` a scheduler job."""

    def __init__(self, bus: Bus, engine: LiveEngine, worker: str) -> None:
        self.bus = bus
        self.engine = engine
        self.worker = worker
        self.published = 0
        self.dropped = 0
        self._subjects: dict[tuple[str, str, str | None], str] = {}
        self._ticked: dict[str, tuple[int, float]] = {}

    def _subject(self, kind: str, symbol: str, interval: str | None) -> str:
        key = (kind, symbol, interval)
        subject = self._subjects.get(key)
        if subject is None:
            subject = self._subjects[key] = market_subject(kind, symbol, interval)
        return subject

    async def _send(self, kind: str, symbol: str, interval: str | None, msg_id: str, body: dict[str, Any]) -> None:
        if await self.bus.send(self._subject(kind, symbol, interval), orjson.dumps(body), msg_id=msg_id):
            self.published += 1
        else:
            self.dropped += 1

    async def run(self) -> None:
        """Publish every closed bar and indicator update until cancelled."""
        with self.engine.subscribe((BarClosed, IndicatorsUpdated), maxsize=QUEUE) as sub:
            with contextlib.suppress(SubscriptionClosed):
                while True:
                    event = await sub.get()
                    if isinstance(event, BarClosed):
                        await self._bar(event)
                    elif isinstance(event, IndicatorsUpdated):
                        await self._indicators(event)
                    elif isinstance(event, Lagged):
                        self.dropped += event.dropped
                        log.warning("market_publish_lagged", dropped=event.dropped)

    async def _bar(self, bar: BarClosed) -> None:
        body = {
            "symbol": bar.symbol,
            "interval": bar.interval,
            "time": bar.time,
            "open": bar.open,
            "high": bar.high,
            "low": bar.low,
            "close": bar.close,
            "volume": bar.volume,
            "backfilled": bar.backfilled,
            "worker": self.worker,
            "published_ms": int(time.time() * 1000),
        }
        await self._send("bar", bar.symbol, bar.interval, f"bar|{bar.symbol}|{bar.interval}|{bar.time}", body)

    async def _indicators(self, update: IndicatorsUpdated) -> None:
        window = self.engine.indicators.windows.get((update.symbol, update.interval))
        indicators: dict[str, Any] = {}
        if window is not None:
            for rid, req in list(window.requests.items()):
                newest = window.newest.get(rid)
                if newest is not None:
                    indicators[req.key] = {
                        "values": {label: _number(v) for label, v in newest.values},
                        "signals": [label for label, _ in newest.signals],
                    }
        body = {
            "symbol": update.symbol,
            "interval": update.interval,
            "bar_time": update.bar_time,
            "indicators": indicators,
            "worker": self.worker,
            "published_ms": int(time.time() * 1000),
        }
        msg_id = f"indicator|{update.symbol}|{update.interval}|{update.bar_time}"
        await self._send("indicator", update.symbol, update.interval, msg_id, body)

    async def publish_ticks(self) -> None:
        """Each followed symbol's price, when it moved since the last call."""
        for symbol in sorted({symbol for symbol, _ in self.engine.markets}):
            stamp = self.engine.exchange_time_ms(symbol)
            price = self.engine.last_price(symbol)
            if stamp is None or price is None or self._ticked.get(symbol) == (stamp, price):
                continue
            self._ticked[symbol] = (stamp, price)
            # the fields of cluster.bus_prices.TickMessage (a dict: up to ten thousand a second)
            body = {"symbol": symbol, "price": price, "time_ms": stamp, "worker": self.worker}
            await self._send("tick", symbol, None, f"tick|{symbol}|{stamp}|{price!r}", body)
        followed = {symbol for symbol, _ in self.engine.markets}
        for gone in set(self._ticked) - followed:
            del self._ticked[gone]

    def status(self) -> dict[str, Any]:
        return {"market_published": self.published, "market_dropped": self.dropped}


def _number(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value
