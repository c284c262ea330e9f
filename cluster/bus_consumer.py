"""Durable pull consumers of the cluster's event bus: :class:`Consumer` and the :class:`Message` it delivers.

Made by :meth:`cluster.bus.Bus.consume` (which creates the consumer on the server); this module
owns fetching, the message's metadata and acknowledgements.  nats-py exceptions are translated
to :mod:`cluster.bus_errors` here as in :mod:`cluster.bus`.  A consumer does not know the bus: it is
handed the bus's connection check (a :data:`ConnectedCheck`) and the ack timeout, so the arrow points
one way, from :mod:`cluster.bus` to here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

import nats.errors
from nats.aio.msg import Msg as NatsMsg
from nats.js import JetStreamContext

from cluster.bus_errors import BusError, translated

MSG_ID_HEADER = "Nats-Msg-Id"
"""JetStream's de-duplication header: a second message with the same id within the window is not stored."""

ConnectedCheck = Callable[[str], None]
"""Raises :class:`~cluster.bus_errors.BusUnavailable` (or :class:`BusError` once closed) unless the bus's
connection is up; its argument says what was being done, for the message."""


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
        self,
        subscription: JetStreamContext.PullSubscription,
        stream: str,
        durable: str,
        batch: int,
        *,
        require_connected: ConnectedCheck,
        ack_timeout_s: float,
    ) -> None:
        self._require_connected = require_connected
        self._ack_timeout_s = ack_timeout_s
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
        self._require_connected(f"fetching from {self.stream}/{self.durable}")
        async with self._fetching:  # one pull request in flight per subscription: they share its inbox
            with translated(f"a fetch from {self.stream}/{self.durable}", max_wait_s):
                try:
                    raw = await self._subscription.fetch(self.batch, timeout=max_wait_s)
                except TimeoutError:
                    raw = []
        if not raw:
            self._require_connected(f"fetching from {self.stream}/{self.durable}")
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
            _ack_timeout_s=self._ack_timeout_s,
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
