"""The WS-API's open connections and their user-data subscriptions (what ``/ws-api/v3`` serves from).

A subscription is a listener on the account's event source (``SimAccount.listeners``, the
same events REST-placed orders, fills, cancels and order lists emit) that wraps each event as
Binance does, ``{"subscriptionId": N, "event": {...}}``, and queues it on its connection.
As web-socket-api.md documents: subscription ids count per connection from 0, at most
65,535 over a connection's lifetime (then -2042); one account has at most one active
subscription on a connection (-2035 for a second); ending one sends ``eventStreamTerminated``
(user-data-stream.md).  The simulator has one account, so "this account's subscription" is
"the connection's subscription".
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from simulator.accounts import Listener, OrderError, SimAccount

MAX_SUBSCRIPTION_IDS = 65_535
"""Subscriptions one connection may start over its lifetime (web-socket-api.md, "Limits")."""


@dataclass(eq=False)
class WsApiConnection:
    """One WS-API client: its send queue (drained by its writer) and its user-data subscriptions."""

    ws: web.WebSocketResponse
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    subscriptions: dict[int, Listener] = field(default_factory=dict)
    started: int = 0
    """Subscriptions started on this connection so far: the next one's id."""

    def send(self, message: dict[str, Any]) -> None:
        self.queue.put_nowait(orjson.dumps(message))

    def subscribe(self, account: SimAccount) -> int:
        """Start the account's user-data subscription here; its id.  Raises OrderError (-2035, -2042)."""
        if self.subscriptions:
            raise OrderError(-2035, "User Data Stream subscription already active.")
        if self.started >= MAX_SUBSCRIPTION_IDS:
            raise OrderError(-2042, "Maximum subscription ID reached for this connection.")
        sub_id = self.started
        self.started += 1

        def listener(event: dict[str, Any]) -> None:
            self.send({"subscriptionId": sub_id, "event": event})

        self.subscriptions[sub_id] = listener
        account.listeners.append(listener)
        return sub_id

    def unsubscribe(self, account: SimAccount, now_ms: int, sub_id: int | None = None) -> int:
        """End one subscription (``sub_id``; none if it is not active) or all of them, each with
        ``eventStreamTerminated``; how many ended."""
        ids = list(self.subscriptions) if sub_id is None else [sub_id] if sub_id in self.subscriptions else []
        for ending in ids:
            listener = self.subscriptions.pop(ending)
            with contextlib.suppress(ValueError):
                account.listeners.remove(listener)
            self.send({"subscriptionId": ending, "event": {"e": "eventStreamTerminated", "E": now_ms}})
        return len(ids)

    def detach(self, account: SimAccount) -> None:
        """Stop feeding this (closed) connection: its listeners leave the account, nothing is sent."""
        for listener in self.subscriptions.values():
            with contextlib.suppress(ValueError):
                account.listeners.remove(listener)
        self.subscriptions.clear()


class WsApiHub:
    """Open WS-API connections (for faults and state)."""

    def __init__(self) -> None:
        self.connections: set[WsApiConnection] = set()

    def drop_all(self) -> int:
        n = 0
        for conn in list(self.connections):
            conn.queue.put_nowait(None)
            n += 1
        return n

    def terminate_all(self, now_ms: int, account: SimAccount) -> int:
        """End every subscription of every connection (``eventStreamTerminated``); the connections stay."""
        return sum(conn.unsubscribe(account, now_ms) for conn in list(self.connections))

    def state(self) -> dict[str, int]:
        return {
            "connections": len(self.connections),
            "subscriptions": sum(len(c.subscriptions) for c in self.connections),
        }
