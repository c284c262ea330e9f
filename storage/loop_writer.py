"""Short write transactions run on the event loop's own thread, through a second connection.

The alert firing is the one transaction on the push path: a tick crosses an alert, the firing
commits, the WAL is flushed (``storage/wal_sync.py``), the frame is written.  Through aiosqlite
each firing is two thread hand-offs (loop → database thread → loop) and, because one lock
serialises every statement of the shared connection, a firing also waits for whatever read
is in flight (the audit writer's query, the halt switch's ``data_version`` poll), each held
for a whole hand-off.  ``python -m bench.alerts`` (tick → SSE frame at 1,000 ticks/s, AMD
EPYC 2 cores) put tick → commit at p50 0.9–1.1 ms / p99 6–10 ms that way, of which the SQL
itself was 0.2–0.5 ms; run on the loop, tick → commit became p50 0.5–0.6 ms and the evaluator
no longer queued ticks behind the previous firing's hand-off.

So a small firing (:data:`LOOP_TRANSACTION_MAX_ITEMS` alerts or fewer) runs here, on the
loop, with the GIL held for its 0.2–0.5 ms — as long as encoding its frames takes — and never
touches the disk synchronously: the connection commits with ``synchronous=NORMAL`` (the
caller gets its durability from the WAL flush afterwards) and its automatic checkpoint is
SQLite's 10,000-page backstop only (``storage/wal_checkpoint.py`` checkpoints on its own
thread).  Large firings stay on the database thread.

SQLite allows one writer at a time, across connections.  :class:`Database` takes its write
lock around every write of the shared connection and around this one's, so the two never
meet inside the process; a writer in *another* process (``chartgen token create``) makes
``BEGIN IMMEDIATE`` fail at once here (busy timeout 0 — the loop never waits on a file lock)
and :meth:`LoopWriter.run` reports :data:`BUSY`, for the caller to run the transaction on the
database thread instead, where the busy timeout may wait.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

T = TypeVar("T")

LOOP_TRANSACTION_MAX_ITEMS: Final = 32
"""The largest firing (alerts) run on the loop; larger ones take the database thread."""


class Busy:
    """Another connection held SQLite's write lock: nothing was run."""


BUSY: Final = Busy()


class LoopWriter:
    """A sqlite3 connection used only from the event loop's thread, for short write transactions."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.transactions = 0
        """Transactions committed here."""
        self.busy = 0
        """Transactions handed back because another connection was writing."""

    @classmethod
    def connect(cls, path: Path, autocheckpoint_pages: int) -> LoopWriter:
        """Open the connection (blocking: call it off the loop; it is then used on the loop only)."""
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA wal_autocheckpoint = {int(autocheckpoint_pages)}")
        except BaseException:
            conn.close()
            raise
        return cls(conn)

    def run(self, fn: Callable[[sqlite3.Connection], T]) -> T | Busy:
        """``fn(connection)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls back and is re-raised.

        Returns :data:`BUSY`, having run nothing, when SQLite's write lock is held elsewhere.
        """
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                self.busy += 1
                return BUSY
            raise
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        self.transactions += 1
        return result

    def close(self) -> None:
        self._conn.close()
