"""The cluster's event bus: the connection to NATS JetStream, publishing and durable pull consumers.

The bus owns everything the cluster (design.md §11) says to NATS: the three streams and their
limits (:mod:`cluster.bus_streams`), the subject names (:mod:`cluster.bus_subjects`),
publishing with de-duplication, and durable pull consumers (this module).  Nothing outside
these ``cluster/bus*.py`` modules imports nats-py; every nats-py exception is turned into
:class:`BusError` (configuration, refusals) or :class:`BusUnavailable` (NATS cannot be reached
or did not answer in time) before it leaves a public method (:mod:`cluster.bus_errors`, which
also checks the ``nats_url`` setting).

:meth:`Bus.ensure_streams` creates or updates the streams (:mod:`cluster.bus_streams` says how).

Connection.  :meth:`Bus.connect` gives up with :class:`BusError` (naming the ``nats_url``
setting) if the first connection is not made within ``connect_timeout_s``; once connected the
client reconnects forever, one attempt every ``reconnect_wait_s``.  While it is disconnected,
:meth:`Bus.publish` raises :class:`BusUnavailable` at once (the client's reconnect buffer is
never used, so a refused publish is not sent later behind the caller's back) and
:meth:`Bus.status` says ``degraded`` with the reason and since when.  A publish that was sent
but not acknowledged within ``publish_timeout_s`` also raises :class:`BusUnavailable`; it may
still have been stored, so publishing it again with the same ``msg_id`` is the safe retry
(within the duplicate window the stream keeps one copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Self

import nats.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.js import JetStreamContext

from cluster.bus_errors import URL_SETTING, BusError, BusUnavailable, nats_servers, redacted_url, translated
from cluster.bus_streams import BusLimits, StreamSpec, consumer_config, ensure_stream, stream_specs
from cluster.bus_subjects import PLAIN_NAME, check_subject

__all__ = ["Bus", "BusError", "BusStatus", "BusUnavailable", "Consumer", "Message", "Published"]
"""Bus's own API, with the errors its methods raise; streams and subjects are imported from their modules."""

log = structlog.get_logger(__name__)

MSG_ID_HEADER = "Nats-Msg-Id"
"""JetStream's de-duplication header: a second message with the same id within the window is not stored."""


# --- status ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BusStatus:
    """What readiness reports: connected, or degraded with the reason and since when."""

    state: Literal["connected", "degraded"]
    reason: str | None
    since: datetime
    """UTC time of the last change of state."""

    @property
    def connected(self) -> bool:
        return self.state == "connected"


@dataclass(frozen=True)
class Published:
    """A stored (or recognised duplicate) message: its stream and sequence there."""

    stream: str
    seq: int
    duplicate: bool


# --- consuming ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """A message delivered by a durable consumer; :meth:`ack` it once handled, or it comes back after ack_wait."""

    subject: str
    data: bytes
    msg_id: str | None
    stream: str
    stream_seq: int
    deliveries: int
    """How many times the consumer has delivered it (1 the first time)."""
    _raw: NatsMsg = field(repr=False, compare=False)
    _ack_timeout_s: float = field(repr=False, compare=False)

    async def ack(self) -> None:
        """Acknowledge and wait for JetStream to confirm it: from then on it is not delivered again
        (unless its ack_wait had already run out and it went to another fetch meanwhile)."""
        with translated(f"the ack of {self.stream} #{self.stream_seq}", self._ack_timeout_s):
            await self._raw.ack_sync(timeout=self._ack_timeout_s)


class Consumer:
    """A durable pull consumer: :meth:`fetch` batches, ack each message.  Made by :meth:`Bus.consume`."""

    def __init__(
        self, bus: Bus, subscription: JetStreamContext.PullSubscription, stream: str, durable: str, batch: int
    ) -> None:
        self._bus = bus
        self._subscription = subscription
        self.stream = stream
        self.durable = durable
        self.batch = batch
        self._fetching = asyncio.Lock()
        self._closed = False

    async def fetch(self, max_wait_s: float = 5.0) -> list[Message]:
        """Up to ``batch`` messages, waiting at most ``max_wait_s`` for the first; ``[]`` if none came.

        :class:`BusUnavailable` while NATS is unreachable (or when it became so during the wait)."""
        if max_wait_s <= 0:
            raise ValueError("max_wait_s must be positive")
        if self._closed:
            raise BusError(f"consumer {self.stream}/{self.durable} is closed")
        self._bus._require_connected(f"fetching from {self.stream}/{self.durable}")
        async with self._fetching:  # one pull request in flight per subscription: they share its inbox
            with translated(f"a fetch from {self.stream}/{self.durable}", max_wait_s):
                try:
                    raw = await self._subscription.fetch(self.batch, timeout=max_wait_s)
                except TimeoutError:
                    raw = []
        if not raw:
            self._bus._require_connected(f"fetching from {self.stream}/{self.durable}")
        return [self._message(m) for m in raw]

    def _message(self, raw: NatsMsg) -> Message:
        meta = raw.metadata
        return Message(
            subject=raw.subject,
            data=raw.data,
            msg_id=(raw.headers or {}).get(MSG_ID_HEADER),
            stream=meta.stream,
            stream_seq=meta.sequence.stream,
            deliveries=meta.num_delivered,
            _raw=raw,
            _ack_timeout_s=self._bus.publish_timeout_s,
        )

    async def close(self) -> None:
        """Stop receiving (the durable consumer stays on the server; unacked messages go to the next taker)."""
        if self._closed:
            return
        self._closed = True
        # the connection may already be closed or reconnecting: then the server drops the interest itself
        with contextlib.suppress(nats.errors.Error, OSError, ValueError):
            await self._subscription.unsubscribe()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- the bus -----------------------------------------------------------------------------------


class Bus:
    """A connection to NATS JetStream for one process.  Make it with :meth:`connect`; :meth:`close` it."""

    def __init__(self, client: NatsClient, *, url: str, name: str, limits: BusLimits, publish_timeout_s: float) -> None:
        self._client = client
        self._js = client.jetstream(timeout=publish_timeout_s)
        self.url = redacted_url(url)
        self.name = name
        self.limits = limits
        self.streams = stream_specs(limits)
        self.publish_timeout_s = publish_timeout_s
        self._closing = False
        self._last_error: Exception | None = None
        self._status = BusStatus("connected", None, datetime.now(UTC))

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        name: str,
        limits: BusLimits | None = None,
        connect_timeout_s: float = 10.0,
        publish_timeout_s: float = 5.0,
        reconnect_wait_s: float = 1.0,
        ping_interval_s: float = 10.0,
    ) -> Bus:
        """Connect to ``url`` (the ``nats_url`` setting; several servers comma-separated) as client ``name``.

        :class:`BusError` naming ``nats_url`` if the URL is malformed or no connection is made within
        ``connect_timeout_s``.  Afterwards the client reconnects forever, every ``reconnect_wait_s``;
        a connection silent for about ``2 * ping_interval_s`` counts as lost.  ``publish_timeout_s``
        bounds every request to JetStream: publishes, acks, stream and consumer management."""
        for what, value in (
            ("connect_timeout_s", connect_timeout_s),
            ("publish_timeout_s", publish_timeout_s),
            ("reconnect_wait_s", reconnect_wait_s),
            ("ping_interval_s", ping_interval_s),
        ):
            if not value > 0:
                raise ValueError(f"{what} must be positive")
        servers = nats_servers(url)
        client = NatsClient()
        bus = cls(client, url=url, name=name, limits=limits or BusLimits(), publish_timeout_s=publish_timeout_s)
        try:
            async with asyncio.timeout(connect_timeout_s):
                await client.connect(
                    servers,
                    name=name,
                    error_cb=bus._on_error,
                    disconnected_cb=bus._on_disconnected,
                    reconnected_cb=bus._on_reconnected,
                    closed_cb=bus._on_closed,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,  # forever; each attempt bounded by connect_timeout
                    reconnect_time_wait=reconnect_wait_s,  # type: ignore[arg-type]  # a float works
                    connect_timeout=min(connect_timeout_s, 5.0),  # type: ignore[arg-type]  # per attempt
                    ping_interval=ping_interval_s,  # type: ignore[arg-type]
                    max_outstanding_pings=2,
                )
        except TimeoutError as exc:
            bus._closing = True
            with contextlib.suppress(Exception):
                await client.close()
            last = f" (last error: {bus._last_error!r})" if bus._last_error is not None else ""
            raise BusError(
                f"could not connect to NATS at {URL_SETTING}={redacted_url(url)!r} "
                f"within {connect_timeout_s:g} s{last}; "
                "check that nats-server is running there and that the setting names it (nats://HOST:PORT)"
            ) from exc
        except (nats.errors.Error, OSError) as exc:
            bus._closing = True
            with contextlib.suppress(Exception):
                await client.close()
            raise BusError(f"could not connect to NATS at {URL_SETTING}={redacted_url(url)!r}: {exc!r}") from exc
        bus._status = BusStatus("connected", None, datetime.now(UTC))
        log.info("bus_connected", url=bus.url, name=name, server=str(client.connected_server_version))
        return bus

    async def close(self) -> None:
        """Close the connection (pending acknowledgements are flushed first).  Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._client.close()
        self._set_status("degraded", "closed")
        log.info("bus_closed", url=self.url, name=self.name)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- state -------------------------------------------------------------------------------

    def status(self) -> BusStatus:
        """``connected``, or ``degraded`` with why and since when (for /readyz)."""
        return self._status

    def _set_status(self, state: Literal["connected", "degraded"], reason: str | None) -> None:
        if self._status.state != state or self._status.reason != reason:
            self._status = BusStatus(state, reason, datetime.now(UTC))

    def _require_connected(self, doing: str) -> None:
        if self._closing:
            raise BusError(f"the bus is closed ({doing})")
        if not self._client.is_connected:
            reason = self._status.reason or "not connected"
            raise BusUnavailable(f"NATS at {self.url} is unavailable ({doing}): {reason}")

    async def _on_disconnected(self) -> None:
        if self._closing:
            return
        self._set_status("degraded", f"disconnected from NATS at {self.url}; reconnecting")
        log.warning("bus_disconnected", url=self.url, name=self.name)

    async def _on_reconnected(self) -> None:
        self._set_status("connected", None)
        log.info("bus_reconnected", url=self.url, name=self.name)

    async def _on_closed(self) -> None:
        if not self._closing:
            self._set_status("degraded", "the NATS connection closed")
            log.error("bus_connection_closed", url=self.url, name=self.name)

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = exc
        if self._client.is_connected:
            log.warning("bus_error", url=self.url, name=self.name, error=repr(exc))
        else:  # each failed reconnect attempt: once per reconnect_wait_s while NATS is away
            log.debug("bus_reconnect_failed", url=self.url, name=self.name, error=repr(exc))

    # --- streams -----------------------------------------------------------------------------

    async def ensure_streams(self) -> None:
        """Create the streams, or update them to the configured limits.  Idempotent; safe concurrently.

        How, and what it refuses: :func:`cluster.bus_streams.ensure_stream`."""
        for spec in self.streams:
            self._require_connected(f"creating stream {spec.name}")
            was = await ensure_stream(self._js, spec, self.publish_timeout_s)
            if was is not None:
                log.info("bus_stream_updated", stream=spec.name, was=was, now=spec)

    async def stream_spec(self, name: str) -> StreamSpec:
        """The server's configuration of stream ``name`` (to compare with :attr:`streams`)."""
        self._require_connected(f"reading stream {name}")
        with translated(f"reading stream {name}", self.publish_timeout_s):
            return StreamSpec.from_config((await self._js.stream_info(name)).config)

    async def stream_messages(self, name: str) -> int:
        """How many messages stream ``name`` holds now."""
        self._require_connected(f"reading stream {name}")
        with translated(f"reading stream {name}", self.publish_timeout_s):
            return int((await self._js.stream_info(name)).state.messages)

    # --- publishing --------------------------------------------------------------------------

    async def publish(self, subject: str, payload: bytes, *, msg_id: str) -> Published:
        """Store ``payload`` on ``subject``; ``msg_id`` de-duplicates within the duplicate window.

        :class:`BusUnavailable` if NATS is unreachable or does not acknowledge within
        ``publish_timeout_s`` (then it may still have been stored: retry with the same ``msg_id``);
        :class:`BusError` if JetStream refuses it (no stream for the subject, a full work queue)."""
        check_subject(subject, wildcards=False)
        if not msg_id or re.search(r"[\r\n]", msg_id):
            raise ValueError("msg_id must be a non-empty single-line string")
        self._require_connected(f"publishing to {subject}")
        try:
            with translated(f"the publish to {subject}", self.publish_timeout_s):
                ack = await self._js.publish(
                    subject, payload, timeout=self.publish_timeout_s, headers={MSG_ID_HEADER: msg_id}
                )
        except BusUnavailable as exc:
            if self._client.is_connected:  # sent, but JetStream did not answer: a stalled server or stream
                self._set_status("degraded", str(exc))
                log.warning("bus_publish_unacknowledged", subject=subject, msg_id=msg_id, error=str(exc))
            raise
        if not self._status.connected and self._client.is_connected:
            self._set_status("connected", None)
        return Published(stream=ack.stream, seq=ack.seq, duplicate=bool(ack.duplicate))

    # --- consuming ---------------------------------------------------------------------------

    async def consume(
        self,
        stream: str,
        durable: str,
        subject_filter: str,
        *,
        batch: int = 64,
        ack_wait_s: float = 30.0,
        max_ack_pending: int = 1000,
    ) -> Consumer:
        """Create (or update) the durable pull consumer ``durable`` on ``stream`` and bind to it.

        Several processes consuming the same durable share its messages; a message not acked within
        ``ack_wait_s`` is delivered again; after an ack it never is.  The durable starts at the
        stream's first message and remembers its position on the server."""
        if not PLAIN_NAME.fullmatch(durable):
            raise ValueError(f"durable name must be 1-64 of [A-Za-z0-9_-], not {durable!r}")
        if stream not in {s.name for s in self.streams}:
            raise ValueError(f"unknown stream {stream!r}: one of {', '.join(s.name for s in self.streams)}")
        check_subject(subject_filter, wildcards=True)
        if batch < 1 or ack_wait_s <= 0 or max_ack_pending < 1:
            raise ValueError("batch and max_ack_pending must be at least 1 and ack_wait_s positive")
        self._require_connected(f"creating consumer {stream}/{durable}")
        config = consumer_config(durable, subject_filter, ack_wait_s=ack_wait_s, max_ack_pending=max_ack_pending)
        with translated(f"creating consumer {stream}/{durable}", self.publish_timeout_s):
            await self._js.add_consumer(stream, config)
            subscription = await self._js.pull_subscribe_bind(durable=durable, stream=stream)
        return Consumer(self, subscription, stream, durable, batch)
