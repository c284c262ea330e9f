"""Opening the daemon's database and applying every package's migrations (design.md §6).

Also keeps the data dir private outside systemd (where ``StateDirectoryMode=0700`` and
``UMask=0077`` do it): :meth:`Database.open` creates the directory 0700 and the database
0600, and this module tightens the other files of the data dir that hold secrets or
audit data — ``trades.log`` and the token revocation marker — when they are open to others.
New ones are created 0600 because the ``chartgen`` command runs its state-keeping modes
with umask 077 (daemon/commands/cli.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from alerts import MIGRATIONS as ALERT_MIGRATIONS
from brokers import HALT_MIGRATIONS, ORDER_MIGRATIONS, PAPER_MIGRATIONS, SCHEDULE_MIGRATIONS, SUSPENSION_MIGRATIONS
from config import PRIVATE_FILE_MODE, Settings, tighten_private
from dashboard import MIGRATIONS as DASHBOARD_MIGRATIONS
from mcp_bridge import JOURNAL_MIGRATIONS, OAUTH_MIGRATIONS, TOKEN_MIGRATIONS, marker_for
from storage import Database, Migrations

log = structlog.get_logger(__name__)

DB_FILE = "chartgen.db"
TRADES_LOG_FILE = "trades.log"
ALL_MIGRATIONS: tuple[Migrations, ...] = (
    TOKEN_MIGRATIONS,
    OAUTH_MIGRATIONS,
    ALERT_MIGRATIONS,
    ORDER_MIGRATIONS,
    PAPER_MIGRATIONS,
    SCHEDULE_MIGRATIONS,
    HALT_MIGRATIONS,
    SUSPENSION_MIGRATIONS,
    JOURNAL_MIGRATIONS,
    DASHBOARD_MIGRATIONS,
)


def database_path(settings: Settings) -> Path:
    return settings.resolved_data_dir() / DB_FILE


@contextlib.asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[Database]:
    """The migrated database in the data dir, closed on exit."""
    path = database_path(settings)
    db = await Database.open(path)
    for other in (path.with_name(TRADES_LOG_FILE), marker_for(path)):
        if other is not None:
            await asyncio.to_thread(tighten_private, other, PRIVATE_FILE_MODE)
    try:
        versions = await db.migrate(ALL_MIGRATIONS)
        log.info("database_ready", path=str(path), versions=versions)
        yield db
    finally:
        await db.close()
