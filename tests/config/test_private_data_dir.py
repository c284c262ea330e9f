"""open_database tightens the data dir's other private files (trades.log, the token marker) with a warning."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

import config.private_files
from config import load_settings
from daemon import open_database


class _Recorder:
    """Stands in for config.private_files's logger (structlog's capture cannot see a logger an earlier
    test's configure_logging cached)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.events.append({"event": event, **kw})

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


async def test_an_existing_open_trades_log_and_token_marker_are_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    log_file, marker = data / "trades.log", data / "chartgen.db-tokens"
    for path in (log_file, marker):
        path.write_text("x\n")
        path.chmod(0o644)
    recorder = _Recorder()
    monkeypatch.setattr(config.private_files, "log", recorder)
    async with open_database(load_settings({"data_dir": data})):
        pass
    logs = recorder.events
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert log_file.read_text() == "x\n"
    tightened = sorted(e["path"] for e in logs if e["event"] == "data_file_tightened")
    assert tightened == sorted([str(log_file), str(marker)])
