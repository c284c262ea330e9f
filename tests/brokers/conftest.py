"""Fixtures shared by the order tests: an in-memory database with the order tables."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from brokers.order_store import MIGRATIONS
from config.database import Database


@pytest.fixture
async def order_db() -> AsyncIterator[Database]:
    database = await Database.open(":memory:")
    await database.migrate([MIGRATIONS])
    try:
        yield database
    finally:
        await database.close()
