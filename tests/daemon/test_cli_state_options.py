"""``--data-dir``/``--config`` before or after any subcommand, and private files under an open umask.

Each command runs as ``python -m daemon`` in a subprocess started with umask 022 (a careless
shell's), so what is checked is what an operator outside systemd gets.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest

from daemon.commands.cli import hoist_state_options


async def chartgen(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTGEN_", "BINANCE_"))}
    env.pop("STATE_DIRECTORY", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        umask=0o022,
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    ("argv", "hoisted", "rest"),
    [
        (["token", "create", "bars", "--data-dir", "D"], ["--data-dir", "D"], ["token", "create", "bars"]),
        (["--data-dir", "D", "token", "list"], ["--data-dir", "D"], ["token", "list"]),
        (["token", "--config=C", "list", "--data-dir=D"], ["--config=C", "--data-dir=D"], ["token", "list"]),
        (["--data-dir", "token", "token", "list"], ["--data-dir", "token"], ["token", "list"]),
        (["token", "create", "--data-dir"], ["--data-dir"], ["token", "create"]),
        (["token", "create", "--", "--config"], [], ["token", "create", "--", "--config"]),
        (["--serve", "--port", "0"], [], ["--serve", "--port", "0"]),
    ],
)
def test_state_options_are_moved_in_front_of_the_subcommand_arguments(
    argv: list[str], hoisted: list[str], rest: list[str]
) -> None:
    assert hoist_state_options(argv) == (hoisted, rest)


@pytest.mark.process
async def test_token_commands_take_data_dir_before_or_after_the_subcommand(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, err = await chartgen("token", "create", "bars", "--data-dir", str(data))
    assert code == 0, err
    assert out.strip()  # the token, printed once
    code, out, err = await chartgen("--data-dir", str(data), "token", "list")
    assert code == 0, err
    assert "bars" in out
    code, out, err = await chartgen("token", "revoke", "bars", f"--data-dir={data}")
    assert code == 0, err
    assert "revoked" in out
    code, out, err = await chartgen(f"--data-dir={data}", "token", "list")
    assert code == 0, err
    assert "revoked" in out


@pytest.mark.process
async def test_token_commands_take_config_before_or_after_the_subcommand(tmp_path: Path) -> None:
    data = tmp_path / "from-config"
    config = tmp_path / "chartgen.toml"
    config.write_text(f'data_dir = "{data}"\n')
    code, _, err = await chartgen("token", "create", "cfg", "--config", str(config))
    assert code == 0, err
    code, out, err = await chartgen("--config", str(config), "token", "list")
    assert code == 0, err
    assert "cfg" in out
    assert (data / "chartgen.db").exists()


@pytest.mark.process
async def test_passphrase_takes_data_dir_before_or_after_the_subcommand(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    code, _, err = await chartgen("passphrase", "set", "--data-dir", str(first), stdin=b"correct horse battery\n")
    assert code == 0, err
    code, _, err = await chartgen("--data-dir", str(second), "passphrase", "set", stdin=b"correct horse battery\n")
    assert code == 0, err
    assert (first / "chartgen.db").exists() and (second / "chartgen.db").exists()
    assert not (Path.home() / ".chartgen").exists()


@pytest.mark.process
async def test_sim_exchange_refuses_state_options_naming_the_fix(tmp_path: Path) -> None:
    code, _, err = await chartgen("sim-exchange", "--data-dir", str(tmp_path))
    assert code == 2
    assert "--data-dir does not apply" in err and "drop --data-dir" in err


@pytest.mark.process
async def test_files_written_by_the_command_are_private_under_an_open_umask(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, _, err = await chartgen("token", "create", "x", "--data-dir", str(data))
    assert code == 0, err
    code, _, err = await chartgen("token", "revoke", "x", "--data-dir", str(data))
    assert code == 0, err
    assert mode(data) == 0o700
    files = {p.name: mode(p) for p in data.iterdir()}
    assert files.get("chartgen.db") == 0o600
    assert files.get("chartgen.db-tokens") == 0o600  # the revocation marker
    assert all(m == 0o600 for m in files.values()), files


@pytest.mark.process
async def test_the_daemon_modes_create_trades_log_private(tmp_path: Path) -> None:
    """The serving modes run with umask 077: trades.log (written by the daemon later) is 0600."""
    data = tmp_path / "data"
    script = (
        "import sys\n"
        "import daemon.single.modes as modes\n"
        "from daemon.trades_log import TradesLog\n"
        "async def run_http(settings, **kwargs):\n"
        "    await TradesLog(settings.resolved_data_dir() / 'trades.log').append(['ALERT_TRIGGERED x'])\n"
        "modes.run_http = run_http\n"
        "from daemon.commands.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHARTGEN_", "BINANCE_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, "--serve", "--data-dir", str(data), env=env, umask=0o022,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(120):
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert mode(data) == 0o700
    assert mode(data / "trades.log") == 0o600
