"""The PostgreSQL storage's migrations (storage/postgres.py): the same story as SQLite's —
steps applied once each, in order, also when several processes start at once; a database
newer than the code refused before anything changes; a failing step named; an unreachable
server named by its setting, without the password."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage.migrations import DatabaseError, Migrations
from storage.postgres import PostgresDatabase, redacted

pytestmark = [pytest.mark.servers, pytest.mark.process]

WIDGETS = Migrations(
    "widgets",
    (
        (1, "CREATE TABLE widgets (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY)"),
        (2, "ALTER TABLE widgets ADD COLUMN colour TEXT"),
    ),
)
GADGETS = Migrations("gadgets", ((1, "CREATE TABLE gadgets (id BIGINT PRIMARY KEY)"),))


async def _tables(db: PostgresDatabase) -> set[str]:
    rows = await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {r["tablename"] for r in rows}


async def test_concurrent_starts_apply_each_step_once(postgres: Any) -> None:
    """Four processes migrating one empty database at once: every step runs exactly once (a second
    CREATE TABLE would fail), each start sees the same versions."""
    dsn = await postgres.new_database()
    dbs = [await PostgresDatabase.open(dsn, min_size=1, max_size=1) for _ in range(4)]
    try:
        results = await asyncio.gather(*(db.migrate([WIDGETS, GADGETS]) for db in dbs))
        assert results == [{"widgets": 2, "gadgets": 1}] * 4
        rows = await dbs[0].fetch("SELECT package, version FROM schema_migrations ORDER BY package, version")
        assert [(r["package"], r["version"]) for r in rows] == [("gadgets", 1), ("widgets", 1), ("widgets", 2)]
        await dbs[0].execute("INSERT INTO widgets (colour) VALUES ('red')")
    finally:
        await asyncio.gather(*(db.close() for db in dbs))


async def test_a_database_newer_than_the_code_is_refused_before_anything_changes(postgres: Any) -> None:
    db = await PostgresDatabase.open(await postgres.new_database())
    try:
        await db.migrate([WIDGETS])
        older_code = Migrations(WIDGETS.package, WIDGETS.steps[:1])
        with pytest.raises(DatabaseError) as refused:
            await db.migrate([GADGETS, older_code])  # gadgets' step would come first: it must not run
        message = str(refused.value)
        assert "newer chartgen" in message and "widgets at version 2, this chartgen knows up to 1" in message
        assert "nothing was changed" in message
        assert "gadgets" not in await _tables(db)
    finally:
        await db.close()


async def test_a_failing_step_is_named_and_leaves_the_database_as_it_was(postgres: Any) -> None:
    """All pending steps run in one transaction: a failure undoes the steps before it too."""
    broken = Migrations("broken", ((1, "CREATE TABLE half (id INT);\nCREATE TABLE half (id INT)"),))
    db = await PostgresDatabase.open(await postgres.new_database())
    try:
        await db.migrate([GADGETS])
        with pytest.raises(DatabaseError, match="migration broken v1 failed"):
            await db.migrate([WIDGETS, broken])
        assert await _tables(db) == {"gadgets", "schema_migrations"}
        assert await db.fetchval("SELECT COUNT(*) FROM schema_migrations") == 1
    finally:
        await db.close()


async def test_an_unreachable_server_is_named_by_its_setting_without_the_password(postgres: Any) -> None:
    from testkit.nginx import free_port

    dsn = f"postgresql://chartgen:s3cret-pw@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(DatabaseError) as refused:
        await PostgresDatabase.open(dsn)
    message = str(refused.value)
    assert "postgres_dsn=postgresql://chartgen:***@127.0.0.1:" in message
    assert "s3cret-pw" not in message


def test_redacted_keeps_everything_but_the_password() -> None:
    assert redacted("postgresql://u:p@h:5432/db?sslmode=require") == "postgresql://u:***@h:5432/db?sslmode=require"
    assert redacted("postgresql://h/db") == "postgresql://h/db"
