"""Background WAL checkpoints: no commit of the daemon's connection copies the WAL, and the WAL stays bounded.

The checkpoint thread is driven by commits (every ``every_commits``); the tests wait on its
``passed`` event, never on time."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from storage.sqlite import Database
from storage.wal_checkpoint import BACKSTOP_PAGES, WalCheckpointer


async def _open(tmp_path: Path) -> Database:
    db = await Database.open(tmp_path / "state.db")
    await db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
    return db


async def test_the_connection_checkpoints_only_past_the_backstop(tmp_path: Path) -> None:
    db = await _open(tmp_path)
    try:
        row = await db.fetchone("PRAGMA wal_autocheckpoint")
        assert row is not None and int(row[0]) == BACKSTOP_PAGES
        assert db.checkpointer is not None
    finally:
        await db.close()


async def test_commits_wake_the_thread_and_it_copies_the_wal(tmp_path: Path) -> None:
    db = await _open(tmp_path)
    try:
        cp = db.checkpointer
        assert cp is not None
        cp.every_commits = 8
        cp.passed.clear()
        for _ in range(7):
            await db.execute("INSERT INTO t (body) VALUES (?)", (bytes(3000),))
        assert cp.checkpoints == 0  # not due yet
        await db.execute("INSERT INTO t (body) VALUES (?)", (bytes(3000),))
        assert await asyncio.to_thread(cp.passed.wait, 30)
        assert cp.checkpoints == 1 and cp.failures == 0
        # the pass copied every frame committed before it: a reader of the database file alone sees them
        busy, frames, copied = cp.run_once() or (1, 0, -1)
        assert busy == 0 and frames == copied
    finally:
        await db.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 8


async def test_transactions_count_as_commits_and_rollbacks_do_not(tmp_path: Path) -> None:
    db = await _open(tmp_path)
    try:
        cp = db.checkpointer
        assert cp is not None
        before = cp._since
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO t (body) VALUES (x'00')")
        await db.run_transaction(lambda conn: conn.execute("INSERT INTO t (body) VALUES (x'01')"))
        await db.run_transaction_synced_later(lambda conn: conn.execute("INSERT INTO t (body) VALUES (x'02')"))
        try:
            await db.run_transaction(lambda conn: 1 / 0)
        except ZeroDivisionError:
            pass
        assert cp._since == before + 3
    finally:
        await db.close()


async def test_the_wal_stays_bounded_under_writes_with_no_pause(tmp_path: Path) -> None:
    """Even if the background passes never catch up, the backstop keeps the WAL near BACKSTOP_PAGES."""
    db = await _open(tmp_path)
    try:
        assert db.checkpointer is not None
        db.checkpointer.every_commits = 10**9  # no background pass at all: the backstop alone
        row = await db.fetchone("PRAGMA page_size")
        assert row is not None
        page = int(row[0])
        for _ in range(BACKSTOP_PAGES // 2 + 50):  # each commit appends >= 2 pages (row + table b-tree)
            await db.execute("INSERT INTO t (body) VALUES (?)", (bytes(page),))
        wal = tmp_path / "state.db-wal"
        assert wal.stat().st_size <= (BACKSTOP_PAGES + 64) * (page + 24) + 32
    finally:
        await db.close()


async def test_a_failing_checkpoint_is_counted_and_the_thread_goes_on(tmp_path: Path) -> None:
    cp = WalCheckpointer(tmp_path / "missing-dir" / "state.db", every_commits=1)
    try:
        cp.committed()
        assert await asyncio.to_thread(cp.passed.wait, 30)
        assert cp.failures == 1 and cp.checkpoints == 0
        cp.passed.clear()
        cp.committed()
        assert await asyncio.to_thread(cp.passed.wait, 30)
        assert cp.failures == 2
    finally:
        await cp.close()
