"""The cluster's event bus: the connection to NATS JetStream, publishing, consumers and subscriptions.

The bus owns everything the cluster (design.md §11) says to NATS: the four streams and their
limits (:mod:`cluster.bus_streams`), the subject names (:mod:`cluster.bus_subjects`),
publishing with de-duplication, durable pull consumers (made here, fetched in
:mod:`cluster.bus_consumer`) and plain subscriptions (this module).  Nothing outside
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Self

import nats.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription as NatsSubscription

from cluster.bus_consumer import MSG_ID_HEADER, Consumer, Message
from cluster.bus_errors import URL_SETTING, BusError, BusUnavailable, nats_servers, redacted_url, translated
from cluster.bus_streams import BusLimits, StreamSpec, consumer_config, ensure_stream, stream_specs
from cluster.bus_subjects import PLAIN_NAME, check_subject

__all__ = ["Bus", "BusError", "BusStatus", "BusUnavailable", "Consumer", "Message", "Published", "Subscription"]
"""Bus's own API, with the errors its methods raise; streams and subjects are imported from their modules."""

log = structlog.get_logger(__name__)


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
        self.reconnects = 0
        """How many times the connection was re-established: a subscriber compares it with the count it
        last saw to learn that it may have missed messages (see :meth:`subscribe`)."""

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
        bus = cls(NatsClient(), url=url, name=name, limits=limits or BusLimits(), publish_timeout_s=publish_timeout_s)
        await bus.open(url, servers, connect_timeout_s, reconnect_wait_s, ping_interval_s)
        return bus

    async def open(
        self, url: str, servers: list[str], connect_timeout_s: float, reconnect_wait_s: float, ping_interval_s: float
    ) -> None:
        """The connection :meth:`connect` makes (its arguments, checked there; ``url`` as given, unredacted)."""
        client, name = self._client, self.name
        try:
            async with asyncio.timeout(connect_timeout_s):
                # nats-py annotates its seconds as int; it hands them to asyncio.wait_for, where floats work
                await client.connect(
                    servers,
                    name=name,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    closed_cb=self._on_closed,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,  # forever; each attempt bounded by connect_timeout
                    reconnect_time_wait=reconnect_wait_s,  # type: ignore[arg-type]  # seconds: see above
                    connect_timeout=min(connect_timeout_s, 5.0),  # type: ignore[arg-type]  # per attempt; seconds: see above
                    ping_interval=ping_interval_s,  # type: ignore[arg-type]  # seconds: see above
                    max_outstanding_pings=2,
                )
        except TimeoutError as exc:
            self._closing = True
            with contextlib.suppress(Exception):
                await client.close()
            last = f" (last error: {self._last_error!r})" if self._last_error is not None else ""
            raise BusError(
                f"could not connect to NATS at {URL_SETTING}={redacted_url(url)!r} "
                f"within {connect_timeout_s:g} s{last}; "
                "check that nats-server is running there and that the setting names it (nats://HOST:PORT)"
            ) from exc
        except (nats.errors.Error, OSError) as exc:
            self._closing = True
            with contextlib.suppress(Exception):
                await client.close()
            raise BusError(f"could not connect to NATS at {URL_SETTING}={redacted_url(url)!r}: {exc!r}") from exc
        self._status = BusStatus("connected", None, datetime.now(UTC))
        log.info("bus_connected", url=self.url, name=name, server=str(client.connected_server_version))

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
        self.reconnects += 1
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

    async def send(self, subject: str, payload: bytes, *, msg_id: str) -> bool:
        """Fire and forget: hand ``payload`` to the connection for ``subject`` (a stream stores it; no
        acknowledgement is awaited, so nothing says it was stored).  False when not connected (not
        sent: the caller counts it).  For data whose loss is tolerable, such as market data."""
        if not self._client.is_connected:
            return False
        try:
            await self._client.publish(subject, payload, headers={MSG_ID_HEADER: msg_id})
        except nats.errors.Error:  # the reconnect buffer is full, or the connection just closed
            return False
        return True

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
        return Consumer(
            subscription,
            stream,
            durable,
            batch,
            require_connected=self._require_connected,
            ack_timeout_s=self.publish_timeout_s,
        )

    # --- plain subscriptions -----------------------------------------------------------------

    async def subscribe(self, subject_filter: str, handler: Callable[[str, bytes], None]) -> Subscription:
        """Hand ``handler`` (subject, payload) every message published on a subject matching
        ``subject_filter`` while this connection is up, in the order NATS delivers them.

        A plain NATS subscription, not a JetStream consumer: nothing is kept on the server for the
        subscriber and nothing is replayed, so a message published while this process was
        disconnected never arrives.  It suits a subscriber whose messages only say "look again" at a
        source of truth it can re-read: it re-reads after each reconnect (:attr:`reconnects` grew).
        The client renews the subscription on every reconnect.  A handler that raises is logged and
        the next message is delivered as usual."""
        check_subject(subject_filter, wildcards=True)
        self._require_connected(f"subscribing to {subject_filter}")

        async def deliver(raw: NatsMsg) -> None:
            try:
                handler(raw.subject, raw.data)
            except Exception as exc:  # noqa: BLE001 - one bad message must not end the subscription
                log.error("bus_handler_failed", subject=raw.subject, error=repr(exc))

        with translated(f"subscribing to {subject_filter}", self.publish_timeout_s):
            raw_sub = await self._client.subscribe(subject_filter, cb=deliver)
            # the server has the interest; nats-py annotates seconds as int, floats reach asyncio.wait_for
            await self._client.flush(timeout=self.publish_timeout_s)  # type: ignore[arg-type]
        return Subscription(subject_filter, raw_sub)


class Subscription:
    """A plain subscription made by :meth:`Bus.subscribe`; :meth:`close` it."""

    def __init__(self, subject_filter: str, raw: NatsSubscription) -> None:
        self.subject_filter = subject_filter
        self._raw = raw
        self._closed = False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(nats.errors.Error, OSError, ValueError):
            await self._raw.unsubscribe()
