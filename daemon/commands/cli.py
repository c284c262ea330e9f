"""The ``chartgen`` command line: chartgen's flags and modes, plus our subcommands.

    chartgen -s BTCUSDT -i 4h -p rsi -o out.png      one-shot render
    chartgen --mcp                                   MCP over stdio
    chartgen --serve [--trade] [--sim]               MCP over Streamable HTTP
    chartgen --serve --cluster                       a cluster front (tokens, alerts, streams on PostgreSQL)
    chartgen sim-exchange --port 0                   the Binance-compatible simulator
    chartgen token create NAME | list | revoke ID    personal access tokens (bearer; --cluster: the cluster's)
    chartgen dashboard link                          a one-time sign-in URL for the dashboard (--cluster: fronts)
    chartgen trading halt [--cancel-open] | resume   the operator's halt switch (every order refused)
    chartgen cluster migrate | status                the cluster's PostgreSQL (scale-out building blocks)
    chartgen worker                                  a cluster worker (its share of markets and alerts)
    chartgen leader                                  a cluster order-leader candidate (sends the orders)

Settings precedence: these flags > CHARTGEN_* environment > --config TOML > defaults.

``--data-dir`` and ``--config`` may stand anywhere on the line — before the subcommand, after
it, or after the subcommand's own arguments (``chartgen token create bars --data-dir D``):
:func:`hoist_state_options` moves them in front of the subcommand's arguments before its
parser sees them.  Every mode that keeps state (the daemon, ``token``, ``passphrase``, ``dashboard``,
``trading``) runs with umask 077, as the systemd unit does, so files created in the data dir are private.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from config import PRIVATE_UMASK, ConfigFileError, Settings, load_settings, settings_problems
from daemon.logging import configure_logging
from storage import DatabaseError

SUBCOMMANDS = (
    "sim-exchange", "token", "passphrase", "oauth", "dashboard", "trading", "cluster", "worker", "leader",
)  # fmt: skip
STATE_OPTIONS = ("--data-dir", "--config")
STATELESS_SUBCOMMANDS = ("sim-exchange",)


def hoist_state_options(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``args`` into (every ``--data-dir``/``--config`` with its value, in order; the rest).

    Both ``--opt VALUE`` and ``--opt=VALUE`` are recognised; nothing after ``--`` is touched.
    An option left without a value stays in the first list alone, so the parser that
    receives it reports "expected one argument".
    """
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if name in STATE_OPTIONS:
            if "=" in arg:
                hoisted.append(arg)
            else:
                hoisted.extend(args[i : i + 2])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return hoisted, rest


def _main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chartgen",
        description="Trading charts, indicators, alerts and orders for AI clients over MCP.",
        epilog=(
            "Subcommands: chartgen sim-exchange --help, chartgen token --help, chartgen passphrase --help,"
            " chartgen oauth --help, chartgen dashboard --help, chartgen trading --help, chartgen cluster --help,"
            " chartgen worker --help, chartgen leader --help"
        ),
    )
    p.add_argument(
        "-s", "--symbol", action="append", help="ticker (repeatable or comma list with --trade); none = sample data"
    )
    p.add_argument("-i", "--interval", action="append", help="bar interval (default 4h; repeatable with --trade)")
    p.add_argument("-p", "--panels", action="append", help="indicator (repeatable); default cipher_b, macd")
    p.add_argument("-o", "--output", default="chart.png", help="PNG file for a one-shot render (default chart.png)")
    p.add_argument("--width", type=int, default=1920, help="image width in pixels (default 1920)")
    p.add_argument("--height", type=int, default=1080, help="image height in pixels (default 1080)")
    p.add_argument("-n", "--bars", type=int, default=120, help="number of bars (default 120)")
    p.add_argument("--source", choices=("auto", "binance", "yahoo"), default="auto", help="market data source")
    p.add_argument("--mcp", action="store_true", help="serve MCP over stdio (Claude Desktop)")
    p.add_argument("--serve", action="store_true", help="serve MCP over Streamable HTTP")
    p.add_argument("--trade", action="store_true", help="also run the trading engine")
    p.add_argument(
        "--cluster", action="store_true", help="with --serve: a stateless front of the cluster (postgres_dsn)"
    )
    p.add_argument("--testnet", action="store_true", help="Binance spot testnet for market data and orders")
    p.add_argument("--sim", action="store_true", help="start the exchange simulator in-process and use it (offline)")
    p.add_argument(
        "--clock", choices=("manual", "real"), help="clock of the --sim simulator (default real; manual for tests)"
    )
    p.add_argument("--live", action="store_true", help="allow orders on Binance mainnet (off by default)")
    p.add_argument("--exchange", help="a ccxt exchange id for non-Binance markets")
    p.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 9315; 0 picks one)")
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", choices=("auto", "json", "console"))
    return p


def _settings_from(ns: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {
        "host": ns.host,
        "port": ns.port,
        "data_dir": ns.data_dir,
        "log_level": ns.log_level,
        "log_format": ns.log_format,
        "testnet": True if ns.testnet else None,
        "live": True if ns.live else None,
        "sim_clock": ns.clock,
        "exchange": ns.exchange,
    }
    if ns.trade and ns.symbol:
        overrides["symbols"] = ns.symbol
    if ns.interval:
        overrides["intervals"] = ns.interval
    if ns.trade and ns.panels:
        overrides["indicators"] = ns.panels
    return load_settings(overrides, ns.config)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chartgen`` console script; returns the exit status."""
    hoisted, rest = hoist_state_options(sys.argv[1:] if argv is None else argv)
    if rest and rest[0] in STATELESS_SUBCOMMANDS and hoisted:
        option = hoisted[0].split("=", 1)[0]
        print(
            f"chartgen {rest[0]}: error: {option} does not apply: the simulator keeps no state and reads no"
            f" settings file; drop {option}",
            file=sys.stderr,
        )
        return 2
    if rest and rest[0] == "sim-exchange":
        from daemon.commands.sim import main as sim_main

        return sim_main(rest[1:])
    if rest and rest[0] == "passphrase":
        from daemon.commands.passphrase import main as passphrase_main

        os.umask(PRIVATE_UMASK)
        return passphrase_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "oauth":
        from daemon.commands.oauth import main as oauth_main

        os.umask(PRIVATE_UMASK)
        return oauth_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "dashboard":
        from daemon.commands.dashboard import main as dashboard_main

        os.umask(PRIVATE_UMASK)
        return dashboard_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "token":
        from daemon.commands.token import main as token_main

        os.umask(PRIVATE_UMASK)
        return token_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "trading":
        from daemon.commands.trading import main as trading_main

        os.umask(PRIVATE_UMASK)
        return trading_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "cluster":
        from daemon.commands.cluster import main as cluster_main

        return cluster_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "worker":
        from daemon.worker.command import main as worker_main

        return worker_main([*hoisted, *rest[1:]])
    if rest and rest[0] == "leader":
        from daemon.leader.command import main as leader_main

        return leader_main([*hoisted, *rest[1:]])
    ns = _main_parser().parse_args([*hoisted, *rest])
    if ns.cluster and (problem := _cluster_conflict(ns)):
        print(f"chartgen: error: --cluster {problem}", file=sys.stderr)
        return 2
    try:
        settings = _settings_from(ns)
    except (ValidationError, ConfigFileError) as exc:
        print(f"chartgen: error: invalid settings: {settings_problems(exc)}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if ns.mcp or ns.serve or ns.trade:
        os.umask(PRIVATE_UMASK)  # the data dir's files (trades.log, token marker) are created private
    from daemon.single import modes

    try:
        if ns.mcp:
            asyncio.run(modes.run_stdio(settings, sim=ns.sim, trade=ns.trade))
        elif ns.serve or ns.trade:
            asyncio.run(modes.run_http(settings, sim=ns.sim, trade=ns.trade, cluster=ns.cluster))
        else:
            symbol = ns.symbol[0].split(",")[0].strip() if ns.symbol else None
            asyncio.run(
                modes.render_once(
                    settings,
                    symbol=symbol or None,
                    interval=(ns.interval or ["4h"])[0],
                    panels=ns.panels or ["cipher_b", "macd"],
                    output=Path(ns.output),
                    width=ns.width,
                    height=ns.height,
                    bars=ns.bars,
                    source=ns.source,
                )
            )
    except (modes.ModeError, DatabaseError) as exc:
        return modes.fail(str(exc))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _cluster_conflict(ns: argparse.Namespace) -> str | None:
    """Why ``--cluster`` cannot go with the other flags given (None: it can)."""
    if not ns.serve:
        return "runs a front: use it with --serve (workers run as `chartgen worker`)"
    for flag, given in (("--trade", ns.trade), ("--sim", ns.sim), ("--mcp", ns.mcp)):
        if given:
            return (
                f"cannot be combined with {flag}: a front serves the cluster's state (the workers follow the"
                " markets; point them and the fronts at one exchange or simulator)"
            )
    if ns.data_dir is not None:
        return "keeps no local state: drop --data-dir (the front's state is in postgres_dsn)"
    return None
