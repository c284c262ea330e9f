"""The PostgreSQL storage (asyncpg): a connection pool, transactions and the versioned migrations.

The cluster's state lives here (design.md §11); the single-process daemon keeps SQLite
(``storage/sqlite.py``).  The migrations story is the same as SQLite's (storage/migrations.py):
each package ships its PostgreSQL steps, they are applied at start each once, and a database
newer than the code is refused before anything changes.  Unlike SQLite's, all pending steps run
in one transaction (PostgreSQL's DDL is transactional): a failing step leaves the database as it
was, the steps before it included.  Several processes may
start against one database at the same moment: :meth:`PostgresDatabase.migrate` takes a
transaction-scoped advisory lock first, so exactly one applies a step and the others see it
applied.

Durability: PostgreSQL's defaults (``fsync=on``, ``synchronous_commit=on``) make every commit
durable before it returns, so there is no per-transaction choice as in SQLite; the pool's
connections keep those defaults (a server configured otherwise is the operator's decision).

A paused process (GC, SIGSTOP, a swapped-out VM) must not hold row locks others wait for: every
connection gets ``idle_in_transaction_session_timeout`` (5 s by default), so the server ends a
session that sits inside a transaction without sending anything for that long, rolling the
transaction back and releasing its locks.  Our transactions never wait on anything but the
database inside them.

Errors name the setting and what to do; the DSN is never printed with its password
(:func:`redacted`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import structlog

from storage.errors import DatabaseError, StorageUnavailable
from storage.migrations import Migrations, refuse_newer, statements

log = structlog.get_logger(__name__)

MIGRATION_LOCK = 0x63_68_61_72_74_67_65_6E  # "chartgen": the advisory lock every migrating process takes
"""The key of ``pg_advisory_xact_lock`` held while migrations are checked and applied."""

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
"""serialization_failure and deadlock_detected: the transaction did nothing and may run again."""


def redacted(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable postgres_dsn>"
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class PostgresDatabase:
    """A pool of asyncpg connections to one database, with transactions and migrations."""

    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self.pool = pool
        self.where = redacted(dsn)
        self._dsn = dsn

    def listener(self, channel: str, on_payload: Callable[[str], None]) -> Listener:
        """A ``LISTEN channel`` on a connection of its own, re-established after a loss (:class:`Listener`)."""
        return Listener(self._dsn, self.where, channel, on_payload)

    @classmethod
    async def open(
        cls, dsn: str, *, min_size: int = 2, max_size: int = 10, idle_in_transaction_timeout_s: float = 5.0
    ) -> PostgresDatabase:
        """Connect a pool; :class:`DatabaseError` naming ``postgres_dsn`` when the server cannot be reached."""
        settings = {"idle_in_transaction_session_timeout": str(max(1, int(idle_in_transaction_timeout_s * 1000)))}
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, command_timeout=60, server_settings=settings
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at postgres_dsn={redacted(dsn)}: {exc} — check that the server"
                " runs, the address and credentials in postgres_dsn, and that the database exists"
            ) from exc
        return cls(pool, dsn)

    async def close(self) -> None:
        await self.pool.close()

    async def migrate(self, packages: Iterable[Migrations]) -> dict[str, int]:
        """Apply every step not yet applied, all under one advisory lock; returns package → version.

        Refuses (:class:`DatabaseError`, before applying anything) a database in which any
        package is newer than this code knows."""
        packages = list(packages)
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " package TEXT NOT NULL, version INTEGER NOT NULL,"
                    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (package, version))"
                )
                rows = await conn.fetch("SELECT package, version FROM schema_migrations")
                applied: dict[str, set[int]] = {}
                for row in rows:
                    applied.setdefault(row["package"], set()).add(int(row["version"]))
                refuse_newer(self.where, packages, applied)
                versions: dict[str, int] = {}
                for mig in packages:
                    done = applied.get(mig.package, set())
                    for version, script in mig.steps:
                        if version in done:
                            continue
                        try:
                            async with conn.transaction():  # a savepoint: the error names the step
                                for statement in statements(script):
                                    await conn.execute(statement)
                                await conn.execute(
                                    "INSERT INTO schema_migrations (package, version) VALUES ($1, $2)",
                                    mig.package,
                                    version,
                                )
                        except asyncpg.PostgresError as exc:
                            raise DatabaseError(f"migration {mig.package} v{version} failed: {exc}") from exc
                        log.info("postgres_migrated", package=mig.package, version=version)
                    versions[mig.package] = max([0, *done, *(v for v, _ in mig.steps)])
        return versions

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside ``BEGIN`` … ``COMMIT`` (``ROLLBACK`` on any exception)."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.pool.fetch(sql, *args))

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.pool.fetchrow(sql, *args)
        return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.pool.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        """One statement in its own transaction; returns the command tag (``DELETE 3``)."""
        return str(await self.pool.execute(sql, *args))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self.transaction() as conn:
            await conn.executemany(sql, rows)


class Listener:
    """``LISTEN`` on one channel over a dedicated connection (not the pool's: a pooled connection
    lost while the server is away is taken back by the pool under the listener).

    :meth:`ensure` connects if not connected and says whether it is; a notification sent while
    it was not connected is lost, so the caller re-checks the state it waits for after every
    :meth:`ensure` that reconnected, and polls while :attr:`connected` is False."""

    def __init__(self, dsn: str, where: str, channel: str, on_payload: Callable[[str], None]) -> None:
        self._dsn = dsn
        self._where = where
        self._channel = channel
        self._on_payload = on_payload
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self.connects = 0
        """Connections made so far: a caller that saw another count may have missed notifications."""

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    @property
    def problem(self) -> str:
        """Why it is not connected (for readiness)."""
        return f"PostgreSQL LISTEN {self._channel} not connected"

    def _deliver(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_payload(payload)

    async def ensure(self) -> bool:
        async with self._lock:
            if self.connected:
                return True
            self._conn = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=5)
                await conn.add_listener(self._channel, self._deliver)
            except (*UNREACHABLE, asyncpg.PostgresError) as exc:
                log.info("postgres_listener_down", channel=self._channel, where=self._where, error=repr(exc))
                return False
            self._conn = conn
            self.connects += 1
            return True

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(*UNREACHABLE, asyncpg.PostgresError):
                    await conn.close(timeout=5)


UNREACHABLE = (
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
    OSError,
    TimeoutError,
)
"""What a lost, refused or shut-down connection raises (the server is away, not the statement wrong)."""


@contextlib.contextmanager
def unreachable_as(message: str, where: str) -> Iterator[None]:
    """Turn a lost connection inside the block into :class:`StorageUnavailable` ``message``."""
    try:
        yield
    except UNREACHABLE as exc:
        raise StorageUnavailable(f"{message}: PostgreSQL at postgres_dsn={where} cannot be reached ({exc!r})") from exc


def rowcount(tag: str) -> int:
    """The row count of a command tag such as ``DELETE 3`` or ``INSERT 0 1``."""
    try:
        return int(tag.rsplit(" ", 1)[-1])
    except ValueError:
        return 0
