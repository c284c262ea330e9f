"""Open WS-API connections and their user-data subscriptions (for faults and /sim/v1/state)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass(eq=False)
class WsApiConnection:
    ws: web.WebSocketResponse
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    subscriptions: dict[int, Any] = field(default_factory=dict)

    def send(self, message: dict[str, Any]) -> None:
        self.queue.put_nowait(orjson.dumps(message))


class WsApiHub:
    """Open WS-API connections (for faults and state)."""

    def __init__(self) -> None:
        self.connections: set[WsApiConnection] = set()
        self._next_sub = 0

    def next_subscription(self) -> int:
        sub = self._next_sub
        self._next_sub += 1
        return sub

    def drop_all(self) -> int:
        n = 0
        for conn in list(self.connections):
            conn.queue.put_nowait(None)
            n += 1
        return n

    def terminate_all(self, now_ms: int, account: Any) -> int:
        n = 0
        for conn in list(self.connections):
            for sub_id, listener in list(conn.subscriptions.items()):
                with contextlib.suppress(ValueError):
                    account.listeners.remove(listener)
                conn.send({"subscriptionId": sub_id, "event": {"e": "eventStreamTerminated", "E": now_ms}})
                del conn.subscriptions[sub_id]
                n += 1
        return n

    def state(self) -> dict[str, int]:
        return {
            "connections": len(self.connections),
            "subscriptions": sum(len(c.subscriptions) for c in self.connections),
        }
