"""The alert service's index on a cluster front: the store itself.

On a single node the alert service hands each alert it sets to the in-process evaluator.  A
cluster front evaluates nothing: the PostgreSQL store announces every alert set or cancelled to
the workers (alerts/pg_changes.py, inside the changing transaction), and the worker that owns the
market indexes it.  :class:`StoredAlerts` is what the service calls instead of an evaluator
(:class:`alerts.service.AlertIndex`): indexing is done by the store's notification, an alert is
armed at the front's clock (it has no exchange stream; hosts keep their clocks by NTP), and the
status it reports is the store's count of armed alerts, refreshed by :meth:`count`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from alerts.models import Alert
from engine import IndicatorRequest


class _NoExchangeClock:
    """A front follows no exchange stream: the service falls back to its own clock."""

    def exchange_time_ms(self, symbol: str) -> int | None:
        return None


class StoredAlerts:
    """The service's index on a front: nothing to index in-process (see the module docstring)."""

    actions = None
    """Alert actions are not built on PostgreSQL (alerts/pg_store.py refuses them)."""

    def __init__(self, count_armed: Callable[[], Awaitable[int]]) -> None:
        self.market = _NoExchangeClock()
        self._count_armed = count_armed
        self.armed = 0
        """Armed alerts in the cluster, as of the last :meth:`count`."""

    def index(self, alert: Alert, request: IndicatorRequest | None = None) -> None:
        """Nothing to do: the store announced the alert to its market's worker."""

    def index_many(self, alerts: Iterable[Alert]) -> None:
        """Nothing to do (the workers read their markets' alerts themselves)."""

    def unindex(self, alert: Alert) -> None:
        """Nothing to do: the store announced the cancellation."""

    async def write_audit(self) -> None:
        """The store writes the audit in the changing transaction."""

    async def count(self) -> None:
        """Refresh :attr:`armed` (a periodic job of the front)."""
        self.armed = await self._count_armed()

    @property
    def active_count(self) -> int:
        return self.armed

    def status(self) -> dict[str, Any]:
        return {"active": self.armed, "fired": 0, "evaluated_by": "the cluster's workers"}
