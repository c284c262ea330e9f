"""Delivering the outbox: one worker per channel, rows strictly in id order, at-least-once.

The head of a channel's queue blocks the rows behind it, so a receiver sees each channel's
notifications in firing order (a retried row is re-sent before anything newer).  A row is
marked delivered only after a 2xx; marks are written in batches (a crash in between re-sends
the row with the same ``Idempotency-Key``).  Failures back off exponentially with full jitter
(1 s doubling up to 5 min), and never sooner than a 429's ``Retry-After`` or Telegram's
``parameters.retry_after``; a row older than ``channel_max_age_s`` is marked failed with its
last error and the next one goes.  A row whose alert action is still ``Pending`` waits up to
:data:`ACTION_HOLD_S` after the firing, so the message carries the order's outcome.

Workers sleep until the next due time or until :meth:`OutboxSender.wake` (called after a
firing commit wrote rows) — no polling.  Clock, sleep and jitter are injectable: the tests run
an hour-long outage on a manual clock.  Our own loop rather than a task-queue library: the
delivery state must live in the same SQLite transaction as the firing, which no queue we could
depend on offers.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
import structlog

from alerts.channels.http1 import Http1Client, HttpError
from alerts.channels.requests import build
from alerts.outbox_store import Delivery, Outbox
from config.channels import ChannelSettings, TelegramChannel

log = structlog.get_logger(__name__)

ACTION_HOLD_S = 10.0
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0
MARK_BATCH = 100
GATE_WAIT_S = 1.0

Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class ChannelState:
    """What /status, /metrics and the dashboard show of one channel (besides the table's counts)."""

    kind: str
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    last_error: str | None = None
    last_delivered_at: float | None = None
    next_attempt_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class DeliveryFailed(Exception):
    """A delivery attempt that did not get a 2xx; ``retry_after`` is the receiver's minimum wait."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def backoff_s(attempts: int, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempts)], at least 50 ms."""
    return max(0.05, rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempts)))


class OutboxSender:
    """The supervised delivery workers of every configured channel."""

    def __init__(
        self,
        store: Outbox,
        channels: dict[str, ChannelSettings],
        *,
        max_age_s: float,
        may_send: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.channels = channels
        self.max_age_s = max_age_s
        self.may_send = may_send
        """None, or a gate checked right before each request: False (a cluster sender whose channel lease
        may have lapsed) sends nothing and looks again in :data:`GATE_WAIT_S`."""
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.states = {name: ChannelState(kind=ch.kind) for name, ch in channels.items()}
        self._client: Http1Client | None = None

    def wake(self) -> None:
        """New rows were committed: every idle worker looks at its queue now."""
        for state in self.states.values():
            state.wake.set()

    def wake_idle(self) -> None:
        """Wake the workers waiting for new rows, not those waiting out a backoff (a periodic net under a
        lost wake-up: a cluster's sender is woken by PostgreSQL notifications)."""
        for state in self.states.values():
            if state.next_attempt_at is None:
                state.wake.set()

    async def run(self, *, until_empty: bool = False) -> None:
        """Run every channel's worker until cancelled (the daemon's supervisor restarts it on a crash);
        ``until_empty``: return once every channel's queue is empty (tests, benchmarks)."""
        client = Http1Client()
        self._client = client
        try:
            async with asyncio.TaskGroup() as group:
                for name in self.channels:
                    group.create_task(self.run_channel(name, until_empty=until_empty), name=f"channel-{name}")
        finally:
            self._client = None
            await client.close()

    async def _pause(self, name: str, seconds: float) -> None:
        """Wait ``seconds``, or less if woken; with an injected sleep (tests) the full time on its clock."""
        state = self.states[name]
        state.next_attempt_at = self._clock() + seconds
        if self._sleep is not None:
            await self._sleep(seconds)
            return
        state.wake.clear()
        try:
            async with asyncio.timeout(seconds):
                await state.wake.wait()
        except TimeoutError:
            pass

    async def _idle(self, name: str) -> None:
        state = self.states[name]
        state.next_attempt_at = None
        await state.wake.wait()
        state.wake.clear()

    async def run_channel(self, name: str, *, until_empty: bool = False) -> None:
        """One channel: deliver its queue head first, forever (or until the queue is empty)."""
        state = self.states[name]
        while True:
            state.wake.clear()
            rows = await self.store.head(name)
            if not rows:
                if until_empty:
                    return
                await self._idle(name)
                continue
            marks: list[int] = []
            try:
                for row in rows:
                    wait = await self._deliver(name, row, marks)
                    if wait is not None:
                        await self._flush(marks)
                        await self._pause(name, wait)
                        break
                    if len(marks) >= MARK_BATCH:
                        await self._flush(marks)
            finally:
                await self._flush(marks)

    async def _flush(self, marks: list[int]) -> None:
        if marks:
            await self.store.delivered(list(marks), self._clock())
            marks.clear()

    async def _deliver(self, name: str, row: Delivery, marks: list[int]) -> float | None:
        """Try the head row; None to go on with the next row, else seconds to wait before the head again."""
        state = self.states[name]
        now = self._clock()
        if now - row.created_at > self.max_age_s:
            await self.store.failed(row.id, now, f"not delivered within {self.max_age_s:g} s")
            state.failed += 1
            log.warning("channel_delivery_failed", channel=name, notification=row.notification_id)
            return None
        if row.next_at > now:
            return row.next_at - now
        payload = row.payload
        if _action_pending(payload) and now - row.created_at < ACTION_HOLD_S:
            return row.created_at + ACTION_HOLD_S - now
        if row.attempts or _action_pending(payload):
            payload = await self.store.payload(row.id) or payload
        if self.may_send is not None and not self.may_send():
            return GATE_WAIT_S
        try:
            await self._send(self.channels[name], row.notification_id, payload)
        except DeliveryFailed as exc:
            delay = max(backoff_s(row.attempts, self._rng), exc.retry_after or 0.0)
            state.retried += 1
            state.last_error = str(exc)
            await self.store.retry_later(row.id, now + delay, str(exc))
            log.info("channel_delivery_retry", channel=name, error=str(exc), retry_in_s=round(delay, 2))
            return delay
        marks.append(row.id)
        state.delivered += 1
        state.last_delivered_at = self._clock()
        return None

    async def _send(self, channel: ChannelSettings, notification_id: str, payload: str) -> None:
        client = self._client
        if client is None:
            raise DeliveryFailed("sender not running")
        req = build(channel, notification_id, payload, self._clock())
        try:
            async with asyncio.timeout(channel.timeout_s):
                answer = await client.post(req.url, req.headers, req.body)
        except TimeoutError:
            raise DeliveryFailed(f"no answer within {channel.timeout_s:g} s") from None
        except HttpError as exc:
            raise DeliveryFailed(_scrub(str(exc), channel)[:200]) from None
        if 200 <= answer.status < 300:
            return
        retry = _retry_after(answer.headers.get("retry-after"))
        if isinstance(channel, TelegramChannel):
            retry = _telegram_retry_after(answer.body) or retry
        raise DeliveryFailed(f"HTTP {answer.status}", retry)

    async def status(self) -> dict[str, Any]:
        """Per channel: kind, pending/delivered/failed rows, oldest pending age, last error, next attempt."""
        counts = await self.store.counts()
        now = self._clock()
        out: dict[str, Any] = {}
        for name, st in self.states.items():
            c = counts.get(name)
            out[name] = {
                "kind": st.kind,
                "pending": c.pending if c else 0,
                "delivered": c.delivered if c else 0,
                "failed": c.failed if c else 0,
                "oldest_pending_age_s": round(now - c.oldest_pending_at, 1)
                if c and c.oldest_pending_at is not None
                else None,
                "last_error": st.last_error,
                "last_delivered_at": st.last_delivered_at,
                "next_attempt_at": st.next_attempt_at,
            }
        return out


def _scrub(message: str, channel: ChannelSettings) -> str:
    """An error message without the channel's secret (Telegram's bot token is part of the URL)."""
    if isinstance(channel, TelegramChannel) and channel.bot_token is not None:
        return message.replace(channel.bot_token.get_secret_value(), "<bot token>")
    return message


def _action_pending(payload: str) -> bool:
    return '"status":"Pending"' in payload and '"action"' in payload


def _telegram_retry_after(body: bytes) -> float | None:
    try:
        answer = orjson.loads(body)
        value = answer.get("parameters", {}).get("retry_after")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None
