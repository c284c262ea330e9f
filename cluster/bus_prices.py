"""Prices from the workers' ticks on NATS, for a cluster front (``bus = "nats"``).

Each worker publishes, once a second, the price of every market it follows whose price moved
(daemon/parts/market_bus.py), as a :class:`TickMessage` on ``chartgen.market.tick.<symbol>._``.  A front
holds no engine; without these it asks Binance's REST API for every quote (``GET
/api/v3/ticker/24hr``, refetched after 2 s per symbol), and every front behind the load balancer
spends its own IP's request weight doing so.  :class:`BusPrices` subscribes to the ticks and answers
``last_price`` / ``exchange_time_ms`` as the live engine does on a single node, so
:class:`engine.market_data.quotes.QuoteSource` takes a followed pair's price from the bus and asks
REST only for the 24 h change and volume (kept 60 s).

A price is used while its tick arrived less than :data:`MAX_AGE_S` ago: a market whose price stopped
moving, a worker that died (until the next owner publishes) or NATS away (:meth:`last_price` says
None, and the quote comes from REST as before).  Two workers may both publish a market around a
hand-over; the tick with the newer exchange time wins.  A plain subscription: nothing is kept on
the server for a front, and a reconnect renews it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cluster.bus import Bus, Subscription
from cluster.bus_subjects import SUBJECT_ROOT
from engine import iso_utc

log = structlog.get_logger(__name__)

TICKS_FILTER = f"{SUBJECT_ROOT}.market.tick.>"
MAX_AGE_S = 3.0
"""Ticks come once a second while a price moves: three missed ones and the price is asked of REST."""


class TickMessage(BaseModel):
    """A market's price as a worker publishes it (JSON)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    symbol: str = Field(min_length=1, max_length=40)
    price: float = Field(gt=0)
    time_ms: int = Field(ge=0)
    """The exchange's event time of the trade at that price."""
    worker: str = ""

    @field_validator("price")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("price must be finite")
        return value


class BusPrices:
    """The newest tick of each symbol, as a front's live prices (module docstring)."""

    def __init__(self, bus: Bus, *, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.bus = bus
        self.max_age_s = max_age_s
        self._clock = clock
        self._ticks: dict[str, tuple[TickMessage, float]] = {}
        self._subscription: Subscription | None = None
        self.received = 0
        self.invalid = 0
        self.listeners: list[Callable[[TickMessage], None]] = []
        """Told of each tick newer than the one held (a front's open dashboard pages)."""

    async def open(self) -> None:
        """Subscribe (:class:`~cluster.bus_errors.BusError` while NATS is away)."""
        if self._subscription is None:
            self._subscription = await self.bus.subscribe(TICKS_FILTER, self._deliver)

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()
            self._subscription = None

    def _deliver(self, subject: str, data: bytes) -> None:
        try:
            tick = TickMessage.model_validate_json(data)
        except ValidationError as exc:
            self.invalid += 1
            log.debug("bus_tick_invalid", subject=subject, error=str(exc).splitlines()[0][:200])
            return
        self.received += 1
        held = self._ticks.get(tick.symbol)
        if held is None or tick.time_ms >= held[0].time_ms:
            self._ticks[tick.symbol] = (tick, self._clock())
            for listener in self.listeners:
                listener(tick)

    def _fresh(self, symbol: str) -> TickMessage | None:
        held = self._ticks.get(symbol)
        if held is None or self._clock() - held[1] > self.max_age_s:
            return None
        return held[0]

    # --- what QuoteSource asks of a live engine ---------------------------------------------
    def last_price(self, symbol: str) -> float | None:
        tick = self._fresh(symbol)
        return None if tick is None else tick.price

    def exchange_time_ms(self, symbol: str) -> int | None:
        tick = self._fresh(symbol)
        return None if tick is None else tick.time_ms

    def price_ref(self, symbol: str, at_ms: int) -> str:
        """Where a quote's price came from (the agent tools' source reference)."""
        tick = self._fresh(symbol)
        worker = f" from {tick.worker}" if tick is not None and tick.worker else ""
        return f"nats:{SUBJECT_ROOT}.market.tick {symbol}{worker}@{iso_utc(at_ms / 1000)}"

    def status(self) -> dict[str, Any]:
        fresh = sum(1 for s in self._ticks if self._fresh(s) is not None)
        return {
            "bus_prices_fresh": fresh,
            "bus_ticks_received": self.received,
            "bus_ticks_invalid": self.invalid,
            "bus_prices_subscribed": self._subscription is not None and self.bus.status().connected,
        }
