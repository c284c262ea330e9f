"""The halt switch in the daemon (``--trade``): its watch task, and the "a trading daemon runs here" lock.

The daemon holds an exclusive ``flock`` on ``chartgen.db-trading.lock`` next to the database for
as long as its halt watch runs; ``chartgen trading halt --cancel-open`` probes the lock to tell
"the daemon will cancel within seconds" from "no daemon runs: the flag is set, and open orders
are cancelled at its next start".  The kernel drops the lock with the process, so a crashed
daemon never looks alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from brokers import HaltStore, HaltSwitch, OrderService
from daemon.supervisor import Supervisor
from daemon.trades_log import TradesLog
from storage import Database

log = structlog.get_logger(__name__)

LOCK_SUFFIX = "-trading.lock"


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + LOCK_SUFFIX)


def hold_lock(path: Path) -> int | None:
    """Take the trading-daemon lock (non-blocking); the open descriptor, or None if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def daemon_running(db_path: Path) -> bool:
    """Whether a trading daemon holds the lock of this database (a shared probe, released at once)."""
    path = lock_path(db_path)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases a probe lock we got
    return False


async def _take_lock(path: Path, attempts: int = 20) -> int | None:
    """The lock, retried briefly: a ``chartgen trading`` probe holds it shared for an instant."""
    for _ in range(attempts):
        fd = hold_lock(path)
        if fd is not None:
            return fd
        await asyncio.sleep(0.05)  # a probe releases at once; another daemon never does
    log.warning("trading_lock_held_elsewhere", lock=str(path), hint="another trading daemon uses this data dir?")
    return None


@contextlib.asynccontextmanager
async def running_halt(
    *, db: Database, service: OrderService | None, supervisor: Supervisor, trades_log: TradesLog
) -> AsyncIterator[HaltSwitch]:
    """The daemon's halt switch: current state read, the lock held, the watch supervised.

    The watch's first pass carries out a cancel-open request left pending while no daemon ran.
    """
    switch = HaltSwitch(HaltStore(db), service, audit=trades_log.append)
    await switch.refresh()
    fd = await _take_lock(lock_path(db.path)) if db.path is not None else None
    if switch.halted:
        log.warning("trading_halted_at_start", reason=switch.state.reason, by=switch.state.by)
    supervisor.start("trading-halt-watch", switch.watch)
    try:
        yield switch
    finally:
        if fd is not None:
            os.close(fd)
