"""``chartgen passphrase set``: the operator passphrase that approves OAuth consents.

Read from the terminal twice (or once from stdin when it is not a terminal), stored only as
a scrypt hash in the data dir's database; works while the daemon runs.  Under systemd the
passphrase may instead come from the credential ``passphrase`` (LoadCredential=),
which takes precedence.  ``--cluster`` stores it in the cluster's PostgreSQL (``postgres_dsn`` or
``--postgres-dsn``), where every front (``chartgen --serve --cluster``) reads it.

Setting it ends every dashboard sign-in in the same transaction: every session is revoked and the
sign-in generation bumped, which voids every device cookie and unused sign-in link (at every front
with ``--cluster``).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiosqlite
import asyncpg

from daemon.commands.cluster_options import cluster_options, on_cluster, settings_of
from daemon.commands.oauth import oauth_store
from daemon.logging import configure_logging
from dashboard import pg_sessions, sessions
from mcp_bridge import PassphraseError, PgOAuthStore, hash_passphrase
from storage import DatabaseError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chartgen passphrase", description="Set the operator passphrase for OAuth consent."
    )
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    anywhere = cluster_options(p, "passphrase")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("set", help="set or replace the passphrase (at least 12 characters)", parents=[anywhere])
    return p


def _read() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("New passphrase: ")
    if getpass.getpass("Repeat it: ") != first:
        raise PassphraseError("the two entries differ")
    return first


async def _store(ns: argparse.Namespace, hashed: str) -> None:
    async with oauth_store(settings_of(ns), on_cluster(ns)) as store:
        if isinstance(store, PgOAuthStore):

            async def end_pg(conn: asyncpg.Connection) -> None:
                await pg_sessions.end_every_sign_in(conn, time.time())

            await store.set_passphrase_hash(hashed, also=end_pg)
        else:

            async def end_sqlite(tx: aiosqlite.Connection) -> None:
                await sessions.end_every_sign_in(tx, time.time())

            await store.set_passphrase_hash(hashed, also=end_sqlite)


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    configure_logging("warning")
    try:
        hashed = hash_passphrase(_read())
    except PassphraseError as exc:
        print(f"chartgen passphrase: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_store(ns, hashed))
    except DatabaseError as exc:
        print(f"chartgen passphrase: error: {exc}", file=sys.stderr)
        return 1
    print(
        "passphrase set; OAuth consents now require it. Every dashboard session and device cookie has ended.",
        file=sys.stderr,
    )
    return 0
