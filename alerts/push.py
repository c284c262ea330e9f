"""The push hub: every open notification stream of every principal, and live delivery to them.

A stream registers under its principal as soon as it opens — before or after the
principal subscribes — so pushes reach streams opened first (chartgen drops those).
Each stream has its own bounded queue; :meth:`PushHub.publish` never blocks.  A stream
that falls too far behind is closed rather than silently thinned: the client reconnects
with ``Last-Event-ID`` and the store replays what it missed, so nothing is lost.
Streams report the frames they wrote (:meth:`PushHub.ack`); a background flush marks them
delivered in the store, which is what separates the offline queue from the replay log.

Streams per principal are bounded when the caller asks (``open(principal, limit=N)``, the
HTTP layer's ``max_streams_per_principal``): opening one more closes the principal's oldest
stream (:attr:`PushStream.closed_reason` says why; its writer ends the response).  The oldest
rather than refusing the new one: a stream whose client vanished without a FIN lingers until
a write fails, and refusing would lock the token out of notifications meanwhile, whereas a
live client whose stream was closed simply reconnects with ``Last-Event-ID`` and loses nothing.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)

MarkDelivered = Callable[[str, Iterable[int]], Awaitable[None]]


@dataclass(eq=False, slots=True)
class PushStream:
    """One open stream of a principal: frames (seq, JSON text) to write, in order."""

    principal: str
    maxsize: int = 10_000
    queue: asyncio.Queue[tuple[int, str] | None] = field(init=False)
    closed_reason: str | None = None
    """Why the hub ended this stream ("overflow", "replaced"); None while it is open."""

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue()

    @property
    def overflowed(self) -> bool:
        return self.closed_reason == "overflow"

    def offer(self, seq: int, data: str) -> None:
        if self.closed_reason is not None:
            return
        if self.queue.qsize() >= self.maxsize:
            self.end("overflow")
            return
        self.queue.put_nowait((seq, data))

    def end(self, reason: str) -> None:
        """Tell the writer to end the stream (a None in the queue); the client resumes by Last-Event-ID."""
        if self.closed_reason is None:
            self.closed_reason = reason
            self.queue.put_nowait(None)


class PushHub:
    """Open streams per principal and the delivered-marks not yet written to the store."""

    def __init__(self, mark_delivered: MarkDelivered | None = None, *, stream_queue: int = 10_000) -> None:
        self._streams: dict[str, dict[PushStream, None]] = defaultdict(dict)  # per principal, oldest first
        self._mark = mark_delivered
        self._acks: dict[str, set[int]] = defaultdict(set)
        self._ack_event = asyncio.Event()
        self._stream_queue = stream_queue
        self.published = 0

    def open(self, principal: str, *, limit: int | None = None) -> PushStream:
        """Register a new stream of ``principal``; past ``limit`` open streams the oldest is ended."""
        streams = self._streams[principal]
        if limit is not None:
            while len(streams) >= max(1, limit):
                oldest = next(iter(streams))
                del streams[oldest]
                oldest.end("replaced")
                log.info("push_stream_replaced", principal=principal, limit=limit)
        stream = PushStream(principal, self._stream_queue)
        streams[stream] = None
        log.info("push_stream_opened", principal=principal, streams=len(streams))
        return stream

    def close(self, stream: PushStream) -> None:
        streams = self._streams.get(stream.principal)
        if streams is not None:
            streams.pop(stream, None)
            if not streams:
                del self._streams[stream.principal]
        log.info("push_stream_closed", principal=stream.principal)

    def connected(self, principal: str) -> bool:
        return bool(self._streams.get(principal))

    def principals(self) -> list[str]:
        """The principals with at least one stream open."""
        return list(self._streams)

    def stream_count(self) -> int:
        return sum(len(s) for s in self._streams.values())

    def publish(self, principal: str, seq: int, data: str) -> int:
        """Offer a frame to every open stream of ``principal``; returns how many streams got it."""
        streams = self._streams.get(principal)
        if not streams:
            return 0
        for stream in list(streams):
            stream.offer(seq, data)
        self.published += 1
        return len(streams)

    def ack(self, principal: str, seq: int) -> None:
        """A stream wrote frame ``seq`` (it is delivered; the flush task records it)."""
        self._acks[principal].add(seq)
        self._ack_event.set()

    async def flush(self) -> None:
        """Write pending delivered-marks to the store now."""
        if self._mark is None:
            self._acks.clear()
            return
        pending, self._acks = self._acks, defaultdict(set)
        for principal, seqs in pending.items():
            await self._mark(principal, sorted(seqs))

    async def run_flusher(self, interval_s: float = 0.2) -> None:
        """Background task: coalesce acks and record them every ``interval_s`` (supervised by the daemon)."""
        try:
            while True:
                await self._ack_event.wait()
                self._ack_event.clear()
                await asyncio.sleep(interval_s)  # coalescing window, not synchronisation
                await self.flush()
        finally:
            await self.flush()
