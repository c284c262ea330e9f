"""The daemon's one SQLite database: connection settings, transactions, versioned migrations.

Every package owns its tables and ships them as a :class:`Migrations` list; ``daemon``
opens the database once (:meth:`Database.open`) and applies them all (:meth:`Database.migrate`).
It lives in ``storage``, beside the cluster's PostgreSQL, under every package that keeps state
(design.md §1).  A failure of the database itself (busy past the timeout, disk full, I/O error,
read-only) leaves every method as the storage's error family (:func:`translated`,
storage/errors.py); a statement's own error (a missing table, a constraint) stays SQLite's.

One connection serves the whole process (aiosqlite runs it in its own thread, so the event
loop never blocks on disk).  WAL journal, ``synchronous=NORMAL`` and a busy timeout let other
processes (``chartgen token create``) write while the daemon runs.  Statements are serialised
by a lock: :meth:`Database.transaction` holds it from ``BEGIN IMMEDIATE`` to ``COMMIT`` so a
state change is all-or-nothing and never interleaves with another.  The one exception is a
small alert firing, committed on the event loop's own thread through a second connection
(``storage/loop_writer.py`` says why); a second lock, held around every write of either
connection, keeps the two writers apart.

Durability is chosen per transaction.  With WAL and ``synchronous=NORMAL`` a commit is
atomic and survives the process being killed, but a power loss or kernel crash can undo the
most recent commits (the WAL is fsynced only at checkpoints; a transaction is never half
undone).  A transaction whose commit is followed by something that cannot be taken back — an
order sent to the exchange (the order intent), a push frame written to a client (the alert
firing: alert removed + notification + frame queued) — is opened with ``durable=True``: the
connection switches to ``synchronous=FULL`` before ``BEGIN`` (SQLite refuses the change inside
a transaction) and back to NORMAL after ``COMMIT``, so the WAL is fsynced before the commit
returns; being one file, that fsync makes every earlier commit durable too.  The lock makes
the switch invisible to other transactions.  Everything else stays NORMAL (alert creation
and cancellation, subscriptions, delivery marks, queue drains, order updates that
reconciliation re-learns from the exchange): ``python -m bench.sqlite_durability`` measured
FULL at one fdatasync per commit on this machine's disk — +0.1–0.3 ms idle, +3–4 ms at p50
(p99 ≈ 15 ms) while other work shared the disk — with the connection lock held meanwhile,
too much to put on every write.

The alert firing, the hottest of those, uses :meth:`Database.run_transaction_synced_later`
instead: it commits with NORMAL and the WAL is fsynced afterwards on a thread of its own
(``storage/wal_sync.py``), one fsync for every commit waiting, while the connection already
runs the next transaction; the evaluator pushes the frames only when that flush is done.
Checkpoints run on their own thread and connection too (``storage/wal_checkpoint.py``), so no
commit copies the WAL into the database while the connection is held.

The database files are private: :meth:`Database.open` creates the directory 0700 and the
database 0600 (SQLite gives ``-wal``/``-shm`` the database file's mode) whatever the umask,
and tightens an existing directory or file that is open to others (config/private_files.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import structlog

from config import PRIVATE_FILE_MODE, secure_data_dir, secure_private_file, tighten_private
from storage.errors import DatabaseError, StorageBusy, StorageError, StorageUnavailable
from storage.loop_writer import Busy, LoopWriter
from storage.migrations import Migrations as Migrations  # re-exported: what a package ships
from storage.migrations import refuse_newer, statements
from storage.wal_checkpoint import BACKSTOP_PAGES, WalCheckpointer
from storage.wal_sync import WalSync

log = structlog.get_logger(__name__)

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


T = TypeVar("T")


_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_UNAVAILABLE = ("SQLITE_IOERR", "SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_CORRUPT", "SQLITE_NOTADB")
DISK_ADVICE = "free disk space on the daemon's host (or fix its data directory) and retry"


def storage_error(exc: sqlite3.DatabaseError) -> StorageError | None:
    """The storage error SQLite's ``exc`` is, when the database (not the statement) failed; else None.

    By SQLite's extended result name: busy or locked past the busy timeout → :class:`StorageBusy`;
    I/O error, disk full, read-only, cannot open, corrupt → :class:`StorageUnavailable`.  A missing
    table, a constraint or a syntax error stays what it is."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith(_BUSY):
        return StorageBusy(f"the daemon's database is locked by another process ({exc})")
    if name.startswith(_UNAVAILABLE):
        return StorageUnavailable(f"the daemon could not use its database ({exc})", advice=DISK_ADVICE)
    return None


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """SQLite's failures of the database itself leave as the storage's error family (storage/errors.py)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        error = storage_error(exc)
        if error is None:
            raise
        raise error from exc


async def _on_thread(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``conn``'s own thread, in turn with its statements (aiosqlite has no public call for it)."""
    return await conn._execute(fn, *args)  # type: ignore[no-untyped-call, no-any-return]  # aiosqlite's _execute is untyped


class Database:
    """The shared aiosqlite connection with serialised statements and explicit transactions."""

    def __init__(self, conn: aiosqlite.Connection, path: Path | None) -> None:
        self._conn = conn
        self.path = path
        self._lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        """Held around every write transaction, of the shared connection or the loop writer's."""
        self.wal_sync: WalSync | None = None
        """The group fsync of the ``-wal`` file (a file database in WAL mode only)."""
        self.checkpointer: WalCheckpointer | None = None
        """The background WAL checkpoints (a file database in WAL mode only)."""
        self.loop_writer: LoopWriter | None = None
        """Small firings committed on the loop's thread (a file database in WAL mode only)."""

    @classmethod
    async def open(cls, path: Path | str) -> Database:
        """Open (creating the file and its directory if needed) with WAL and a busy timeout.

        ``":memory:"`` gives a private in-memory database (tests).
        """
        target: Path | None = None if str(path) == ":memory:" else Path(path)
        try:
            if target is not None:
                await asyncio.to_thread(_prepare_private_files, target)
            conn = await aiosqlite.connect(str(target or ":memory:"), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise DatabaseError(f"cannot open database {path}: {exc}") from exc
        conn.row_factory = aiosqlite.Row
        db = cls(conn, target)
        try:
            await conn.execute("PRAGMA busy_timeout = 5000")
            if target is not None:
                async with conn.execute("PRAGMA journal_mode = WAL") as cur:
                    row = await cur.fetchone()
                if row is not None and str(row[0]).lower() == "wal":
                    db.wal_sync = WalSync(target.with_name(target.name + "-wal"))
                    db.checkpointer = WalCheckpointer(target)
                    await conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
                    db.loop_writer = await asyncio.to_thread(LoopWriter.connect, target, BACKSTOP_PAGES)
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            if db.loop_writer is not None:
                db.loop_writer.close()
            await conn.close()
            raise DatabaseError(f"cannot configure database {path}: {exc}") from exc
        return db

    async def close(self) -> None:
        async with self._lock:
            if self.checkpointer is not None:
                await self.checkpointer.close()
            if self.wal_sync is not None:
                await self.wal_sync.close()
            if self.loop_writer is not None:
                async with self._write_lock:
                    self.loop_writer.close()
                self.loop_writer = None
            await self._conn.close()

    async def migrate(self, packages: Iterable[Migrations]) -> dict[str, int]:
        """Apply every step not yet applied, each in its own transaction; returns package → version.

        Refuses (:class:`DatabaseError`, before applying anything) a database that any package's
        schema is newer in than this code knows: a downgraded daemon would otherwise run on tables
        whose meaning changed under it (e.g. alerts step 4's trades.log mark)."""
        async with self.transaction() as tx:
            await tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " package TEXT NOT NULL, version INTEGER NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,"
                " PRIMARY KEY (package, version))"
            )
        packages = list(packages)
        applied: dict[str, set[int]] = {}
        for mig in packages:
            rows = await self.fetchall("SELECT version FROM schema_migrations WHERE package = ?", (mig.package,))
            applied[mig.package] = {int(r["version"]) for r in rows}
        refuse_newer(str(self.path or ":memory:"), packages, applied)
        versions: dict[str, int] = {}
        for mig in packages:
            done = applied[mig.package]
            for version, script in mig.steps:
                if version in done:
                    continue
                try:
                    async with self.transaction() as tx:
                        for statement in statements(script):
                            await tx.execute(statement)
                        await tx.execute(
                            "INSERT INTO schema_migrations (package, version) VALUES (?, ?)", (mig.package, version)
                        )
                except (sqlite3.Error, StorageBusy, StorageUnavailable) as exc:
                    raise DatabaseError(f"migration {mig.package} v{version} failed: {exc}") from exc
            versions[mig.package] = max([0, *done, *(v for v, _ in mig.steps)])
        return versions

    @contextlib.asynccontextmanager
    async def transaction(self, *, durable: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception); statements inside are exclusive.

        ``durable=True``: the commit is fsynced (``synchronous=FULL``) before this returns, so a
        power loss cannot undo it; use it when something leaves the process after the commit.
        """
        async with self._lock, self._write_lock:
            with translated():
                if durable:
                    await self._conn.execute("PRAGMA synchronous = FULL")
            try:
                with translated():
                    await self._conn.execute("BEGIN IMMEDIATE")
                try:
                    with translated():
                        yield self._conn
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await self._conn.execute("ROLLBACK")
                    raise
                try:
                    with translated():
                        await self._conn.execute("COMMIT")
                except BaseException:
                    # a failed COMMIT (deferred constraint, I/O error) leaves the transaction open
                    with contextlib.suppress(sqlite3.Error):
                        await self._conn.execute("ROLLBACK")
                    raise
                self._committed()
            finally:
                if durable:
                    await _on_thread(self._conn, _restore_normal, self._conn._conn)

    async def run_transaction(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = False) -> T:
        """Run ``fn(connection)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the database thread, in one hop.

        For hot paths (alert firing): the whole transaction costs one thread hand-off instead
        of one per statement.  ``fn`` must only use the connection it is given and must not
        touch the event loop; any exception rolls the transaction back and is re-raised here.
        ``durable`` as for :meth:`transaction`.
        """

        def in_transaction() -> T:
            conn = self._conn._conn  # aiosqlite's sqlite3 connection, used on its own thread
            if durable:
                conn.execute("PRAGMA synchronous = FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return result
            finally:
                if durable:
                    _restore_normal(conn)

        async with self._lock, self._write_lock:
            with translated():
                result = await _on_thread(self._conn, in_transaction)
        self._committed()
        return result

    def _committed(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.committed()

    async def run_transaction_synced_later(
        self, fn: Callable[[sqlite3.Connection], T], *, on_loop: bool = False
    ) -> tuple[T, asyncio.Future[None]]:
        """As :meth:`run_transaction` with ``durable=True``, but the fsync happens after the connection is free.

        Returns ``fn``'s result as soon as the commit is done (NORMAL: it survives the process
        being killed) and a future done when the commit is on disk (:class:`WalSync`, group
        fsync of the WAL) — nothing that cannot be taken back may leave the process before it.
        Without a WAL file (``:memory:``) the commit is a FULL one and the future is done already.

        ``on_loop``: a short transaction (a few alerts' firing) runs on the event loop's thread
        through :class:`LoopWriter`'s connection, with no thread hand-off and no wait for reads
        in flight on the shared one; when another process holds the write lock it runs on the
        database thread after all.
        """
        if self.wal_sync is None:
            result = await self.run_transaction(fn, durable=True)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return result, done
        result = await (self.run_transaction_on_loop(fn) if on_loop else self.run_transaction(fn))
        return result, self.wal_sync.request()

    async def run_transaction_on_loop(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """:meth:`run_transaction` (NORMAL commit) for a transaction of a few rows, run on the event loop's thread.

        Through :class:`LoopWriter`'s connection: no hand-off to the database thread, which holds
        the write lock (and so every firing waiting on it) while it waits for the GIL.  Falls
        back to :meth:`run_transaction` when there is no loop writer (``:memory:``) or another
        process holds SQLite's write lock.
        """
        writer = self.loop_writer
        if writer is not None:
            async with self._write_lock:
                with translated():
                    ran = writer.run(fn)
            if not isinstance(ran, Busy):
                self._committed()
                return ran
        return await self.run_transaction(fn)

    async def synchronous(self) -> int:
        """The connection's current ``PRAGMA synchronous`` (1 NORMAL, 2 FULL) outside any transaction."""
        row = await self.fetchone("PRAGMA synchronous")
        assert row is not None
        return int(row[0])

    async def trace_statements(self, callback: Callable[[str], None] | None) -> None:
        """Call ``callback(sql)`` for every statement the connection runs, on its thread (tests, diagnostics)."""
        async with self._lock:
            await _on_thread(self._conn, self._conn._conn.set_trace_callback, callback)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[aiosqlite.Row]:
        async with self._lock:
            with translated():
                async with self._conn.execute(sql, params) as cur:
                    return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> aiosqlite.Row | None:
        async with self._lock:
            with translated():
                async with self._conn.execute(sql, params) as cur:
                    return await cur.fetchone()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement in its own implicit transaction; returns the number of rows changed."""
        async with self._lock, self._write_lock:
            with translated():
                async with self._conn.execute(sql, params) as cur:
                    changed = cur.rowcount
        self._committed()
        return changed


def _restore_normal(conn: sqlite3.Connection) -> None:
    """Back to ``synchronous=NORMAL`` after a durable transaction (on the database thread)."""
    if conn.in_transaction:  # only after a failed ROLLBACK; never leave the connection inside one
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:  # stays FULL: slower, never less safe
        log.warning("sqlite_synchronous_restore_failed", error=str(exc))


def _prepare_private_files(db_path: Path) -> None:
    """The data dir 0700 and the database with its side files 0600, before SQLite opens them."""
    secure_data_dir(db_path.parent)
    secure_private_file(db_path)  # an empty file is an empty database to SQLite
    for suffix in SQLITE_SIDE_FILES:
        tighten_private(db_path.with_name(db_path.name + suffix), PRIVATE_FILE_MODE, "database file")
