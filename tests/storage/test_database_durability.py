"""Per-transaction durability: the transactions after whose commit something leaves the process run FULL.

SQLite's ``synchronous`` is a connection setting, so these tests read it inside the
transactions (and trace the statements the connection runs) rather than trusting the call.
"""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest

from alerts import Alert, AlertStore, Firing, Subscription
from storage.sqlite import Database

NORMAL, FULL = 1, 2


async def _sync_in(db: Database, *, durable: bool) -> int:
    async with db.transaction(durable=durable) as tx:
        async with tx.execute("PRAGMA synchronous") as cur:
            row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def _read_sync(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])


async def test_durable_transactions_commit_with_full_and_every_other_stays_normal(db: Database) -> None:
    assert await db.synchronous() == NORMAL
    assert await _sync_in(db, durable=True) == FULL
    assert await db.synchronous() == NORMAL
    assert await _sync_in(db, durable=False) == NORMAL
    assert await db.run_transaction(_read_sync, durable=True) == FULL
    assert await db.run_transaction(_read_sync) == NORMAL
    assert await db.synchronous() == NORMAL


async def test_a_durable_transaction_that_fails_still_restores_normal(db: Database) -> None:
    with pytest.raises(ZeroDivisionError):
        async with db.transaction(durable=True) as tx:
            await tx.execute("INSERT INTO alert_counters (name, value) VALUES ('x', 1)")
            _ = 1 / 0
    with pytest.raises(ZeroDivisionError):
        await db.run_transaction(lambda conn: 1 / 0, durable=True)
    assert await db.synchronous() == NORMAL
    assert await db.fetchone("SELECT value FROM alert_counters WHERE name = 'x'") is None


async def test_a_failed_commit_rolls_back_instead_of_leaving_the_transaction_open(db: Database) -> None:
    """A deferred foreign key fails at COMMIT; the next transaction must still be able to BEGIN."""
    await db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    await db.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY,"
        " parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    for durable in (False, True):
        with pytest.raises(sqlite3.IntegrityError):
            async with db.transaction(durable=durable) as tx:
                await tx.execute("INSERT INTO child (parent) VALUES (42)")
        with pytest.raises(sqlite3.IntegrityError):
            await db.run_transaction(
                lambda conn: conn.execute("INSERT INTO child (parent) VALUES (42)"), durable=durable
            )
        async with db.transaction() as tx:  # raised "cannot start a transaction within a transaction" before
            await tx.execute("INSERT INTO parent (id) VALUES (?)", (int(durable),))
        assert await db.synchronous() == NORMAL
    row = await db.fetchone("SELECT COUNT(*) AS n FROM child")
    assert row is not None and row["n"] == 0


def _modes_by_transaction(trace: list[str]) -> list[tuple[int, list[str]]]:
    """The statements of each BEGIN … COMMIT in ``trace``, with the synchronous level it committed under."""
    mode, current, out = NORMAL, None, []
    for sql in trace:
        text = " ".join(sql.split())
        if text.upper().startswith("PRAGMA SYNCHRONOUS ="):
            mode = FULL if text.upper().endswith("FULL") else NORMAL
        elif text.upper().startswith("BEGIN"):
            current = []
        elif text.upper().startswith(("COMMIT", "ROLLBACK")) and current is not None:
            out.append((mode, current))
            current = None
        elif current is not None:
            current.append(text)
    return out


def _mode_of(transactions: list[tuple[int, list[str]]], fragment: str) -> int:
    found = {mode for mode, statements in transactions if any(fragment in s for s in statements)}
    assert len(found) == 1, f"{fragment!r} ran in transactions with modes {found}"
    return found.pop()


async def test_alert_firing_commits_with_full_and_the_other_alert_transactions_with_normal(db: Database) -> None:
    """Firing: alert removed + notification + push frame queued, then the frame leaves — so FULL.

    Creating, cancelling, subscribing, draining and marking delivered stay NORMAL (design
    in storage/sqlite.py: FULL only where something irreversible follows the commit).
    """
    store = AlertStore(db)
    trace: list[str] = []
    await db.trace_statements(trace.append)

    def alert() -> Alert:
        return Alert(
            id=str(uuid.uuid4()),
            principal="a",
            symbol="BTCUSDT",
            interval="1h",
            kind="price_above",
            threshold=100.0,
            created_at=time.time(),
        )

    await store.subscribe(Subscription(principal="a", symbols=None, alert_types=None), time.time())
    fired, cancelled, capped = alert(), alert(), alert()
    await store.insert(fired)
    await store.insert(cancelled)
    assert await store.insert_capped(capped, 10)
    assert await store.remove("a", cancelled.id, "cancelled", time.time()) is not None
    out = await store.fire([Firing(alert_id=fired.id, value=101.0, triggered_at=time.time(), bar_time=None)])
    assert out and out[0].push_seq is not None
    await store.mark_delivered("a", [out[0].push_seq])
    assert [n["alert_id"] for n in await store.drain("a")] == [fired.id]
    await db.trace_statements(None)

    transactions = _modes_by_transaction(trace)
    firing = [s for mode, s in transactions if any("INTO push_queue" in x for x in s)]
    assert len(firing) == 1
    assert any("DELETE FROM alerts WHERE id IN" in x for x in firing[0])
    assert any("INTO notifications" in x for x in firing[0])
    assert _mode_of(transactions, "INTO push_queue") == FULL
    assert [mode for mode, s in transactions if mode == FULL] == [FULL]  # nothing else paid for an fsync
    assert _mode_of(transactions, "INSERT INTO push_subscriptions") == NORMAL
    assert _mode_of(transactions, "SELECT COUNT(*) FROM alerts WHERE principal") == NORMAL  # insert_capped
    assert _mode_of(transactions, "DELETE FROM alerts WHERE id = '") == NORMAL  # cancel
    assert _mode_of(transactions, "UPDATE push_queue SET delivered") == NORMAL
    assert _mode_of(transactions, "SELECT rowid, payload FROM notifications") == NORMAL  # drain
    assert await db.synchronous() == NORMAL
