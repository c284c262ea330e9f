"""Commands to the workers over NATS (``bus = "nats"``): what a command is, how it travels, how a
worker reads it.

The one command today is a change of the markets the operator has the cluster follow
(``chartgen cluster follow | unfollow``, cluster/followed.py).  The change is written to PostgreSQL
first — ``cluster_followed`` stays the record — and then :func:`send_command` publishes a
:class:`Command` on ``chartgen.cmd.<name>`` (``follow`` or ``unfollow``) of the
``CHARTGEN_COMMANDS`` stream (cluster/bus_streams.py).  Every worker reads every command on a
:class:`CommandSubscription` and runs its heartbeat at once (daemon/worker/bus_commands.py): the owner
of a newly followed market takes it now instead of at its next heartbeat, and an unfollowed market
is dropped now.

A command is a wake-up, not the change itself: a worker acts on what it reads from PostgreSQL,
never on the command's list of markets (which is there for the log and the operator).  So a command
lost — NATS away, a worker restarting — delays a change by one heartbeat and loses nothing, and a
command delivered twice costs one heartbeat more.  The message id (the command's name, sender and
send time) makes a publish repeated after a lost acknowledgement one stored message.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cluster.bus import Bus, Published, Subscription
from cluster.bus_subjects import SUBJECT_ROOT, command_subject

log = structlog.get_logger(__name__)

COMMANDS_FILTER = f"{SUBJECT_ROOT}.cmd.>"
MAX_MARKETS_LISTED = 1000
"""A command names at most this many markets (the log's and the operator's view; workers re-read them)."""

CommandName = Literal["follow", "unfollow"]


class Command(BaseModel):
    """One command as published (JSON)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: CommandName
    markets: tuple[str, ...] = Field(max_length=MAX_MARKETS_LISTED)
    """``"SYMBOL interval"`` pairs the change named (at most :data:`MAX_MARKETS_LISTED`)."""
    by: str = Field(min_length=1, max_length=200)
    """Who sent it (``cli-<host>-<pid>`` for ``chartgen cluster follow``)."""
    sent_ms: int = Field(ge=0)

    @classmethod
    def of(cls, name: CommandName, markets: Sequence[tuple[str, str]], by: str) -> Command:
        listed = tuple(f"{symbol} {interval}" for symbol, interval in markets)[:MAX_MARKETS_LISTED]
        return cls(name=name, markets=listed, by=by, sent_ms=int(time.time() * 1000))

    @property
    def msg_id(self) -> str:
        digest = hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]
        return f"cmd-{self.name}-{self.sent_ms}-{digest}"


async def send_command(bus: Bus, command: Command) -> Published:
    """Publish ``command`` and wait for JetStream's acknowledgement.  Raises what
    :meth:`cluster.bus.Bus.publish` raises (:class:`~cluster.bus_errors.BusError`)."""
    return await bus.publish(command_subject(command.name), command.model_dump_json().encode(), msg_id=command.msg_id)


def parse_command(subject: str, data: bytes) -> Command | None:
    """The command published on ``subject``; None for a message that is not one (logged)."""
    try:
        command = Command.model_validate_json(data)
    except ValidationError as exc:
        log.warning("bus_command_invalid", subject=subject, error=str(exc).splitlines()[0][:200])
        return None
    if subject != command_subject(command.name):
        log.warning("bus_command_invalid", subject=subject, error=f"a {command.name} command on another subject")
        return None
    return command


class CommandSubscription:
    """Every command published while this connection is up, handed to ``on_command`` in order.

    A plain subscription (:meth:`cluster.bus.Bus.subscribe`): nothing is kept on the server for a
    worker, so one that stops leaves nothing behind; what is published while it is disconnected
    never arrives, which the next heartbeat covers (module docstring)."""

    def __init__(self, bus: Bus, on_command: Callable[[Command], None]) -> None:
        self.bus = bus
        self._on_command = on_command
        self._subscription: Subscription | None = None
        self.received = 0
        self.invalid = 0

    def _deliver(self, subject: str, data: bytes) -> None:
        command = parse_command(subject, data)
        if command is None:
            self.invalid += 1
            return
        self.received += 1
        self._on_command(command)

    async def open(self) -> None:
        """Subscribe (:class:`~cluster.bus_errors.BusError` while NATS is away)."""
        if self._subscription is None:
            self._subscription = await self.bus.subscribe(COMMANDS_FILTER, self._deliver)

    @property
    def subscribed(self) -> bool:
        return self._subscription is not None and self.bus.status().connected

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()
            self._subscription = None
