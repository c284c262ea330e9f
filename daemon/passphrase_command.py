"""``chartgen passphrase set``: the operator passphrase that approves OAuth consents.

Read from the terminal twice (or once from stdin when it is not a terminal), stored only as
a scrypt hash in the data dir's database; works while the daemon runs.  Under systemd the
passphrase may instead come from the credential ``passphrase`` (LoadCredential=),
which takes precedence.  ``--cluster`` stores it in the cluster's PostgreSQL (``postgres_dsn`` or
``--postgres-dsn``), where every front (``chartgen --serve --cluster``) reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path

from config import load_settings
from config.database import DatabaseError
from daemon.cluster_command import NO_CLUSTER_DSN, cluster_database
from daemon.database import open_database
from daemon.logging import configure_logging
from mcp_bridge.oauth.passphrase import PassphraseError, hash_passphrase
from mcp_bridge.oauth.pg_store import PgOAuthStore
from mcp_bridge.oauth.store import OAuthStore


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chartgen passphrase", description="Set the operator passphrase for OAuth consent."
    )
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    p.add_argument("--cluster", action="store_true", help="the cluster's passphrase (postgres_dsn)")
    p.add_argument("--postgres-dsn", help="with --cluster: the cluster's PostgreSQL")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("set", help="set or replace the passphrase (at least 12 characters)")
    return p


def _read() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("New passphrase: ")
    if getpass.getpass("Repeat it: ") != first:
        raise PassphraseError("the two entries differ")
    return first


async def _store(settings_overrides: dict[str, object], config: Path | None, hashed: str, cluster: bool) -> None:
    settings = load_settings(settings_overrides, config)
    if not cluster:
        async with open_database(settings) as db:
            await OAuthStore(db).set_passphrase_hash(hashed)
        return
    dsn = settings.cluster_dsn()
    if dsn is None:
        raise DatabaseError(f"--cluster: {NO_CLUSTER_DSN}, or pass --postgres-dsn")
    async with cluster_database(dsn) as pg:
        await PgOAuthStore(pg).set_passphrase_hash(hashed)


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    configure_logging("warning")
    try:
        hashed = hash_passphrase(_read())
    except PassphraseError as exc:
        print(f"chartgen passphrase: error: {exc}", file=sys.stderr)
        return 2
    try:
        overrides = {"data_dir": ns.data_dir} | ({"postgres_dsn": ns.postgres_dsn} if ns.postgres_dsn else {})
        asyncio.run(_store(overrides, ns.config, hashed, ns.cluster))
    except DatabaseError as exc:
        print(f"chartgen passphrase: error: {exc}", file=sys.stderr)
        return 1
    print("passphrase set; OAuth consents now require it.", file=sys.stderr)
    return 0
