"""The event bus's JetStream streams (design.md §11): subjects, retention and limits, why, and applying them.

Streams (:func:`stream_specs`, built from :class:`BusLimits`; all on file storage so a restarted
nats-server still has them):

- ``CHARTGEN_MARKET`` — ``chartgen.market.bar.>`` and ``chartgen.market.indicator.>``: closed
  bars and indicator updates published by the engine workers.  Limits retention, discard old: the
  stream is a short replay buffer (a front or a worker taking over a market catches up from it),
  never the record of anything — bars are re-fetched from the exchange after a gap — so it keeps
  1 h (``market_max_age_s``), 1 GiB in all and 10,000 messages per subject (one subject per kind,
  symbol and interval).
- ``CHARTGEN_TICKS`` — ``chartgen.market.tick.>``: each market's price, once a second when it
  moved.  Only the newest is worth anything, so the stream keeps one message per subject (a
  last-value cache, as a KV bucket would) and at most ``ticks_max_bytes`` (64 MiB).  In the
  market stream, 10,000 markets' ticks filled 1 GiB in about nine minutes and pushed the bars out.
- ``CHARTGEN_NOTIFY`` — ``chartgen.notify.<principal>``: fired notifications, one subject per
  principal, consumed by the stateless HTTP fronts.  Limits retention, discard old; a
  notification is worth pushing for the push TTL (1 h, the default of ``notify_queue_ttl_s``)
  and no longer, so that is its max age; 10,000 per principal (the most any client keeps,
  ``notify_poll_cap``), so one principal's runaway alert cannot push out another's
  notifications; 256 MiB in all.  The duplicate window is 2 min: a worker that publishes a
  firing again after a lost acknowledgement or a restart uses the same message id (e.g. the
  alert's push sequence number) and the stream stores it once.
- ``CHARTGEN_COMMANDS`` — ``chartgen.cmd.<name>``: commands to every worker ("follow these
  markets", cluster/bus_commands.py).  A change of the followed markets concerns every worker
  (each decides which of them it owns), so every worker reads every command on a subscription of
  its own; a work queue, which hands each command to one consumer, would wake one worker only.
  A command says "look again" at PostgreSQL, the record of the followed markets, and a worker that
  misses one (NATS away) catches up at its next heartbeat, so nothing needs a command kept for
  a late reader: limits retention, discard old, 24 h and 64 MiB — what ``nats stream view
  CHARTGEN_COMMANDS`` shows the operator of the last day's commands.  A commands stream made by an
  older chartgen (work-queue retention, which JetStream cannot change in place) is deleted and made
  again: it held nothing a worker still needs.

The duplicate window (2 min by default) applies to every stream; JetStream requires it not to
exceed a stream's max age, and :class:`BusLimits` checks that.

Applying them: :func:`ensure_stream` (called by :meth:`cluster.bus.Bus.ensure_streams`) creates
each stream, or updates it to the configured limits when it exists with others; creating a
stream that exists with the same configuration succeeds, so several processes may call it at
once.  Two processes configured with different limits leave the last writer's; retention and
storage cannot change in place (JetStream refuses), which is reported as a
:class:`~cluster.bus_errors.BusError` naming the stream.

The subject names are built in :mod:`cluster.bus_subjects`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Literal, Self, TypeVar

import nats.js.errors
from nats.js import JetStreamContext
from nats.js import api as js_api
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cluster.bus_errors import BusError, translated
from cluster.bus_subjects import SUBJECT_ROOT

MiB = 1 << 20
GiB = 1 << 30

STREAM_EXISTS_DIFFERENTLY = 10058
"""JetStream's error code for "stream name already in use with a different configuration"."""

SUBJECTS_OVERLAP = 10065
"""JetStream's error code for "subjects overlap with an existing stream" — also what nats-server 2.9 answers
the loser of two concurrent creates of the same stream."""


class BusLimits(BaseModel):
    """The streams' limits (module docstring: why each default).  Sizes in bytes, ages in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    market_max_age_s: float = Field(default=3600.0, gt=0, le=7 * 86400)
    market_max_bytes: int = Field(default=1 * GiB, ge=1 * MiB)
    market_max_msgs_per_subject: int = Field(default=10_000, ge=1)
    notify_max_age_s: float = Field(default=3600.0, gt=0, le=30 * 86400)
    notify_max_bytes: int = Field(default=256 * MiB, ge=1 * MiB)
    notify_max_msgs_per_subject: int = Field(default=10_000, ge=1)
    ticks_max_bytes: int = Field(default=64 * MiB, ge=1 * MiB)
    commands_max_age_s: float = Field(default=86400.0, gt=0, le=30 * 86400)
    commands_max_bytes: int = Field(default=64 * MiB, ge=1 * MiB)
    duplicate_window_s: float = Field(default=120.0, gt=0, le=86400)

    @model_validator(mode="after")
    def _window_within_ages(self) -> Self:
        for name in ("market_max_age_s", "notify_max_age_s", "commands_max_age_s"):
            if self.duplicate_window_s > getattr(self, name):
                raise ValueError(
                    f"duplicate_window_s ({self.duplicate_window_s}) must not exceed {name} ({getattr(self, name)}): "
                    "JetStream refuses a duplicate window longer than the stream's max age"
                )
        return self


Retention = Literal["limits", "workqueue", "interest"]
Discard = Literal["old", "new"]
Storage = Literal["file", "memory"]
_Word = TypeVar("_Word", bound=str)
# nats-py's policies are str enums, so these also find the plain strings a server's config may carry
_RETENTIONS: dict[str, Retention] = {
    js_api.RetentionPolicy.LIMITS: "limits",
    js_api.RetentionPolicy.WORK_QUEUE: "workqueue",
    js_api.RetentionPolicy.INTEREST: "interest",
}
_DISCARDS: dict[str, Discard] = {js_api.DiscardPolicy.OLD: "old", js_api.DiscardPolicy.NEW: "new"}
_STORAGES: dict[str, Storage] = {js_api.StorageType.FILE: "file", js_api.StorageType.MEMORY: "memory"}


@dataclass(frozen=True)
class StreamSpec:
    """One JetStream stream as chartgen configures it (and as :meth:`cluster.bus.Bus.stream_spec` reads it back)."""

    name: str
    subjects: tuple[str, ...]
    retention: Retention
    discard: Discard
    max_age_s: float
    max_bytes: int
    max_msgs_per_subject: int
    """-1: no per-subject limit."""
    duplicate_window_s: float
    storage: Storage = "file"
    description: str = ""
    replaceable: bool = field(default=False, compare=False)
    """Its messages are worth nothing once published (wake-ups): made with another retention or
    storage, the stream is deleted and made again instead of refused."""

    def config(self) -> js_api.StreamConfig:
        return js_api.StreamConfig(
            name=self.name,
            description=self.description or None,
            subjects=list(self.subjects),
            retention=js_api.RetentionPolicy(self.retention),
            discard=js_api.DiscardPolicy(self.discard),
            max_age=self.max_age_s,
            max_bytes=self.max_bytes,
            max_msgs=-1,
            max_msgs_per_subject=self.max_msgs_per_subject,
            duplicate_window=self.duplicate_window_s,
            storage=js_api.StorageType(self.storage),
            num_replicas=1,
        )

    @classmethod
    def from_config(cls, config: js_api.StreamConfig) -> StreamSpec:
        def known(choices: dict[str, _Word], value: str | None, what: str) -> _Word:
            if value not in choices:
                raise BusError(f"stream {config.name!r} has a {what} chartgen does not know: {value!r}")
            return choices[value]

        return cls(
            name=config.name or "",
            subjects=tuple(config.subjects or ()),
            retention=known(_RETENTIONS, config.retention, "retention"),
            discard=known(_DISCARDS, config.discard, "discard policy"),
            max_age_s=float(config.max_age or 0.0),
            max_bytes=int(config.max_bytes if config.max_bytes is not None else -1),
            max_msgs_per_subject=int(config.max_msgs_per_subject),
            duplicate_window_s=float(config.duplicate_window or 0.0),
            storage=known(_STORAGES, config.storage, "storage type"),
            description=config.description or "",
        )


MARKET_STREAM = "CHARTGEN_MARKET"
TICKS_STREAM = "CHARTGEN_TICKS"
NOTIFY_STREAM = "CHARTGEN_NOTIFY"
COMMANDS_STREAM = "CHARTGEN_COMMANDS"


def stream_specs(limits: BusLimits) -> tuple[StreamSpec, ...]:
    """The four streams with ``limits`` applied, in the order they are applied (the market stream gives
    up the ticks' subjects, which a stream made by an older chartgen held, before the ticks stream
    takes them)."""
    return (
        StreamSpec(
            name=MARKET_STREAM,
            subjects=(f"{SUBJECT_ROOT}.market.bar.>", f"{SUBJECT_ROOT}.market.indicator.>"),
            retention="limits",
            discard="old",
            max_age_s=limits.market_max_age_s,
            max_bytes=limits.market_max_bytes,
            max_msgs_per_subject=limits.market_max_msgs_per_subject,
            duplicate_window_s=limits.duplicate_window_s,
            description="chartgen closed bars and indicator updates (a short replay buffer)",
        ),
        StreamSpec(
            name=TICKS_STREAM,
            subjects=(f"{SUBJECT_ROOT}.market.tick.>",),
            retention="limits",
            discard="old",
            max_age_s=limits.market_max_age_s,
            max_bytes=limits.ticks_max_bytes,
            max_msgs_per_subject=1,
            duplicate_window_s=limits.duplicate_window_s,
            description="chartgen prices, the newest per market",
        ),
        StreamSpec(
            name=NOTIFY_STREAM,
            subjects=(f"{SUBJECT_ROOT}.notify.>",),
            retention="limits",
            discard="old",
            max_age_s=limits.notify_max_age_s,
            max_bytes=limits.notify_max_bytes,
            max_msgs_per_subject=limits.notify_max_msgs_per_subject,
            duplicate_window_s=limits.duplicate_window_s,
            description="chartgen fired notifications, one subject per principal",
        ),
        StreamSpec(
            name=COMMANDS_STREAM,
            subjects=(f"{SUBJECT_ROOT}.cmd.>",),
            retention="limits",
            discard="old",
            max_age_s=limits.commands_max_age_s,
            max_bytes=limits.commands_max_bytes,
            max_msgs_per_subject=-1,
            duplicate_window_s=limits.duplicate_window_s,
            description="chartgen commands to every worker (wake-ups: PostgreSQL is the record)",
            replaceable=True,
        ),
    )


async def ensure_stream(js: JetStreamContext, spec: StreamSpec, timeout_s: float) -> StreamSpec | None:
    """Create stream ``spec`` or update it to ``spec`` (module docstring); the configuration it replaced, if any.

    :class:`~cluster.bus_errors.BusError` if another stream takes its subjects or it exists with a
    retention or storage JetStream cannot change in place."""
    config = spec.config()
    with translated(f"creating stream {spec.name}", timeout_s):
        try:
            await js.add_stream(config)
            return None
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code not in (STREAM_EXISTS_DIFFERENTLY, SUBJECTS_OVERLAP):
                raise
            overlap = exc.err_code == SUBJECTS_OVERLAP
        try:
            current = StreamSpec.from_config((await js.stream_info(spec.name)).config)
        except nats.js.errors.NotFoundError as exc:
            if not overlap:
                raise
            raise BusError(
                f"another stream on the NATS server already takes {', '.join(spec.subjects)}: "
                f"chartgen needs them for {spec.name}; remove or narrow that stream"
            ) from exc
        if current == spec:
            return None  # another process updated it meanwhile
        if (current.retention, current.storage) != (spec.retention, spec.storage):
            if spec.replaceable:  # another process starting with this one may be replacing it too
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await js.delete_stream(spec.name)
                try:
                    await js.add_stream(config)
                except nats.js.errors.BadRequestError as exc:
                    if exc.err_code not in (STREAM_EXISTS_DIFFERENTLY, SUBJECTS_OVERLAP):
                        raise
                return current
            raise BusError(
                f"stream {spec.name} exists with retention {current.retention} and storage {current.storage}, "
                f"which JetStream cannot change in place; chartgen needs {spec.retention} / {spec.storage}: "
                f"remove the stream (nats stream rm {spec.name}) and start again"
            )
        await js.update_stream(config)
        return current


def consumer_config(
    durable: str, subject_filter: str, *, ack_wait_s: float, max_ack_pending: int
) -> js_api.ConsumerConfig:
    """A durable pull consumer as chartgen configures one: from the stream's first message, explicit acks."""
    return js_api.ConsumerConfig(
        name=durable,
        durable_name=durable,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        filter_subject=subject_filter,
        max_ack_pending=max_ack_pending,
    )
