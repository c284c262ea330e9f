"""``trades.log`` in the data dir: chartgen's append-only audit lines (contract §5.8).

Lines are appended off the event loop and flushed to disk before the call returns, so a
caller that records "logged" afterwards never claims a line that is not on disk.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path


class TradesLog:
    """Appends lines to one file; writes are serialised."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def _write(self, lines: Sequence[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(f"{line}\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())

    async def append(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        async with self._lock:
            await asyncio.to_thread(self._write, list(lines))
