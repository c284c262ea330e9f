"""Storage: the daemon's SQLite database (one file per data dir, WAL, durable commits chosen per
transaction, a group fsync, checkpoints off the firing path), the cluster's PostgreSQL (asyncpg
pools, LISTEN/NOTIFY), the versioned migrations both apply, and the one error family both raise
(storage/errors.py) — so no other package imports a database driver's errors.

Every package owns its tables and ships them as a :class:`Migrations` list; the daemon opens the
database once and applies them all.  This is the public surface: other packages import from
``storage`` only, never from its modules.
"""

from storage.errors import DatabaseError, StorageBusy, StorageError, StorageUnavailable
from storage.loop_writer import LOOP_TRANSACTION_MAX_ITEMS
from storage.migrations import Migrations
from storage.postgres import (
    RETRYABLE_SQLSTATES,
    UNREACHABLE,
    Listener,
    PostgresDatabase,
    redacted,
    rowcount,
    unreachable_as,
)
from storage.sqlite import Database
from storage.wal_sync import WalSyncError

__all__ = [
    "LOOP_TRANSACTION_MAX_ITEMS",
    "RETRYABLE_SQLSTATES",
    "UNREACHABLE",
    "Database",
    "DatabaseError",
    "Listener",
    "Migrations",
    "PostgresDatabase",
    "StorageBusy",
    "StorageError",
    "StorageUnavailable",
    "WalSyncError",
    "redacted",
    "rowcount",
    "unreachable_as",
]
