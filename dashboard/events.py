"""The dashboard's live stream (``GET /ui/events``): one SSE connection per open page.

Sources, all pushed (nothing here polls the database): engine events through a bounded engine
subscription (ticks, closed bars, indicator updates), every firing and action outcome through
the alert feed, and "something changed" signals from the alert service, the order service and
the access pages.  A cluster front has no engine and no feed: its ``notified`` hooks send
``notifications`` when alerts fired anywhere in the cluster (the page reloads the list), and its
``ticks`` hooks the workers' prices on ``bus = "nats"`` (daemon/front/dashboard.py says how the
front learns of both).  Ticks are coalesced per market — a browser that falls behind gets the
newest price of each market, never a growing backlog — and the engine subscription itself drops
the oldest events when full.  Readiness is compared on every closed bar and keep-alive; the session
is re-checked on every access change and keep-alive, and a revoked or expired one ends the
stream with ``bye``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from dashboard.deps import DashboardDeps
from dashboard.sessions import Session
from engine import BarClosed, IndicatorsUpdated, Lagged, Tick

TICK_BACKLOG = 2000


@dataclass(slots=True)
class _Pending:
    """What one stream has to write next; ``wake`` is set whenever something is added."""

    ticks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    frames: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def tick(self, t: Tick) -> None:
        self.ticks[(t.symbol, t.interval)] = {
            "symbol": t.symbol, "interval": t.interval, "price": t.price, "time_ms": t.time_ms, "bar_time": t.bar_time,
        }  # fmt: skip
        self.wake.set()

    def frame(self, event: str, data: dict[str, Any]) -> None:
        self.frames.append((event, data))
        self.wake.set()

    def flag(self, name: str) -> None:
        self.flags.add(name)
        self.wake.set()


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _readiness(deps: DashboardDeps) -> tuple[bool, tuple[str, ...]]:
    engine = deps.services.engine
    if engine is None:
        return True, ()
    ready, reasons = engine.readiness()
    return ready, tuple(reasons)


async def _engine_events(deps: DashboardDeps, pending: _Pending) -> None:
    engine = deps.services.engine
    if engine is None:
        return
    sub = engine.subscribe([Tick, BarClosed, IndicatorsUpdated], maxsize=TICK_BACKLOG)
    try:
        async for event in sub:
            if isinstance(event, Tick):
                pending.tick(event)
            elif isinstance(event, BarClosed):
                pending.frame(
                    "bar",
                    {"symbol": event.symbol, "interval": event.interval, "t": event.time, "o": event.open,
                     "h": event.high, "l": event.low, "c": event.close, "v": event.volume},
                )  # fmt: skip
                pending.flag("health")
            elif isinstance(event, IndicatorsUpdated):
                pending.frame(
                    "indicators", {"symbol": event.symbol, "interval": event.interval, "bar_time": event.bar_time}
                )
            elif isinstance(event, Lagged):
                pending.flag("resync")
    finally:
        sub.close()


async def _feed(deps: DashboardDeps, pending: _Pending) -> None:
    feed = deps.services.feed
    if feed is None:
        return  # a cluster front: its ``notified`` hooks flag "notifications" instead (_stream)
    watcher = feed.watch()
    try:
        while True:
            await watcher.ready.wait()
            for principal, entry in watcher.take():
                pending.frame("notification", {"principal": principal, **entry})
            pending.flag("alerts")
    finally:
        feed.unwatch(watcher)


async def _stream(deps: DashboardDeps, session: Session) -> AsyncIterator[bytes]:
    pending = _Pending()
    hooks: list[tuple[list[Any], Any]] = []

    def hook(listeners: list[Any] | None, name: str) -> None:
        if listeners is not None:
            fn = lambda: pending.flag(name)  # noqa: E731
            listeners.append(fn)
            hooks.append((listeners, fn))

    alerts, orders = deps.services.alerts, deps.services.orders
    hook(alerts.listeners if alerts is not None else None, "alerts")
    hook(orders.listeners if orders is not None else None, "orders")
    hook(deps.listeners, "access")
    hook(deps.notified, "notifications")  # a cluster front
    if deps.ticks is not None:  # a cluster front on NATS: the workers' prices
        deps.ticks.append(pending.tick)
    hook(deps.sessions.listeners, "access")
    tasks = [
        asyncio.create_task(_engine_events(deps, pending), name="dashboard-engine-events"),
        asyncio.create_task(_feed(deps, pending), name="dashboard-feed"),
    ]
    ready = _readiness(deps)
    try:
        yield _sse("hello", {"server_time_ms": int(time.time() * 1000), "session": session.id})
        while True:
            try:
                async with asyncio.timeout(deps.keepalive_s):
                    await pending.wake.wait()
            except TimeoutError:
                pending.flag("keepalive")
            pending.wake.clear()
            out: list[bytes] = []
            frames, pending.frames = pending.frames, []
            ticks, pending.ticks = pending.ticks, {}
            flags, pending.flags = pending.flags, set()
            out += [_sse(event, data) for event, data in frames]
            out += [_sse("tick", data) for data in ticks.values()]
            if "access" in flags or "keepalive" in flags:
                if not await deps.sessions.still_valid(session.id):
                    yield b"".join(out) + _sse("bye", {"reason": "signed out: the session was revoked or expired"})
                    return
            if "health" in flags or "keepalive" in flags:
                now = _readiness(deps)
                if now != ready:
                    ready = now
                    out.append(_sse("health", {"ready": now[0], "reasons": list(now[1])}))
            for name in ("alerts", "orders", "access", "resync", "notifications"):
                if name in flags:
                    out.append(_sse(name, {}))
            if "keepalive" in flags:
                out.append(b": keepalive\n\n")
            if out:
                yield b"".join(out)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listeners, fn in hooks:
            if fn in listeners:
                listeners.remove(fn)
        if deps.ticks is not None and pending.tick in deps.ticks:
            deps.ticks.remove(pending.tick)


async def events(request: Request, deps: DashboardDeps, session: Session) -> Response:
    return StreamingResponse(
        _stream(deps, session),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
