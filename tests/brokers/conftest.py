"""Fixtures shared by the order tests: an in-memory database with the order tables; the exchange
simulator on the real clock (ours and the exchange's agree) with BTCUSDT traded at 65,000."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from brokers.orders.store import MIGRATIONS
from simulator import RunningSimulator, start_simulator
from storage import Database


@pytest.fixture
async def order_db() -> AsyncIterator[Database]:
    database = await Database.open(":memory:")
    await database.migrate([MIGRATIONS])
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="real", symbols=["BTCUSDT"])
    running.exchange.trade("BTCUSDT", 65000.0, 0.01)
    try:
        yield running
    finally:
        await running.close()
