"""Opening the daemon's database and applying every package's migrations (design.md §6)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from alerts.store import MIGRATIONS as ALERT_MIGRATIONS
from brokers.order_store import MIGRATIONS as ORDER_MIGRATIONS
from brokers.paper import MIGRATIONS as PAPER_MIGRATIONS
from config import Settings
from config.database import Database, Migrations
from mcp_bridge.oauth.store import MIGRATIONS as OAUTH_MIGRATIONS
from mcp_bridge.tokens import MIGRATIONS as TOKEN_MIGRATIONS

log = structlog.get_logger(__name__)

DB_FILE = "chartgen.db"
ALL_MIGRATIONS: tuple[Migrations, ...] = (
    TOKEN_MIGRATIONS,
    OAUTH_MIGRATIONS,
    ALERT_MIGRATIONS,
    ORDER_MIGRATIONS,
    PAPER_MIGRATIONS,
)


def database_path(settings: Settings) -> Path:
    return settings.resolved_data_dir() / DB_FILE


@contextlib.asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[Database]:
    """The migrated database in the data dir, closed on exit."""
    path = database_path(settings)
    db = await Database.open(path)
    try:
        versions = await db.migrate(ALL_MIGRATIONS)
        log.info("database_ready", path=str(path), versions=versions)
        yield db
    finally:
        await db.close()
