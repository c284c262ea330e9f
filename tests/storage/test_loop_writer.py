"""Small firings commit on the event loop's thread through a second connection (storage/loop_writer.py).

What must hold: the transaction is all-or-nothing as on the shared connection; it never waits
on the loop for SQLite's write lock (another process writing → it hands the transaction to the
database thread, which may wait); inside the process the write lock keeps the two connections
from meeting; in-memory databases keep the database thread (large firings too:
tests/alerts/test_push_after_flush.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from storage.loop_writer import BUSY
from storage.sqlite import Database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "state.db")
    await database.execute("CREATE TABLE t (x INTEGER NOT NULL)")
    try:
        yield database
    finally:
        await database.close()


def insert(x: int, seen: list[int] | None = None) -> Callable[[sqlite3.Connection], int]:
    def fn(conn: sqlite3.Connection) -> int:
        if seen is not None:
            seen.append(threading.get_ident())
        conn.execute("INSERT INTO t VALUES (?)", (x,))
        return x

    return fn


async def rows(db: Database) -> list[int]:
    return [int(r[0]) for r in await db.fetchall("SELECT x FROM t ORDER BY x")]


class OtherProcessWriter:
    """A connection of its own, on a thread, holding SQLite's write lock until released."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.holding = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(str(self.path), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (100)")
        self.holding.set()
        self.release.wait(30)
        conn.execute("COMMIT")
        conn.close()

    async def __aenter__(self) -> OtherProcessWriter:
        self.thread.start()
        assert await asyncio.to_thread(self.holding.wait, 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await asyncio.to_thread(self.thread.join, 30)


async def test_a_small_transaction_commits_on_the_loop_thread_and_the_shared_connection_sees_it(
    db: Database,
) -> None:
    seen: list[int] = []
    result, synced = await db.run_transaction_synced_later(insert(1, seen), on_loop=True)
    await synced
    assert result == 1
    assert seen == [threading.get_ident()]
    assert db.loop_writer is not None and db.loop_writer.transactions == 1
    assert await rows(db) == [1]


async def test_run_transaction_on_loop_commits_on_the_loop_thread_with_no_flush_request(db: Database) -> None:
    """The audit log's one-row mark: on the loop's connection, NORMAL commit, no WAL flush asked."""
    assert db.loop_writer is not None and db.wal_sync is not None
    seen: list[int] = []
    assert await db.run_transaction_on_loop(insert(1, seen)) == 1
    assert seen == [threading.get_ident()] and db.loop_writer.transactions == 1
    assert db.wal_sync.flushes == 0
    async with OtherProcessWriter(db.path or Path()):
        task = asyncio.create_task(db.run_transaction_on_loop(insert(2, seen)))
        await asyncio.sleep(0)
        assert db.loop_writer.busy == 1 and not task.done()
    assert await task == 2 and seen[1] != threading.get_ident()
    assert await rows(db) == [1, 2, 100]


async def test_without_on_loop_the_transaction_stays_on_the_database_thread(db: Database) -> None:
    seen: list[int] = []
    await db.run_transaction_synced_later(insert(1, seen))
    assert seen and seen[0] != threading.get_ident()
    assert db.loop_writer is not None and db.loop_writer.transactions == 0


async def test_an_exception_rolls_the_whole_transaction_back_and_the_writer_goes_on(db: Database) -> None:
    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await db.run_transaction_synced_later(half, on_loop=True)
    assert await rows(db) == []
    await db.run_transaction_synced_later(insert(2), on_loop=True)
    assert await rows(db) == [2]


async def test_another_process_writing_makes_it_hand_the_transaction_to_the_database_thread(
    db: Database, tmp_path: Path
) -> None:
    assert db.loop_writer is not None
    async with OtherProcessWriter(tmp_path / "state.db"):
        called: list[int] = []
        assert db.loop_writer.run(insert(1, called)) is BUSY  # at once: the loop never waits on the file lock
        assert called == [] and db.loop_writer.busy == 1
        seen: list[int] = []
        task = asyncio.create_task(db.run_transaction_synced_later(insert(2, seen), on_loop=True))
        await asyncio.sleep(0)  # one turn: the task tries the loop writer before its first suspension
        assert db.loop_writer.busy == 2
        assert not task.done()  # waiting on the database thread for the other writer
    result, synced = await task
    await synced
    assert result == 2 and seen and seen[0] != threading.get_ident()
    assert await rows(db) == [2, 100]


async def test_a_transaction_of_the_shared_connection_in_progress_is_waited_for_not_refused(
    db: Database,
) -> None:
    assert db.loop_writer is not None
    async with db.transaction() as tx:
        task = asyncio.create_task(db.run_transaction_synced_later(insert(2), on_loop=True))
        await asyncio.sleep(0)
        await tx.execute("INSERT INTO t VALUES (1)")
        assert not task.done()
    await task
    assert db.loop_writer.busy == 0 and db.loop_writer.transactions == 1
    assert await rows(db) == [1, 2]


async def test_an_in_memory_database_has_no_loop_writer() -> None:
    memory = await Database.open(":memory:")
    try:
        assert memory.loop_writer is None
        await memory.execute("CREATE TABLE t (x INTEGER NOT NULL)")
        _, done = await memory.run_transaction_synced_later(insert(1), on_loop=True)
        assert done.done() and await rows(memory) == [1]
    finally:
        await memory.close()
