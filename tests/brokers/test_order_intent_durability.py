"""An order intent is committed with ``synchronous=FULL``: the order leaves for the exchange after the commit.

A power loss must not undo the PENDING_SUBMIT row of an order that was already sent, or the
daemon would not know to look it up.  Both ways of recording it are checked by tracing the
statements the connection runs (``PRAGMA synchronous`` is per connection, not per table).
Needs ``durable=True`` at the two call sites in brokers/orders/store.py (``record_intent``'s
``transaction`` and ``admit_intent``'s ``run_transaction``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from brokers.models import OrderRequest
from brokers.orders.store import MIGRATIONS, OrderStore
from storage import Database
from testkit.sqlite_trace import FULL, NORMAL, committed_under


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "chartgen.db")
    await database.migrate([MIGRATIONS])
    try:
        yield database
    finally:
        await database.close()


def order(client_order_id: str) -> OrderRequest:
    return OrderRequest(
        symbol="BTCUSDT", side="BUY", type="LIMIT", client_order_id=client_order_id,
        quantity=Decimal("0.001"), price=Decimal("60000"), time_in_force="GTC",
    )  # fmt: skip


async def test_both_ways_of_recording_an_intent_commit_with_full(db: Database) -> None:
    store = OrderStore(db)
    trace: list[str] = []
    await db.trace_statements(trace.append)
    await store.record_intent("binance", order("intent-1"), time.time())
    assert committed_under(trace, "INSERT INTO orders") == {FULL}
    trace.clear()
    admission = await store.admit_intent(
        "binance", order("intent-2"), Decimal("60"), time.time(), daily_limit=Decimal("1000"), since=0.0
    )
    assert admission.recorded
    assert committed_under(trace, "INSERT INTO orders") == {FULL}
    await db.trace_statements(None)
    assert await db.synchronous() == NORMAL
