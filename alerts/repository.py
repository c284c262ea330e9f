"""The alert store's interface: what the evaluator, the alert service and the push streams need
from storage, whichever holds it — SQLite (:class:`alerts.store.AlertStore`, the single-process
daemon) or PostgreSQL (:class:`alerts.pg_store.PgAlertStore`, the cluster).

tests/alerts/test_store.py runs the same behaviour against both; tests/alerts/test_repository.py
checks that both implement every method below with the same signature.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Protocol

from alerts.action_store import PlannedAction
from alerts.models import Alert, Firing, Subscription
from alerts.store import Fired, QueueLimits
from alerts.subscription_store import QueuedFrame
from storage import Database, PostgresDatabase


class AlertRepository(Protocol):
    limits: QueueLimits

    @property
    def db(self) -> Database | PostgresDatabase:
        """The storage itself, for the readers that take either (:func:`alerts.fired_history.recent_fired`)."""
        ...

    async def queue_sizes(self) -> tuple[int, int]:
        """Push frames not yet delivered and notifications waiting to be polled, over every principal."""
        ...

    async def insert(self, alert: Alert) -> None: ...

    async def insert_capped(self, alert: Alert, max_per_principal: int) -> bool: ...

    async def insert_many(self, alerts: Sequence[Alert]) -> None: ...

    def active_batches(self, size: int = 10_000) -> AsyncIterator[list[Alert]]: ...

    async def active(self) -> list[Alert]: ...

    async def of_principal(self, principal: str) -> list[Alert]: ...

    async def count_of(self, principal: str) -> int: ...

    async def remove(self, principal: str | None, alert_id: str, outcome: str, now: float) -> Alert | None: ...

    async def expired(self, now: float) -> list[str]: ...

    async def outcome(self, alert_id: str) -> str | None: ...

    async def fire(
        self,
        firings: Sequence[Firing],
        plans: Mapping[str, PlannedAction] | None = None,
        commit_action: Any = None,
    ) -> list[Fired]: ...

    async def fire_synced_later(self, firings: Sequence[Firing]) -> tuple[list[Fired], asyncio.Future[None]]: ...

    def wake_senders(self, fired: Sequence[Fired]) -> None: ...

    async def drain(self, principal: str) -> list[dict[str, Any]]: ...

    async def poll_queue_size(self, principal: str) -> int: ...

    async def subscribe(self, sub: Subscription, now: float) -> None: ...

    async def unsubscribe(self, principal: str) -> bool: ...

    async def subscription(self, principal: str) -> Subscription | None: ...

    async def queued(self, principal: str, *, after_seq: int | None, now: float) -> list[QueuedFrame]: ...

    async def offline_size(self, principal: str, now: float) -> int: ...

    async def mark_delivered(self, principal: str, seqs: Iterable[int]) -> None: ...

    async def sweep(self, now: float) -> int: ...
