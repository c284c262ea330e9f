"""open_database tightens the data dir's other private files (trades.log, the token marker) with a warning."""

from __future__ import annotations

import stat
from pathlib import Path

from structlog.testing import capture_logs

from config import load_settings
from daemon.database import open_database


async def test_an_existing_open_trades_log_and_token_marker_are_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    log_file, marker = data / "trades.log", data / "chartgen.db-tokens"
    for path in (log_file, marker):
        path.write_text("x\n")
        path.chmod(0o644)
    with capture_logs() as logs:
        async with open_database(load_settings({"data_dir": data})):
            pass
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert log_file.read_text() == "x\n"
    tightened = sorted(e["path"] for e in logs if e["event"] == "data_file_tightened")
    assert tightened == sorted([str(log_file), str(marker)])
