"""Migrated PostgreSQL databases for the cluster tests (the session's server: tests/conftest.py):
the lease and membership tables (``cluster_dsn``, ``cluster_db``), or the whole cluster schema
(``cluster``: the DSN and an open pool); and ``sim``, the exchange simulator on the real clock with
its default symbols (modules that need other symbols define their own ``sim``); ``nats_server``, a
nats-server with JetStream of the test's own (testkit/nats.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cluster.lease import LEASE_MIGRATIONS
from cluster.membership import MEMBER_MIGRATIONS
from daemon import CLUSTER_MIGRATIONS
from storage import PostgresDatabase
from testkit.nats import NatsServer, running_nats


@pytest.fixture
async def cluster_dsn(postgres: Any) -> AsyncIterator[str]:
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    try:
        await db.migrate([LEASE_MIGRATIONS, MEMBER_MIGRATIONS])
    finally:
        await db.close()
    yield dsn


@pytest.fixture
async def cluster_db(cluster_dsn: str) -> AsyncIterator[PostgresDatabase]:
    db = await PostgresDatabase.open(cluster_dsn)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def cluster(postgres: Any) -> AsyncIterator[tuple[str, PostgresDatabase]]:
    """A new database with every cluster package's schema: (its DSN, an open pool)."""
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn)
    await db.migrate(CLUSTER_MIGRATIONS)
    try:
        yield dsn, db
    finally:
        await db.close()


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    """The simulator on the real clock: it refuses a signed request older than its recvWindow."""
    from simulator import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0, clock="real")
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    async with running_nats(tmp_path / "jetstream") as server:
        yield server
