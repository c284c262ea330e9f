"""GET /mcp and GET /sse: a principal's notification stream as Server-Sent Events.

The stream is chartgen's (contract §1.4: ``: connected`` first, ``event: message`` frames,
``: keepalive`` every 30 s, ``Mcp-Session-Id`` echoed or minted) with what chartgen lacks:
the stream registers with the push hub before anything else, so it receives pushes even
when the principal subscribes later; every frame carries an SSE ``id:`` (the push
sequence number), and a reconnect with ``Last-Event-ID`` replays every frame after it that
is still within the queue's TTL and cap.  Without ``Last-Event-ID`` a new stream first
receives the offline queue (frames no stream has delivered yet), in order.

At most ``max_streams`` streams per principal (``max_streams_per_principal``): a new one past
it closes the principal's oldest, which ends with the comment ``: closed: …`` naming the
setting (alerts/push.py says why the oldest rather than refusing the new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import structlog
from starlette.types import Receive, Scope, Send

from alerts import AlertRepository, PushHub

log = structlog.get_logger(__name__)


def _last_event_id(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"last-event-id":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 19 else None
    return None


def _take_queued(queue: asyncio.Queue[tuple[int, str] | None]) -> list[tuple[int, str] | None]:
    """Every item already in ``queue``, up to and including an end marker (None)."""
    items: list[tuple[int, str] | None] = []
    while not queue.empty():
        item = queue.get_nowait()
        items.append(item)
        if item is None:
            break
    return items


def _frame(seq: int, data: str) -> bytes:
    return f"id: {seq}\nevent: message\ndata: {data}\n\n".encode()


async def serve_push_stream(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    principal: str,
    hub: PushHub | None,
    store: AlertRepository | None,
    session_id: str | None,
    keepalive_s: float = 30.0,
    max_streams: int | None = None,
) -> None:
    """Serve one SSE stream until the client disconnects (or falls too far behind, or is replaced)."""
    stream = hub.open(principal, limit=max_streams) if hub is not None else None
    disconnected = asyncio.Event()

    async def watch_disconnect() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
                return

    watcher = asyncio.create_task(watch_disconnect(), name="sse-disconnect")
    gone = asyncio.ensure_future(disconnected.wait())
    try:
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"connection", b"keep-alive"),
            (b"x-accel-buffering", b"no"),
            (b"mcp-session-id", (session_id or str(uuid.uuid4())).encode("latin-1")),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b": connected\n\n", "more_body": True})
        last = _last_event_id(scope) or 0
        if stream is not None and store is not None and hub is not None:
            backlog = await store.queued(principal, after_seq=_last_event_id(scope), now=time.time())
            for frame in backlog:
                if frame.seq <= last and _last_event_id(scope) is not None:
                    continue
                await send({"type": "http.response.body", "body": _frame(frame.seq, frame.data), "more_body": True})
                hub.ack(principal, frame.seq)
                last = max(last, frame.seq)
        while not disconnected.is_set():
            if stream is not None and not stream.queue.empty():
                items = _take_queued(stream.queue)  # frames already waiting: no wait, one write
            else:
                getter: asyncio.Future[tuple[int, str] | None] = (
                    asyncio.get_running_loop().create_future()
                    if stream is None
                    else asyncio.ensure_future(stream.queue.get())
                )
                waiting: set[asyncio.Future[Any]] = {getter, gone}  # two result types: a frame, a disconnect
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=keepalive_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if getter not in done:
                    getter.cancel()
                    if disconnected.is_set():
                        break
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
                    continue
                items = [getter.result()]
                if stream is not None and items[0] is not None:
                    items += _take_queued(stream.queue)
            frames: list[bytes] = []
            written: list[int] = []
            ended = False
            for item in items:
                if item is None:
                    ended = True
                    break
                seq, data = item
                if seq <= last:
                    continue
                frames.append(_frame(seq, data))
                written.append(seq)
                last = seq
            if frames:
                await send({"type": "http.response.body", "body": b"".join(frames), "more_body": True})
                if hub is not None:
                    for seq in written:
                        hub.ack(principal, seq)
            if ended:
                assert stream is not None
                if stream.closed_reason == "replaced":
                    note = (
                        f": closed: this token opened more than max_streams_per_principal ({max_streams}) "
                        "notification streams; the oldest is closed. Reconnect with Last-Event-ID to resume.\n\n"
                    )
                    await send({"type": "http.response.body", "body": note.encode(), "more_body": True})
                else:
                    log.warning("push_stream_overflow", principal=principal)
                break
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        gone.cancel()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        if stream is not None and hub is not None:
            hub.close(stream)
