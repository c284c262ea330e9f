"""``chartgen oauth list | revoke CLIENT_ID``: the OAuth clients the operator approved, and revoking one.

``list`` prints every client whose consent was approved once (id, name, registration and consent
times, live grants); ``revoke`` revokes every refresh and access token issued to a client — its
access token is refused on the next request and it must ask for consent again.  The dashboard's
Access page does the same (at a single node or any cluster front); with ``--cluster``
(``postgres_dsn`` or ``--postgres-dsn``) this is how the operator sees and cuts off, from the
command line, the clients every front accepts.  Works while the daemon runs.  :func:`oauth_store` (the data
dir's SQLite, or the cluster's PostgreSQL) is shared with ``chartgen passphrase``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from config import Settings
from daemon.commands.cluster import NO_CLUSTER_DSN, cluster_database
from daemon.commands.cluster_options import cluster_options, on_cluster, settings_of
from daemon.database import open_database
from daemon.logging import configure_logging
from mcp_bridge import OAuthStore, PgOAuthStore
from storage import DatabaseError


@contextlib.asynccontextmanager
async def oauth_store(settings: Settings, cluster: bool) -> AsyncIterator[OAuthStore | PgOAuthStore]:
    """The OAuth records: the data dir's database, or with ``cluster`` the cluster's (schema applied)."""
    if not cluster:
        async with open_database(settings) as db:
            yield OAuthStore(db)
        return
    dsn = settings.cluster_dsn()
    if dsn is None:
        raise DatabaseError(f"--cluster: {NO_CLUSTER_DSN}, or pass --postgres-dsn")
    async with cluster_database(dsn) as pg:
        yield PgOAuthStore(pg)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chartgen oauth", description="The OAuth clients approved to connect.")
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    anywhere = cluster_options(p, "OAuth clients")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="every approved client, with its live grants", parents=[anywhere])
    revoke = sub.add_parser(
        "revoke", help="revoke every token issued to a client (it must ask for consent again)", parents=[anywhere]
    )
    revoke.add_argument("client_id")
    return p


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


async def _run(ns: argparse.Namespace) -> int:
    async with oauth_store(settings_of(ns), on_cluster(ns)) as store:
        clients = await store.clients()
        if ns.action == "list":
            print(f"{'CLIENT ID':<34} {'NAME':<24} {'REGISTERED':<21} {'APPROVED':<21} GRANTS")
            for c in clients:
                name = (c["client_name"] or "-")[:24]
                print(
                    f"{c['client_id']:<34} {name:<24} {_when(c['created_at']):<21} {_when(c['consented_at']):<21}"
                    f" {c['grants']}"
                )
            return 0
        if not any(c["client_id"] == ns.client_id for c in clients):
            print(
                f"chartgen oauth: error: no approved client {ns.client_id!r}; `chartgen oauth list` shows them",
                file=sys.stderr,
            )
            return 1
        stopped = await store.revoke_grant(ns.client_id)
        print(f"revoked every token of {ns.client_id}")
        for line in stopped.lines():
            print(line)
        return 0


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    configure_logging("warning")
    try:
        return asyncio.run(_run(ns))
    except DatabaseError as exc:
        print(f"chartgen oauth: error: {exc}", file=sys.stderr)
        return 1
