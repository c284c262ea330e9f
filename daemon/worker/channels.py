"""Notification channels on a cluster: one worker at a time delivers the PostgreSQL outbox.

Workers fire alerts, and each firing transaction writes the outbox rows of the channels the
notification goes to (alerts/pg_outbox.py).  Delivering them is the single node's sender
(alerts/channels/sender.py: per channel and principal strictly the head first, principals in
turn, ``max_per_minute`` with digests past it, backoff, ``Retry-After``, the age limit) over
:class:`~alerts.pg_outbox.PgOutboxStore`, run by whichever worker holds the lease ``channels``
(cluster/lease.py) — one sender for the cluster, so a principal's head blocks its rows behind it
across every worker's firings, one rate holds for the whole cluster, and no two processes race for
a row.

Every worker configured with ``[channels.NAME]`` is a candidate: the scheduler job
``worker-channels`` (every ``ttl / 3``) takes the lease when it is free or expired, renews it
while held, and starts the sender (or starts it again after it crashed: PostgreSQL away makes its
reads fail).  The sender sends only while :meth:`~cluster.lease.Lease.may_act` (a paused ex-holder
past its local deadline sends nothing); losing the lease stops it.  A new holder starts from the
outbox: a row the old holder sent but had not marked yet is sent again with the same
``Idempotency-Key`` (delivery stays at-least-once, as on a single node).  ``LISTEN
chartgen_outbox`` wakes the holder's sender at each firing commit that wrote rows; after the
listener reconnects it is woken anyway (a notification sent meanwhile was lost), and each job run
wakes the channels that wait for rows (not those backing off), so a lost notification delays a
delivery by one job period at most.  Finished rows
are pruned daily by the holder.  SIGTERM releases the lease, so another worker takes over at its
next job run.  The channels' settings must be the same on every worker (a worker delivers the
channels it knows; rows for others stay pending and show in ``chartgen cluster status``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
import structlog

from alerts import OUTBOX_CHANNEL, OutboxSender, PgOutboxStore
from cluster import Lease, LeaseLost, Leases
from config import Settings
from daemon.parts.channels import KEEP_FINISHED_S
from storage import UNREACHABLE, PostgresDatabase, StorageUnavailable

log = structlog.get_logger(__name__)

LEASE_NAME = "channels"
LEASE_TTL_S = 10.0
"""The channel lease's TTL: a dead holder's channels are delivered again by another worker within
about this plus one job period (``ttl / 3``)."""


class ChannelDelivery:
    """A worker's candidacy for delivering the cluster's notification channels."""

    def __init__(self, db: PostgresDatabase, settings: Settings, member_id: str, *, ttl_s: float = LEASE_TTL_S) -> None:
        self.db = db
        self.member_id = member_id
        self.ttl_s = ttl_s
        self.leases = Leases(db)
        self.outbox = PgOutboxStore(db)
        self.lease: Lease | None = None
        self.sender = OutboxSender(
            self.outbox, dict(settings.channels), max_age_s=settings.channel_max_age_s, may_send=self._may_send
        )
        self.listener = db.listener(OUTBOX_CHANNEL, lambda _payload: self.sender.wake())
        self._task: asyncio.Task[None] | None = None
        self._connects = 0
        self._pruned_at = 0.0
        self.took = 0
        """Times this worker took the lease."""

    @property
    def delivering(self) -> bool:
        return self.lease is not None and self.lease.may_act()

    def _may_send(self) -> bool:
        return self.delivering

    async def step(self) -> None:
        """The scheduler job: keep or take the lease, keep the sender running while it is held."""
        try:
            if self.lease is not None:
                await self.lease.renew()
            else:
                self.lease = await self.leases.acquire(LEASE_NAME, self.member_id, self.ttl_s)
                if self.lease is not None:
                    self.took += 1
                    log.info("channel_lease_taken", member=self.member_id, token=self.lease.token)
        except LeaseLost:
            log.warning("channel_lease_lost", member=self.member_id)
            self.lease = None
        except (StorageUnavailable, asyncpg.PostgresError, *UNREACHABLE) as exc:
            log.info("channel_lease_unreachable", member=self.member_id, error=repr(exc))
            if self.lease is not None and not self.lease.may_act():
                self.lease = None  # past the local deadline: another worker may hold it by now
        if not self.delivering:
            await self._stop_sender()
            return
        if await self.listener.ensure() and self.listener.connects != self._connects:
            self._connects = self.listener.connects
            self.sender.wake()  # firings committed while not listening
        else:
            self.sender.wake_idle()  # a notification lost anyhow delays a delivery by one job period at most
        if self._task is None or self._task.done():
            self._start_sender()
        if time.time() - self._pruned_at >= 86400.0:
            with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
                await self.outbox.prune(time.time() - KEEP_FINISHED_S)
                self._pruned_at = time.time()

    def _start_sender(self) -> None:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                log.warning("channel_sender_restarted", member=self.member_id, error=repr(exc))
        self._task = asyncio.create_task(self.sender.run(), name="channel-sender")

    async def _stop_sender(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.listener.close()
        self._connects = 0

    async def close(self) -> None:
        """Stop delivering and give the lease up (another worker takes over at its next job run)."""
        await self._stop_sender()
        lease, self.lease = self.lease, None
        if lease is not None:
            with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
                await lease.release()

    async def status(self) -> dict[str, Any]:
        """This worker's part: whether it delivers, and (when it does) each channel's state."""
        out: dict[str, Any] = {"delivering": self.delivering, "lease_taken": self.took}
        if self.delivering:
            with contextlib.suppress(StorageUnavailable, *UNREACHABLE):
                out["channels"] = await self.sender.status()
        return out
