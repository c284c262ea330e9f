"""Delivering the outbox: one worker per channel, a queue per principal in it, at-least-once.

A channel's rows are read as each principal's oldest pending ones (``Outbox.head``) and served a
principal at a time, the one served least recently first (after a failure, the failed message is
tried again before anything else: the receiver failed, not the principal), so a principal's
backlog never delays another's notifications by more than one message per principal waiting.
Within a principal, rows go strictly in id (= firing) order: its queue's head blocks the rows
behind it.

Each channel sends at most ``max_per_minute`` messages a minute (:class:`RateBucket`: a burst of
ten seconds' worth, then one every ``60 / max_per_minute`` s, the *interval*).  When a principal's
turn comes and more of its notifications wait than the bucket can send now, they go as one digest
message (alerts/channels/requests.py ``build_digest``: "37 more alerts fired: …", at most
:data:`DIGEST_ROWS` of them) — nothing dropped, nothing doubled, order kept.  A message's rows are
marked delivered only after its 2xx, all of them in one transaction (marks are batched, never
split across batches; a crash in between re-sends them with the same ``Idempotency-Key``).

Failures back off exponentially with full jitter (1 s doubling up to 5 min), and never sooner
than a 429's ``Retry-After`` or Telegram's ``parameters.retry_after``; a row older than
``channel_max_age_s`` is marked failed with its last error.  A redirect (3xx) is not followed and
not retried: the message's rows fail at once ("redirect not followed: Location …"), as does a
request to a private address the channel does not allow (alerts/channels/http1.py).  A row whose
alert action is still ``Pending`` waits up to :data:`ACTION_HOLD_S` after the firing, so the
message carries the order's outcome.

Workers sleep until the next due time or until :meth:`OutboxSender.wake` (called after a
firing commit wrote rows) — no polling.  Clock, sleep and jitter are injectable: the tests run
an hour-long outage on a manual clock.  Our own loop rather than a task-queue library: the
delivery state must live in the same SQLite transaction as the firing, which no queue we could
depend on offers.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
import structlog

from alerts.channels.http1 import Http1Client, HttpError, PrivatePeer
from alerts.channels.requests import ChannelRequest, build, build_digest
from alerts.outbox_store import Delivery, Outbox
from config import ChannelSettings, TelegramChannel

log = structlog.get_logger(__name__)

ACTION_HOLD_S = 10.0
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0
MARK_BATCH = 100
GATE_WAIT_S = 1.0
HEAD_PER_PRINCIPAL = 200
DIGEST_ROWS = {"webhook": 100, "telegram": 25, "ntfy": 25}
"""The most notifications one digest carries, by kind (25 lines of a text digest fit Telegram's 4,096 characters)."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class RateBucket:
    """A token bucket: ``per_minute`` messages a minute, a burst of ten seconds' worth (at least one)."""

    per_minute: int
    tokens: float = -1.0
    at: float | None = None

    @property
    def burst(self) -> float:
        return float(max(1, math.ceil(self.per_minute / 6)))

    @property
    def interval_s(self) -> float:
        """Seconds between two messages once the burst is spent."""
        return 60.0 / self.per_minute

    def available(self, now: float) -> float:
        """Messages that may go now (refilled up to ``now``; a clock that went back refills nothing)."""
        if self.at is None or self.tokens < 0:
            self.tokens, self.at = self.burst, now
        elif now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) / self.interval_s)
            self.at = now
        return self.tokens

    def wait_s(self, now: float) -> float:
        """Seconds until one message may go (0: now)."""
        have = self.available(now)
        return 0.0 if have >= 1.0 else (1.0 - have) * self.interval_s

    def take(self, now: float) -> None:
        self.available(now)
        self.tokens -= 1.0


@dataclass(slots=True)
class ChannelState:
    """What /status, /metrics and the dashboard show of one channel (besides the table's counts),
    and its rate: the bucket and when each principal was last served."""

    kind: str
    bucket: RateBucket
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    digests: int = 0
    """Digest messages sent (each counts its rows in ``delivered``)."""
    last_error: str | None = None
    last_delivered_at: float | None = None
    next_attempt_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    served: dict[str, int] = field(default_factory=dict)
    """Principal → the turn it was last served in (the least recent goes first)."""
    turn: int = 0


class DeliveryFailed(Exception):
    """A delivery attempt that did not get a 2xx; ``retry_after`` is the receiver's minimum wait."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class RateWait:
    """Seconds until the channel's rate lets the next message go."""

    seconds: float


class DeliveryRefused(Exception):
    """A delivery that trying again cannot help (a redirect, a private address): its rows fail at once."""


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
        self.states = {
            name: ChannelState(kind=ch.kind, bucket=RateBucket(ch.rate_per_minute)) for name, ch in channels.items()
        }
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

    async def _rest(self, name: str, seconds: float) -> None:
        """Wait out the channel's rate: new rows need not wake it (whoever is due goes at the next token)."""
        self.states[name].next_attempt_at = self._clock() + seconds
        await (self._sleep or asyncio.sleep)(seconds)

    async def _idle(self, name: str) -> None:
        state = self.states[name]
        state.next_attempt_at = None
        await state.wake.wait()
        state.wake.clear()

    async def run_channel(self, name: str, *, until_empty: bool = False) -> None:
        """One channel: deliver each principal's queue head first, forever (or until the queue is empty)."""
        state = self.states[name]
        while True:
            state.wake.clear()
            rows = await self.store.head(name, HEAD_PER_PRINCIPAL)
            if not rows:
                if until_empty:
                    return
                await self._idle(name)
                continue
            marks: list[int] = []
            try:
                wait = await self._serve(name, rows, marks)
            finally:
                await self._flush(marks)
            if isinstance(wait, RateWait):
                await self._rest(name, wait.seconds)
            elif wait is not None:
                await self._pause(name, wait)

    async def _flush(self, marks: list[int]) -> None:
        if marks:
            await self.store.delivered(list(marks), self._clock())
            marks.clear()

    async def _serve(self, name: str, rows: list[Delivery], marks: list[int]) -> float | RateWait | None:
        """Send messages from the rows read, principal by principal, while the rate allows; None to read
        the queue again now, else seconds to wait first (a backoff, a held or future row), or the
        :class:`RateWait` until the channel may send again."""
        state = self.states[name]
        now = self._clock()
        expired = [r.id for r in rows if now - r.created_at > self.max_age_s]
        if expired:
            await self.store.failed(expired, now, f"not delivered within {self.max_age_s:g} s")
            state.failed += len(expired)
            log.warning("channel_delivery_failed", channel=name, rows=len(expired))
        queues: dict[str, deque[Delivery]] = {}
        for r in rows:
            if now - r.created_at <= self.max_age_s:
                queues.setdefault(r.principal, deque()).append(r)
        while True:
            now = self._clock()
            ready = {p: n for p, q in queues.items() if (n := _ready(q, now))}
            if not ready:
                if not any(queues.values()):
                    return None
                return max(0.0, min(_held_until(q[0]) for q in queues.values() if q) - now)
            wait = state.bucket.wait_s(now)
            if wait > 0:
                return RateWait(wait)
            principal = min(ready, key=lambda p: (queues[p][0].attempts == 0, state.served.get(p, -1), queues[p][0].id))
            queue = queues[principal]
            fits = int(state.bucket.available(now))
            count = 1 if ready[principal] <= fits else min(ready[principal], DIGEST_ROWS[state.kind])
            batch = [queue[i] for i in range(count)]
            if self.may_send is not None and not self.may_send():
                return GATE_WAIT_S
            delivered, retry_in = await self._deliver(name, batch)
            if retry_in is not None:
                return retry_in
            for _ in batch:
                queue.popleft()
            state.turn += 1
            state.served[principal] = state.turn
            if delivered:
                marks.extend(r.id for r in batch)  # one flush holds all of a message's rows: one transaction
                if len(marks) >= MARK_BATCH:
                    await self._flush(marks)

    async def _deliver(self, name: str, batch: list[Delivery]) -> tuple[bool, float | None]:
        """Send one message (one row, or a digest of several): (True, None) on a 2xx; (False, None) when it was
        refused for good (its rows are marked failed); (False, seconds) to wait before the channel tries again."""
        state = self.states[name]
        channel = self.channels[name]
        now = self._clock()
        items = []
        for row in batch:
            payload = row.payload
            if row.attempts or _action_pending(payload):
                payload = await self.store.payload(row.id) or payload
            items.append((row.notification_id, payload))
        ids = [r.id for r in batch]
        state.bucket.take(now)
        if len(items) == 1:
            req = build(channel, items[0][0], items[0][1], now)
        else:
            req = build_digest(channel, items, now, state.bucket.per_minute)
        try:
            await self._send(channel, req)
        except DeliveryRefused as exc:
            await self.store.failed(ids, now, str(exc))
            state.failed += len(ids)
            state.last_error = str(exc)
            log.warning("channel_delivery_refused", channel=name, rows=len(ids), error=str(exc))
            return False, None
        except DeliveryFailed as exc:
            delay = max(backoff_s(batch[0].attempts, self._rng), exc.retry_after or 0.0)
            state.retried += 1
            state.last_error = str(exc)
            await self.store.retry_later(ids, now + delay, str(exc))
            log.info("channel_delivery_retry", channel=name, error=str(exc), rows=len(ids), retry_in_s=round(delay, 2))
            return False, delay
        state.delivered += len(ids)
        state.digests += len(ids) > 1
        state.last_delivered_at = self._clock()
        return True, None

    async def _send(self, channel: ChannelSettings, req: ChannelRequest) -> None:
        client = self._client
        if client is None:
            raise DeliveryFailed("sender not running")
        try:
            async with asyncio.timeout(channel.timeout_s):
                answer = await client.post(req.url, req.headers, req.body, allow_private=channel.allow_private_address)
        except TimeoutError:
            raise DeliveryFailed(f"no answer within {channel.timeout_s:g} s") from None
        except PrivatePeer as exc:
            raise DeliveryRefused(
                f"{_scrub(str(exc), channel)[:200]}; set allow_private_address = true on this channel "
                "for a receiver you run"
            ) from None
        except HttpError as exc:
            raise DeliveryFailed(_scrub(str(exc), channel)[:200]) from None
        if 200 <= answer.status < 300:
            return
        if 300 <= answer.status < 400:
            location = _scrub(answer.headers.get("location", "(none)"), channel)[:200]
            raise DeliveryRefused(f"HTTP {answer.status}: redirect not followed: Location {location}")
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
                "max_per_minute": st.bucket.per_minute,
                "digests": st.digests,
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


def _held_until(row: Delivery) -> float:
    """When a row may go: its retry time, and for an action still pending, the firing plus ACTION_HOLD_S."""
    return max(row.next_at, row.created_at + ACTION_HOLD_S if _action_pending(row.payload) else 0.0)


def _ready(queue: deque[Delivery], now: float) -> int:
    """How many rows at the front of a principal's queue may go now (its order: stop at the first that may not)."""
    n = 0
    for row in queue:
        if _held_until(row) > now:
            break
        n += 1
    return n


def _action_pending(payload: str) -> bool:
    return '"status":"Pending"' in payload and '"action"' in payload


def _telegram_retry_after(body: bytes) -> float | None:
    try:
        answer = orjson.loads(body)
        value = answer.get("parameters", {}).get("retry_after")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None
