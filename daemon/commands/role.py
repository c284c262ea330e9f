"""What ``chartgen worker`` and ``chartgen leader`` share: their common options, the checks before
start (no ``--data-dir``, valid settings, a usable ``--port``, the role's own conditions) with the
exit codes of the CLI (2: bad usage or settings; 1: the database or the port failed at start;
130: interrupted), logging, running the role, and the signals that stop it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cluster import BusError
from config import ConfigFileError, Settings, load_settings, settings_problems
from daemon.http_server import BindError
from daemon.logging import configure_logging
from daemon.parts.push_bus import BusSettingsError
from storage import DatabaseError

Run = Callable[[Settings, int | None], Coroutine[Any, Any, None]]


def role_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", type=Path, help="TOML settings file")
    p.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--postgres-dsn", help="the cluster's PostgreSQL (default: the postgres_dsn setting)")
    p.add_argument("--port", type=int, help="serve /healthz, /readyz and /metrics on 127.0.0.1:PORT (default: no HTTP)")
    return p


def run_role(
    prog: str,
    who: str,
    ns: argparse.Namespace,
    run: Run,
    *,
    problem: Callable[[Settings], str | None],
    overrides: dict[str, Any] | None = None,
    adjust: Callable[[Settings], Settings] = lambda s: s,
) -> int:
    """Check and start role ``prog`` (``who``: "a worker", "a leader") with the parsed options ``ns``."""
    if ns.data_dir is not None:
        print(
            f"{prog}: error: --data-dir does not apply: {who} keeps its state in the cluster's"
            " PostgreSQL (postgres_dsn); drop --data-dir",
            file=sys.stderr,
        )
        return 2
    given = dict(overrides or {}) | ({"postgres_dsn": ns.postgres_dsn} if ns.postgres_dsn else {})
    try:
        settings = adjust(load_settings(given, ns.config))
    except (ValidationError, ConfigFileError) as exc:
        print(f"{prog}: error: invalid settings: {settings_problems(exc)}", file=sys.stderr)
        return 2
    found = problem(settings)
    if found is not None:
        print(f"{prog}: error: {found}", file=sys.stderr)
        return 2
    if ns.port is not None and not 0 <= ns.port <= 65535:
        print(f"{prog}: error: --port must be 0-65535, got {ns.port}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        asyncio.run(run(settings, ns.port))
    except (DatabaseError, BindError, BusError, BusSettingsError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def stop_event() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (the role's clean stop), on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
