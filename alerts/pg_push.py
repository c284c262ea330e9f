"""Push frames reaching the SSE streams of every cluster front: a ``NOTIFY`` from the firing
transaction, a relay per front that reads the frames from ``push_queue``.

A worker fires an alert and queues its push frame in PostgreSQL (alerts/pg_store.py); the client's
notification stream is open on some front, maybe another host.  The firing transaction sends
``pushed PRINCIPAL FIRST LAST`` on :data:`PUSH_CHANNEL` (the principal's new sequence numbers;
PostgreSQL delivers it at commit, never for a rolled-back firing), so no front polls.

:class:`PushRelay` (one per front) listens; for a principal with a stream open on its front it
reads the frames after the last one it relayed (``push_queue``, in sequence order) and offers them
to its :class:`~alerts.push.PushHub`.  Streams drop a frame they already wrote (its sequence number
is not above their last), so reading more than the notification named is harmless, and the order
of notifications does not matter.  A notification sent while the relay's connection was down is
lost: after every reconnect it reads, for each principal with a stream here, what it has not
relayed (the undelivered frames when it has relayed nothing for that principal: a stream that
opened meanwhile replayed the queue itself).  Frames the stream writes are marked delivered by
the hub's flush, as on a single node.

Frame payloads stay in the table, not in the notification: PostgreSQL caps a payload at 8,000
bytes, and a front without a stream for the principal should not pay for the frame.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

import asyncpg
import structlog

from alerts.push import PushHub
from alerts.subscription_store import QueuedFrame

log = structlog.get_logger(__name__)

PUSH_CHANNEL = "chartgen_push"
RETRY_S = 1.0
"""After a failed read, the relay tries again this much later."""


async def notify_pushed(conn: asyncpg.Connection, seqs: Mapping[str, Iterable[int]]) -> None:
    """Inside the firing transaction: announce each principal's new frames (first and last number)."""
    principals: list[str] = []
    payloads: list[str] = []
    for principal, numbers in seqs.items():
        ordered = sorted(numbers)
        if ordered:
            principals.append(principal)
            payloads.append(pushed_payload(principal, ordered[0], ordered[-1]))
    if payloads:
        await conn.execute("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", PUSH_CHANNEL, payloads)


def by_principal(pairs: Iterable[tuple[str, int | None]]) -> dict[str, list[int]]:
    """(principal, frame number or None) pairs grouped: each principal's new frame numbers."""
    out: dict[str, list[int]] = {}
    for principal, seq in pairs:
        if seq is not None:
            out.setdefault(principal, []).append(seq)
    return out


def pushed_payload(principal: str, first: int, last: int) -> str:
    """The announcement of ``principal``'s frames ``first``..``last`` (NOTIFY payload or NATS message)."""
    return f"pushed {principal} {first} {last}"


def parse_pushed(payload: str) -> tuple[str, int, int] | None:
    """(principal, first, last) of a ``pushed`` payload; None for one this code does not know."""
    head, _, rest = payload.partition(" ")
    principal, _, numbers = rest.rpartition(" ")
    principal, _, first = principal.rpartition(" ")
    if head != "pushed" or not principal or not first.isdigit() or not numbers.isdigit():
        return None
    return principal, int(first), int(numbers)


class FrameSource(Protocol):
    """What the relay reads frames from (:meth:`alerts.pg_store.PgAlertStore.queued`)."""

    async def queued(self, principal: str, *, after_seq: int | None, now: float) -> list[QueuedFrame]: ...


class PushRelay:
    """One front's relay from :data:`PUSH_CHANNEL` to its push hub (see the module docstring)."""

    def __init__(self, source: FrameSource, hub: PushHub) -> None:
        self.source = source
        self.hub = hub
        self.relayed: dict[str, int] = {}
        """Per principal, the newest sequence number offered to this front's streams."""
        self._wanted: dict[str, None] = {}
        self._wake = asyncio.Event()
        self.frames = 0
        """Frames offered to streams since start (the relay's counter)."""

    def on_payload(self, payload: str) -> None:
        """The listener's callback: note the principal if it has a stream here; the runner reads."""
        parsed = parse_pushed(payload)
        if parsed is None:
            log.warning("push_notification_unknown", payload=payload[:200])
            return
        principal = parsed[0]
        if self.hub.connected(principal):
            self._wanted[principal] = None
            self._wake.set()
        else:
            self.relayed.pop(principal, None)  # a stream opened later replays the queue itself

    def reconnected(self) -> None:
        """The listener was re-opened: notifications may be lost; read every connected principal."""
        for principal in list(self.relayed):
            if not self.hub.connected(principal):
                del self.relayed[principal]  # no stream here: a new one replays the queue itself
        for principal in self.hub.principals():
            self._wanted[principal] = None
        self._wake.set()

    def sweep(self) -> None:
        """The periodic safety net (a front's job): read every connected principal again, so a frame
        whose announcement was lost anywhere (a NATS outage on the worker's side, a commit whose
        answer was lost) reaches its stream within one sweep period.  One indexed read per principal
        with a stream here."""
        for principal in self.hub.principals():
            self._wanted[principal] = None
        if self._wanted:
            self._wake.set()

    async def relay_once(self) -> int:
        """Read and offer the frames of every principal noted so far; returns how many were offered."""
        wanted, self._wanted = list(self._wanted), {}
        offered = 0
        for principal in wanted:
            frames = await self.source.queued(principal, after_seq=self.relayed.get(principal), now=time.time())
            for frame in frames:
                self.hub.publish(principal, frame.seq, frame.data)
                offered += 1
            if frames:
                self.relayed[principal] = max(self.relayed.get(principal, 0), frames[-1].seq)
        self.frames += offered
        return offered

    async def run(self) -> None:
        """Background task (supervised): relay whenever a notification names a connected principal.

        A failed read (PostgreSQL away) keeps its principals noted and is tried again on the next
        wake-up — the next notification, or the reconnect that follows an outage."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            wanted = dict(self._wanted)
            try:
                await self.relay_once()
            except Exception as exc:  # noqa: BLE001 - storage errors of any driver; the task must live on
                log.warning("push_relay_failed", error=repr(exc))
                self._wanted.update(wanted)
                await asyncio.sleep(RETRY_S)  # back-off, then try again
                self._wake.set()
