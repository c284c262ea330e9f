"""``chartgen trading halt|resume|status`` without a daemon, and ``--data-dir`` before or after every subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.commands.cli import STATELESS_SUBCOMMANDS, SUBCOMMANDS, hoist_state_options
from tests.daemon.test_cli_state_options import chartgen

# one harmless invocation of each subcommand: (arguments after the subcommand, stdin)
INVOCATIONS: dict[str, tuple[list[str], bytes | None]] = {
    "sim-exchange": (["--port", "0"], None),
    "token": (["list"], None),
    "passphrase": (["set"], b"correct horse battery\n"),
    "oauth": (["list"], None),
    "dashboard": (["link"], None),
    "trading": (["status"], None),
    "cluster": (["status"], None),
    "worker": ([], None),
    "leader": ([], None),
}
KEEPS_NO_DATA_DIR = {"cluster", "worker", "leader"}
"""Subcommands whose state is elsewhere (the cluster's PostgreSQL): --data-dir is refused, wherever it stands."""


def test_the_state_options_are_hoisted_for_the_trading_subcommand() -> None:
    assert hoist_state_options(["trading", "halt", "--cancel-open", "--data-dir", "D", "--reason", "x"]) == (
        ["--data-dir", "D"],
        ["trading", "halt", "--cancel-open", "--reason", "x"],
    )
    assert hoist_state_options(["trading", "--data-dir=D", "resume"]) == (["--data-dir=D"], ["trading", "resume"])


def test_every_subcommand_has_an_invocation_in_this_test() -> None:
    assert set(INVOCATIONS) == set(SUBCOMMANDS), "add the new subcommand to INVOCATIONS"


@pytest.mark.process
@pytest.mark.parametrize("sub", sorted(INVOCATIONS))
@pytest.mark.parametrize("where", ["before", "after", "after-equals"])
async def test_every_subcommand_takes_data_dir_before_or_after_it(tmp_path: Path, sub: str, where: str) -> None:
    args, stdin = INVOCATIONS[sub]
    data = tmp_path / "data"
    line = {
        "before": ["--data-dir", str(data), sub, *args],
        "after": [sub, *args, "--data-dir", str(data)],
        "after-equals": [sub, f"--data-dir={data}", *args],
    }[where]
    code, _, err = await chartgen(*line, stdin=stdin)
    if sub in STATELESS_SUBCOMMANDS:
        # recognised in every position, and refused the same way: the simulator keeps no state
        assert code == 2 and "--data-dir does not apply" in err, err
        assert "unrecognized arguments" not in err
        return
    if sub in KEEPS_NO_DATA_DIR:
        assert code == 2 and "--data-dir does not apply" in err, err
        assert not data.exists()
        return
    assert code == 0, err
    assert (data / "chartgen.db").exists()


@pytest.mark.process
async def test_halt_status_and_resume_without_a_running_daemon(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, err = await chartgen("trading", "halt", "--reason", "exchange incident", "--data-dir", str(data))
    assert code == 0, err
    assert "trading is HALTED" in out and "exchange incident" in out
    code, out, err = await chartgen("--data-dir", str(data), "trading", "status")
    assert code == 0, err
    assert "trading is HALTED" in out and "by cli" in out
    code, out, err = await chartgen("trading", f"--data-dir={data}", "halt", "--cancel-open")
    assert code == 0, err
    assert "no trading daemon is running" in out and "when the daemon next starts" in out
    code, out, err = await chartgen("trading", "status", "--data-dir", str(data))
    assert code == 0 and "a cancel-open request is pending" in out, out + err
    code, out, err = await chartgen("trading", "resume", "--data-dir", str(data))
    assert code == 0, err
    assert "trading is running (not halted)" in out
    log = (data / "trades.log").read_text()
    assert "HALT by cli" in log and "exchange incident" in log and "RESUME by cli" in log


@pytest.mark.process
async def test_trading_needs_an_action_and_names_them(tmp_path: Path) -> None:
    code, _, err = await chartgen("trading", "--data-dir", str(tmp_path))
    assert code == 2 and "halt" in err and "resume" in err


def test_the_trading_lock_tells_whether_a_trading_daemon_runs(tmp_path: Path) -> None:
    import os

    from daemon.parts.halt import daemon_running, hold_lock, lock_path

    db = tmp_path / "chartgen.db"
    assert not daemon_running(db)  # no lock file yet
    fd = hold_lock(lock_path(db))
    assert fd is not None
    try:
        assert daemon_running(db)
        assert hold_lock(lock_path(db)) is None  # a second daemon cannot take it
    finally:
        os.close(fd)
    assert not daemon_running(db)  # released with the descriptor (or the process)


async def test_status_surfaces_show_a_halt_first_and_stay_ready() -> None:
    from types import SimpleNamespace
    from typing import Any

    from brokers import HaltState
    from daemon.metrics import DaemonMetrics
    from daemon.single.modes import daemon_readiness, daemon_status, status_line

    class Engine:
        markets = (("BTCUSDT", "1m"),)

        def readiness(self) -> tuple[bool, list[str]]:
            return True, []

        def status(self) -> dict[str, Any]:
            return {}

    from brokers import HaltSwitch

    switch = HaltSwitch(None, None)  # type: ignore[arg-type]
    switch.state = HaltState(True, "exchange incident", "cli:op", 1_800_000_000.0)
    services: Any = SimpleNamespace(engine=Engine(), orders=None, alerts=None, push=None, halt=switch, scheduler=None)
    ready, reasons = daemon_readiness(services)
    assert ready and reasons == [switch.note()]
    assert status_line(services).startswith("HALTED by operator: exchange incident (since 2027-01-15T08:00:00+00:00")
    assert status_line(services).endswith("| ready | 1 markets, 0 alerts active")
    assert daemon_status(services)["trading"]["halted"] is True
    scraped: Any = SimpleNamespace(engine=None, alerts=None, push=None, halt=switch)
    assert b"chartgen_trading_halted 1.0" in await DaemonMetrics(scraped).render()
    switch.state = HaltState()
    assert daemon_readiness(services) == (True, []) and status_line(services).startswith("ready | ")
    assert daemon_status(services)["trading"]["halted"] is False
    assert b"chartgen_trading_halted 0.0" in await DaemonMetrics(scraped).render()
