"""A data directory written by a newer chartgen: the daemon and the state-keeping commands refuse
it with one line naming the schema and what to do, and leave it as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.daemon.test_cli_state_options import chartgen

pytestmark = pytest.mark.process


def newer_data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with sqlite3.connect(data / "chartgen.db") as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (package TEXT NOT NULL, version INTEGER NOT NULL,"
            " applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (package, version))"
        )
        conn.executemany(
            "INSERT INTO schema_migrations (package, version) VALUES ('alerts', ?)", [(v,) for v in range(1, 100)]
        )
    (data / "chartgen.db").chmod(0o600)
    return data


def schema_rows(data: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(data / "chartgen.db") as conn:
        return list(conn.execute("SELECT package, version FROM schema_migrations ORDER BY package, version"))


async def test_the_daemon_refuses_a_database_from_a_newer_chartgen(tmp_path: Path) -> None:
    data = newer_data_dir(tmp_path)
    before = schema_rows(data)
    status, _, err = await chartgen("--serve", "--sim", "--trade", "--port", "0", "--data-dir", str(data))
    assert status == 1, err
    assert "chartgen: error: database" in err and "alerts at version 99, this chartgen knows up to" in err
    assert "Traceback" not in err
    assert schema_rows(data) == before


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["token", "list"], None),
        (["trading", "status"], None),
        (["passphrase", "set"], b"a long operator passphrase\n"),
    ],
)
async def test_the_state_keeping_commands_refuse_it_too(tmp_path: Path, argv: list[str], stdin: bytes | None) -> None:
    data = newer_data_dir(tmp_path)
    status, _, err = await chartgen(*argv, "--data-dir", str(data), stdin=stdin)
    assert status == 1 and "newer chartgen" in err and "Traceback" not in err, err
