"""Running the notification channels (``--trade`` with ``[channels.NAME]`` settings).

Builds the outbox sender over the daemon's database, lets the alert store wake it after every
firing commit that wrote outbox rows, supervises it (a crash restarts it; the outbox is durable,
so nothing is lost), prunes finished rows daily on the daemon's APScheduler, and contributes the
channels' state to ``/status`` and ``/metrics``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from alerts import AlertStore, OutboxSender, OutboxStore
from config import Settings
from daemon.scheduler import DaemonScheduler
from daemon.supervisor import Supervisor
from storage import Database

KEEP_FINISHED_S = 7 * 86400.0
"""Delivered and failed rows are kept this long (the dashboard's and /status's history), then pruned."""


@contextlib.asynccontextmanager
async def running_channels(
    settings: Settings, *, db: Database, store: AlertStore, supervisor: Supervisor, scheduler: DaemonScheduler
) -> AsyncIterator[OutboxSender | None]:
    """The supervised sender of every configured channel, or None when none is configured."""
    if not settings.channels:
        yield None
        return
    outbox = OutboxStore(db)
    sender = OutboxSender(outbox, settings.channels, max_age_s=settings.channel_max_age_s)
    store.on_enqueued = sender.wake
    supervisor.start("channel-sender", sender.run)

    async def prune() -> None:
        await outbox.prune(time.time() - KEEP_FINISHED_S)

    scheduler.every("outbox-prune", 86400.0, prune)
    try:
        yield sender
    finally:
        store.on_enqueued = None
