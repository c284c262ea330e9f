"""A cluster's scheduled orders, fired by the holder of the order lease (``chartgen leader``).

Schedules are rows in the cluster's PostgreSQL (brokers/schedules/pg_store.py), created and
cancelled at any front.  The leader's :class:`LeaderSchedules` job, every :data:`SYNC_S`, keeps its
APScheduler in step with them while it holds the lease: it adds a job per active schedule it does
not have yet (with a catch-up firing when a time is due or was missed: the single node's misfire
policy, brokers/schedules/service.py), drops the jobs of schedules no longer active, and drops
every job once it stops leading.  A run records the order intent and the schedule's progress in one
transaction (cluster/schedule_runs.py), so a scheduled time is run once even when an old leader and
a new one both fire it.  A new schedule's first run comes at its first scheduled time, or at most
:data:`SYNC_S` later when that time falls in the seconds before the leader saw it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from brokers import ScheduleService

log = structlog.get_logger(__name__)

SYNC_S = 2.0
"""How often the leader reads the active schedules (new ones appear at most this late)."""


class LeaderSchedules:
    """The leader's set of schedule jobs (see the module docstring)."""

    def __init__(self, service: ScheduleService, leading: Callable[[], bool]) -> None:
        self.service = service
        self._leading = leading
        """Whether this process holds the order lease now."""
        self.loaded: set[str] = set()

    async def sync(self) -> None:
        """The periodic job: follow the table while leading, drop everything when not."""
        if not self._leading():
            if self.loaded:
                self.service.unload(sorted(self.loaded))
                log.info("schedules_unloaded", count=len(self.loaded))
                self.loaded.clear()
            return
        rows = await self.service.store.active()
        active = {r.id for r in rows}
        gone = sorted(self.loaded - active)
        if gone:
            self.service.unload(gone)
            self.loaded -= set(gone)
        new = [r for r in rows if r.id not in self.loaded]
        if new:
            self.service.load(new)
            self.loaded |= {r.id for r in new}
            log.info("schedules_loaded", added=len(new), active=len(active))
