"""``chartgen leader`` processes for the cluster tests and benches: start one against the simulator,
and find who holds an account's order lease."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from cluster import Leases, lease_name
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import PostgresDatabase
from testkit.daemon_proc import clean_env
from testkit.secret_scan import daemon_log_file


def leader_env(dsn: str, sim_url: str, **extra: str) -> dict[str, str]:
    """A leader's (and a front's) environment: the cluster, the simulator and its keys."""
    return {
        "CHARTGEN_POSTGRES_DSN": dsn,
        "CHARTGEN_BINANCE_REST_URL": sim_url,
        "BINANCE_API_KEY": DEFAULT_API_KEY,
        "BINANCE_API_SECRET": DEFAULT_API_SECRET,
        "CHARTGEN_LOG_FORMAT": "json",
        **extra,
    }


async def start_leader(env: dict[str, str], *, port: int | None = None, log: Any = None) -> asyncio.subprocess.Process:
    """``python -m daemon leader`` in its own session (so a test can SIGKILL its group); its log goes
    to the session's log folder (scanned for secrets) unless ``log`` is given."""
    target = daemon_log_file() if log is None else log
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "leader", *(["--port", str(port)] if port is not None else []),
        env=clean_env(env), stdout=asyncio.subprocess.DEVNULL, stderr=target, start_new_session=True,
    )  # fmt: skip
    if log is None:
        target.close()  # the child has its own descriptor
    return proc


async def lease_holder(db: PostgresDatabase, account: str = "main") -> str | None:
    """The member holding ``account``'s order lease now (None: nobody)."""
    for lease in await Leases(db).all():
        if lease.name == lease_name(account) and lease.expires_in_s > 0:
            return lease.holder
    return None


async def other_holder(db: PostgresDatabase, old: str, account: str = "main") -> str | None:
    """The holder once it is no longer ``old``."""
    now = await lease_holder(db, account)
    return now if now is not None and now != old else None


async def stop_leaders(procs: list[asyncio.subprocess.Process]) -> None:
    """SIGTERM every leader still running (it gives its lease up) and wait for all of them."""
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
