"""A worker's commands over NATS (``bus = "nats"``; cluster/bus_commands.py): each command runs the
worker's heartbeat job now, off its schedule, so a market the operator just followed is taken by its
owner — and one unfollowed is dropped — without waiting up to ``cluster_heartbeat_s``.

The heartbeat reads the followed markets from PostgreSQL; the command only says when.  It runs on the
daemon's APScheduler (:meth:`daemon.scheduler.DaemonScheduler.run_soon`), so it never overlaps a
scheduled heartbeat, and a command arriving during a heartbeat that may have read the markets
before the change gets one more heartbeat right after it.  Commands coming together cost one
heartbeat each at most (the scheduler coalesces those asked for during a run into one).
"""

from __future__ import annotations

from typing import Any

import structlog

from cluster import Bus, Command, CommandSubscription
from daemon.scheduler import DaemonScheduler

log = structlog.get_logger(__name__)

HEARTBEAT_JOB = "worker-heartbeat"


class WorkerCommands:
    """The worker's command subscription and what it did with the commands (/readyz, /metrics)."""

    def __init__(self, bus: Bus, scheduler: DaemonScheduler, job: str = HEARTBEAT_JOB) -> None:
        self.scheduler = scheduler
        self.job = job
        self.subscription = CommandSubscription(bus, self._on_command)
        self.last: Command | None = None

    def _on_command(self, command: Command) -> None:
        self.last = command
        log.info(
            "worker_command",
            name=command.name,
            markets=len(command.markets),
            first=list(command.markets[:5]),
            by=command.by,
        )
        self.scheduler.run_soon(self.job)

    async def open(self) -> None:
        await self.subscription.open()

    async def close(self) -> None:
        await self.subscription.close()

    def status(self) -> dict[str, Any]:
        jobs = {j["name"]: j for j in self.scheduler.status()["jobs"]}
        heartbeat = jobs.get(self.job, {})
        last = self.last
        return {
            "commands_received": self.subscription.received,
            "commands_invalid": self.subscription.invalid,
            "commands_subscribed": self.subscription.subscribed,
            "last_command": None
            if last is None
            else {"name": last.name, "markets": list(last.markets[:5]), "by": last.by, "sent_ms": last.sent_ms},
            "heartbeat_runs": heartbeat.get("runs", 0),
            "heartbeats_requested": heartbeat.get("requested", 0),
        }
