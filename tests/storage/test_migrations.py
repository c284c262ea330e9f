"""Versioned migrations: steps applied once each, in order; a database whose schema is newer than
the code is refused before anything is changed (a downgraded daemon never runs on tables whose
meaning moved on)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from storage.sqlite import Database, DatabaseError, Migrations

WIDGETS = Migrations(
    "widgets",
    (
        (1, "CREATE TABLE widgets (id INTEGER PRIMARY KEY)"),
        (2, "ALTER TABLE widgets ADD COLUMN colour TEXT"),
    ),
)
GADGETS = Migrations("gadgets", ((1, "CREATE TABLE gadgets (id INTEGER PRIMARY KEY)"),))


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


async def test_each_step_is_applied_once_and_a_later_start_applies_only_the_new_ones(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "state.db")
    try:
        older = Migrations(WIDGETS.package, WIDGETS.steps[:1])
        assert await db.migrate([older]) == {"widgets": 1}
        assert await db.migrate([WIDGETS, GADGETS]) == {"widgets": 2, "gadgets": 1}
        assert await db.migrate([WIDGETS, GADGETS]) == {"widgets": 2, "gadgets": 1}
        await db.execute("INSERT INTO widgets (colour) VALUES ('red')")
    finally:
        await db.close()


async def test_a_database_newer_than_the_code_is_refused_before_anything_changes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = await Database.open(path)
    try:
        await db.migrate([WIDGETS])
        older_code = Migrations(WIDGETS.package, WIDGETS.steps[:1])
        with pytest.raises(DatabaseError) as refused:
            await db.migrate([GADGETS, older_code])  # gadgets' step would come first: it must not run
        message = str(refused.value)
        assert "newer chartgen" in message and "widgets at version 2, this chartgen knows up to 1" in message
        assert str(path) in message and "nothing was changed" in message
    finally:
        await db.close()
    assert "gadgets" not in tables(path)
