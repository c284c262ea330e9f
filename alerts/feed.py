"""The notification feed: every fired alert of every principal, as it happens, for live viewers.

The push hub serves each principal's own subscribed streams; the operator's dashboard needs
everything — each firing (after its commit) and each alert action's outcome when it arrives.
Watchers get bounded queues; :meth:`NotificationFeed.publish` never blocks and drops a slow
watcher's oldest entries (counted), since a viewer can always reload the history from the
audit table.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False, slots=True)
class FeedWatcher:
    """One viewer's queue of (principal, notification entry)."""

    maxsize: int = 1000
    entries: deque[tuple[str, dict[str, Any]]] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: int = 0

    def offer(self, principal: str, entry: dict[str, Any]) -> None:
        if len(self.entries) >= self.maxsize:
            self.entries.popleft()
            self.dropped += 1
        self.entries.append((principal, entry))
        self.ready.set()

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        out = list(self.entries)
        self.entries.clear()
        self.ready.clear()
        return out


class NotificationFeed:
    """Fan-out of notifications to watchers (the dashboard's live streams)."""

    def __init__(self) -> None:
        self._watchers: set[FeedWatcher] = set()

    def watch(self, maxsize: int = 1000) -> FeedWatcher:
        watcher = FeedWatcher(maxsize)
        self._watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: FeedWatcher) -> None:
        self._watchers.discard(watcher)

    def publish(self, principal: str, entry: dict[str, Any]) -> None:
        for watcher in self._watchers:
            watcher.offer(principal, entry)
