"""The storage's one error family: what SQLite and PostgreSQL raise when the database, not the
statement, is the problem — so every caller (the MCP router, the HTTP edge, the roles' loops)
catches one family and says what to do.

- :class:`DatabaseError`: a database could not be opened or migrated (start-up; the message says
  which one and why).
- :class:`StorageUnavailable`: the database cannot be read or written now — PostgreSQL unreachable,
  or SQLite's disk full, read-only or failing (I/O error).  Nothing was recorded.
- :class:`StorageBusy`: another process holds the database's write lock past the busy timeout
  (SQLite's ``database is locked``).  Nothing was recorded; a retry may succeed.

Statement errors (a missing table, a constraint) are not translated: they are bugs or expected
outcomes their callers handle, not the storage being away.
"""

from __future__ import annotations


class StorageError(RuntimeError):
    """The storage failed, not the statement: nothing was changed.  ``advice`` says what to do."""

    advice = "retry"

    def __init__(self, message: str, *, advice: str | None = None) -> None:
        super().__init__(message)
        if advice is not None:
            self.advice = advice


class DatabaseError(StorageError):
    """The database could not be opened or migrated (the message says which one and why)."""

    advice = "fix the database named and start again"


class StorageUnavailable(StorageError):
    """The database cannot be read or written now: nothing was recorded (the message says what)."""

    advice = "retry once the database is back"


class StorageBusy(StorageError):
    """Another process held the database's write lock past the busy timeout: nothing was recorded."""

    advice = "another process is writing the database; retry"
