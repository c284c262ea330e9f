"""The data dir is 0700 and the database files 0600 whatever the umask; too-open ones are tightened."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from storage import Database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask of a careless shell: new files 0644, directories 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
async def test_a_new_data_dir_and_database_are_private_with_an_open_umask(tmp_path: Path) -> None:
    data = tmp_path / "nested" / "data"
    db = await Database.open(data / "chartgen.db")
    try:
        await db.execute("CREATE TABLE t (x)")
        await db.execute("INSERT INTO t VALUES (1)")
        wal, shm = data / "chartgen.db-wal", data / "chartgen.db-shm"
        assert wal.exists() and shm.exists()
        assert mode(data) == 0o700
        assert {p.name: mode(p) for p in (data / "chartgen.db", wal, shm)} == {
            "chartgen.db": 0o600,
            "chartgen.db-wal": 0o600,
            "chartgen.db-shm": 0o600,
        }
    finally:
        await db.close()


@pytest.mark.usefixtures("open_umask")
async def test_an_existing_too_open_data_dir_and_database_are_tightened_with_a_warning(tmp_path: Path) -> None:
    data = tmp_path / "data"
    db = await Database.open(data / "chartgen.db")
    await db.execute("CREATE TABLE t (x)")
    await db.close()
    data.chmod(0o755)
    (data / "chartgen.db").chmod(0o644)
    leftover_wal = data / "chartgen.db-wal"
    leftover_wal.write_bytes(b"")
    leftover_wal.chmod(0o664)
    with capture_logs() as logs:
        db = await Database.open(data / "chartgen.db")
    try:
        assert mode(data) == 0o700
        assert mode(data / "chartgen.db") == 0o600
        assert mode(leftover_wal) == 0o600
        assert await db.fetchall("SELECT * FROM t") == []  # still the same database
    finally:
        await db.close()
    tightened = {(e["what"], e["was"]) for e in logs if e["event"] == "data_file_tightened"}
    assert tightened == {("data dir", "0o755"), ("data file", "0o644"), ("database file", "0o664")}


async def test_a_private_data_dir_is_left_alone_without_warnings(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await (await Database.open(data / "chartgen.db")).close()
    with capture_logs() as logs:
        db = await Database.open(data / "chartgen.db")
    await db.close()
    assert [e for e in logs if e.get("log_level") == "warning"] == []


@pytest.mark.usefixtures("open_umask")
async def test_a_shared_directory_is_not_chmodded_but_the_database_in_it_is_private(tmp_path: Path) -> None:
    """--data-dir /tmp must never make /tmp 0700: a sticky-bit directory is left alone, with a warning."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with capture_logs() as logs:
        db = await Database.open(shared / "chartgen.db")
    await db.close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert mode(shared / "chartgen.db") == 0o600
    warned = [e for e in logs if e["event"] == "data_dir_open_to_others"]
    assert len(warned) == 1 and "sticky bit" in warned[0]["left_alone_because"]
