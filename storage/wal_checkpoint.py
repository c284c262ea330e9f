"""Checkpoints of a WAL database on a thread and connection of their own, so no commit runs one.

SQLite's automatic checkpoint runs inside the commit that takes the WAL past
``wal_autocheckpoint`` pages (1,000 by default): that commit copies the WAL into the database
and fsyncs both files while holding the daemon's one connection, and the firings behind it
wait.  Measured in the tick → SSE bench (``bench/alerts_push.py``, 3,000 firings at 1,000 a
second, AMD EPYC 2 cores, three interleaved runs each), the time a firing holds the connection:
p99 3.2–4.4 ms, max 5.4–10.6 ms, 35–72 firings over 3 ms with the automatic checkpoint; p99
2.3–3.0 ms, max 4.3–6.0 ms, 13–22 over 3 ms with this one.  (The end-to-end p99 of that bench
moved less than the machine's own run-to-run spread.)

:class:`WalCheckpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own ``sqlite3``
connection in its own thread, once every :data:`CHECKPOINT_EVERY_COMMITS` commits of the main
connection.  A passive checkpoint takes no lock a writer waits on: it copies the frames
committed so far while the main connection goes on writing.  The WAL restarts from its
beginning at the first write after a checkpoint that caught up with it.

Under a write load with no pause at all the background checkpoint might never catch up (every
pass ends with newer frames behind it), so the main connection keeps an automatic checkpoint
as a backstop at :data:`BACKSTOP_PAGES` (the WAL then stays under ~40 MB with 4 KiB pages):
when it runs, the background passes have already copied nearly everything, so it is short.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CHECKPOINT_EVERY_COMMITS = 64
"""Main-connection commits between two background checkpoints (an alert firing writes a few pages)."""

BACKSTOP_PAGES = 10_000
"""``wal_autocheckpoint`` of the main connection: a checkpoint inside a commit only past this many WAL pages."""


class WalCheckpointer:
    """Copies ``db_path``'s WAL into the database in the background, every so many commits."""

    def __init__(self, db_path: Path, every_commits: int = CHECKPOINT_EVERY_COMMITS) -> None:
        self.db_path = db_path
        self.every_commits = every_commits
        self.checkpoints = 0
        """Background checkpoints run (each copied whatever the WAL held that was not yet copied)."""
        self.failures = 0
        self.passed = threading.Event()
        """Set after every background pass, done or failed (tests wait on it)."""
        self._conn: sqlite3.Connection | None = None
        self._since = 0
        self._due = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """Count one commit of the main connection; every ``every_commits``, wake the checkpoint thread."""
        self._since += 1
        if self._since < self.every_commits:
            return
        self._since = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
            self._thread.start()
        self._due.set()

    async def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes first) and close its connection.

        Call before the main connection closes: the last connection to close checkpoints and
        removes the WAL itself."""
        thread = self._thread
        if thread is not None:
            self._stopping = True
            self._due.set()
            await asyncio.to_thread(thread.join)
            self._thread = None
        self._close_conn()

    def run_once(self) -> tuple[int, int, int] | None:
        """One passive checkpoint now, on the calling thread: SQLite's (busy, WAL frames, frames
        copied), None if it failed (counted and logged; the backstop still bounds the WAL)."""
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(str(self.db_path), isolation_level=None, check_same_thread=False)
            row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            self.failures += 1
            log.warning("wal_checkpoint_failed", path=str(self.db_path), error=str(exc))
            self._close_conn()
            return None
        self.checkpoints += 1
        return int(row[0]), int(row[1]), int(row[2])

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _run(self) -> None:
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._stopping:
                    return
                self.run_once()
                self.passed.set()
        finally:
            self._close_conn()
