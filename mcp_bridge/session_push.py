"""Push notifications on an MCP session (stdio): frames become ``notifications/alert_triggered``.

A stdio session is one client with the principal ``stdio``.  The first request on a
session attaches it: a forwarder task opens a push stream for the principal, sends the
offline queue (undelivered frames, in order), then every live frame, each as a JSON-RPC
notification on the session's outbound channel, and records them as delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
import structlog

from alerts import AlertRepository, PushHub

log = structlog.get_logger(__name__)


def _outbound(ctx: Any) -> Any:
    session = getattr(ctx, "session", None)
    connection = getattr(session, "_connection", None)
    return getattr(connection, "outbound", None)


class SessionPush:
    """Forwarders of push frames onto SDK sessions, one per attached session."""

    def __init__(self, hub: PushHub, store: AlertRepository) -> None:
        self.hub = hub
        self.store = store
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def attach(self, ctx: Any, principal: str) -> None:
        """Start forwarding to the session of ``ctx`` (idempotent per session)."""
        session = getattr(ctx, "session", None)
        outbound = _outbound(ctx)
        if session is None or outbound is None or id(session) in self._tasks:
            return
        stream = self.hub.open(principal)
        task = asyncio.create_task(self._forward(outbound, stream), name=f"push-session-{principal}")
        key = id(session)
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._tasks.pop(key, None))

    async def _forward(self, outbound: Any, stream: Any) -> None:
        principal = stream.principal
        try:
            last = 0
            for frame in await self.store.queued(principal, after_seq=None, now=time.time()):
                await self._send(outbound, frame.data)
                self.hub.ack(principal, frame.seq)
                last = frame.seq
            while True:
                item = await stream.queue.get()
                if item is None:
                    return
                seq, data = item
                if seq <= last:
                    continue
                await self._send(outbound, data)
                self.hub.ack(principal, seq)
                last = seq
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the session went away; frames stay queued for the next one
            log.info("push_session_ended", principal=principal)
        finally:
            self.hub.close(stream)

    @staticmethod
    async def _send(outbound: Any, data: str) -> None:
        message = orjson.loads(data)
        await outbound.notify(message["method"], message.get("params"))

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
