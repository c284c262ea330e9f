"""The daemon's one SQLite database: connection settings, transactions, versioned migrations.

Every package owns its tables and ships them as a :class:`Migrations` list; ``daemon``
opens the database once (:meth:`Database.open`) and applies them all (:meth:`Database.migrate`).
This module lives in ``config`` because it is the root of the package graph (design.md §1):
engine, alerts, brokers and mcp_bridge may all use it without importing each other.

One connection serves the whole process (aiosqlite runs it in its own thread, so the event
loop never blocks on disk).  WAL journal, ``synchronous=NORMAL`` and a busy timeout let other
processes (``chartgen token create``) write while the daemon runs.  Statements are serialised
by a lock: :meth:`Database.transaction` holds it from ``BEGIN IMMEDIATE`` to ``COMMIT`` so a
state change is all-or-nothing and never interleaves with another.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite


@dataclass(frozen=True, slots=True)
class Migrations:
    """One package's schema history: ``steps`` are (version, SQL script), versions ascending from 1."""

    package: str
    steps: tuple[tuple[int, str], ...]

    def __post_init__(self) -> None:
        versions = [v for v, _ in self.steps]
        if versions != list(range(1, len(versions) + 1)):
            raise ValueError(f"{self.package}: migration versions must be 1, 2, 3, ... in order; got {versions}")


T = TypeVar("T")


class DatabaseError(RuntimeError):
    """The database could not be opened or migrated (the message says which file and why)."""


class Database:
    """The shared aiosqlite connection with serialised statements and explicit transactions."""

    def __init__(self, conn: aiosqlite.Connection, path: Path | None) -> None:
        self._conn = conn
        self.path = path
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path | str) -> Database:
        """Open (creating the file and its directory if needed) with WAL and a busy timeout.

        ``":memory:"`` gives a private in-memory database (tests).
        """
        target: Path | None = None if str(path) == ":memory:" else Path(path)
        try:
            if target is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
            conn = await aiosqlite.connect(str(target or ":memory:"), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise DatabaseError(f"cannot open database {path}: {exc}") from exc
        conn.row_factory = aiosqlite.Row
        db = cls(conn, target)
        try:
            await conn.execute("PRAGMA busy_timeout = 5000")
            if target is not None:
                await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            await conn.close()
            raise DatabaseError(f"cannot configure database {path}: {exc}") from exc
        return db

    async def close(self) -> None:
        async with self._lock:
            await self._conn.close()

    async def migrate(self, packages: Iterable[Migrations]) -> dict[str, int]:
        """Apply every step not yet applied, each in its own transaction; returns package → version."""
        async with self.transaction() as tx:
            await tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " package TEXT NOT NULL, version INTEGER NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,"
                " PRIMARY KEY (package, version))"
            )
        versions: dict[str, int] = {}
        for mig in packages:
            rows = await self.fetchall("SELECT version FROM schema_migrations WHERE package = ?", (mig.package,))
            done = {int(r["version"]) for r in rows}
            for version, script in mig.steps:
                if version in done:
                    continue
                try:
                    async with self.transaction() as tx:
                        for statement in _statements(script):
                            await tx.execute(statement)
                        await tx.execute(
                            "INSERT INTO schema_migrations (package, version) VALUES (?, ?)", (mig.package, version)
                        )
                except sqlite3.Error as exc:
                    raise DatabaseError(f"migration {mig.package} v{version} failed: {exc}") from exc
            versions[mig.package] = max([0, *done, *(v for v, _ in mig.steps)])
        return versions

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on any exception); statements inside are exclusive."""
        async with self._lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await self._conn.execute("ROLLBACK")
                raise
            else:
                await self._conn.execute("COMMIT")

    async def run_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the database thread, in one hop.

        For hot paths (alert firing): the whole transaction costs one thread hand-off instead
        of one per statement.  ``fn`` must only use the connection it is given and must not
        touch the event loop; any exception rolls the transaction back and is re-raised here.
        """

        def in_transaction() -> T:
            conn = self._conn._conn  # aiosqlite's sqlite3 connection, used on its own thread
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        async with self._lock:
            return await self._conn._execute(in_transaction)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[aiosqlite.Row]:
        async with self._lock:
            async with self._conn.execute(sql, params) as cur:
                return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> aiosqlite.Row | None:
        async with self._lock:
            async with self._conn.execute(sql, params) as cur:
                return await cur.fetchone()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement in its own implicit transaction; returns the number of rows changed."""
        async with self._lock:
            async with self._conn.execute(sql, params) as cur:
                return cur.rowcount


def _statements(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends (our scripts hold no semicolons in literals)."""
    return [s.strip() for s in script.split(";\n") if s.strip() and s.strip() != ";"]
