"""``chartgen token create NAME [--scope charts,alerts] | list | revoke ID_OR_NAME [--cancel-open]``: tokens.

A new token gets the scopes ``charts,alerts`` unless ``--scope`` says otherwise: trading
(``trade``) and ``admin`` are granted explicitly.

Works on the data dir's database while the daemon runs (SQLite WAL); a new token is
usable at once and a revoked one is refused on its next request.  The token text is
printed once, on creation, and never stored.

Revoking stops what the principal armed, in the same transaction (mcp_bridge/revocation.py): its
schedules are cancelled, its alerts lose their actions (they stay as plain alerts) and order
admission refuses its every order from then on; the command prints what it stopped.
``--cancel-open`` also asks the running daemon to cancel the principal's open orders and order
lists (the exits protecting a filled entry stay), as ``chartgen trading suspend --cancel-open`` does;
with ``--cluster`` the request is written in the revoking transaction and the cluster's order leader
carries it out.

``--cluster`` works on the cluster's tokens instead (PostgreSQL, ``postgres_dsn`` or
``--postgres-dsn``; mcp_bridge/pg_tokens.py): what every front (``chartgen --serve --cluster``)
accepts.  The cluster's schema is applied first, as ``chartgen cluster migrate`` would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg

from brokers import SuspensionStore
from config import Settings
from daemon.commands.cluster import NO_CLUSTER_DSN, cluster_database
from daemon.commands.cluster_options import cluster_options, on_cluster, settings_of
from daemon.commands.suspend import WAIT_S, cluster_cancels, report_cancels, request_cancels, who
from daemon.database import open_database
from daemon.logging import configure_logging
from mcp_bridge import (
    DEFAULT_TOKEN_SCOPES,
    SCOPE_ORDER,
    PgTokenStore,
    ScopeError,
    TokenError,
    TokenStore,
    format_scopes,
    parse_scopes,
)
from storage import DatabaseError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chartgen token", description="Manage personal access tokens (bearer tokens).")
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    anywhere = cluster_options(p, "tokens")  # also accepted after the action's arguments
    sub = p.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a token and print it once", parents=[anywhere])
    create.add_argument("name", help="a label for the token, e.g. claude-desktop")
    create.add_argument(
        "--scope",
        default=format_scopes(DEFAULT_TOKEN_SCOPES),
        help=f"what the token may do, comma-separated from {', '.join(SCOPE_ORDER)} "
        f"(default {format_scopes(DEFAULT_TOKEN_SCOPES)}; trading needs trade)",
    )
    sub.add_parser("list", help="list tokens (never their text)", parents=[anywhere])
    revoke = sub.add_parser(
        "revoke", help="revoke a token by id, or every active token with a name", parents=[anywhere]
    )
    revoke.add_argument("id_or_name")
    revoke.add_argument(
        "--cancel-open",
        action="store_true",
        help="also cancel the principal's open orders and order lists (protective exits of filled entries stay)",
    )
    revoke.add_argument(
        "--wait",
        type=float,
        default=WAIT_S,
        help=f"seconds to wait for the daemon's cancel result (default {WAIT_S:g})",
    )
    return p


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


async def _run(ns: argparse.Namespace) -> int:
    # a bad scope list fails before the database is opened
    scopes = parse_scopes(ns.scope) if ns.action == "create" else frozenset()
    cluster, settings = on_cluster(ns), settings_of(ns)
    configure_logging("warning", settings.log_format)  # stdout carries the token only
    async with _token_store(settings, cluster) as tokens:
        if ns.action == "create":
            token, info = await tokens.create(ns.name, scopes=scopes)
            print(token)
            print(
                f"created {info.id} ({info.name}, scopes {format_scopes(info.scopes)}); "
                "this is the only time the token is shown.",
                file=sys.stderr,
            )
        elif ns.action == "list":
            rows = await tokens.list()
            print(f"{'ID':<22} {'NAME':<24} {'KIND':<6} {'SCOPES':<25} {'CREATED':<21} {'STATUS'}")
            for t in rows:
                status = "active" if t.active else ("revoked " + _when(t.revoked_at) if t.revoked_at else "expired")
                shown = format_scopes(t.scopes) or "-"
                print(f"{t.id:<22} {t.name[:24]:<24} {t.kind:<6} {shown:<25} {_when(t.created_at):<21} {status}")
        else:
            if ns.cancel_open and isinstance(tokens, PgTokenStore):
                return await _revoke_cancelling(tokens, settings, ns)
            done = await tokens.revoke_all(ns.id_or_name)
            for t in done.tokens:
                print(f"revoked {t.id} ({t.name})")
            for line in done.stopped.lines():
                print(line)
            if ns.cancel_open and done.stopped.principals and isinstance(tokens, TokenStore):
                store = SuspensionStore(tokens.db)
                return await request_cancels(store, done.stopped.principals, who(), ns.wait)
    return 0


async def _revoke_cancelling(tokens: PgTokenStore, settings: Settings, ns: argparse.Namespace) -> int:
    """``revoke --cancel-open --cluster``: each principal left without a credential gets its cancel-open
    request in the revoking transaction; the order leader carries it out (protective exits stay)."""
    cancels, by = cluster_cancels(tokens.db, settings), who()
    requests: dict[str, list[tuple[str, int]]] = {}

    async def ask(conn: asyncpg.Connection, principals: list[str]) -> None:
        requests.clear()  # (a retried transaction asks again)
        for principal in principals:
            requests[principal] = await cancels.request_in(conn, principal, by)

    done = await tokens.revoke_all(ns.id_or_name, also=ask)
    for t in done.tokens:
        print(f"revoked {t.id} ({t.name})")
    for line in done.stopped.lines():
        print(line)
    return await report_cancels(cancels, requests, ns.wait)


@contextlib.asynccontextmanager
async def _token_store(settings: Settings, cluster: bool) -> AsyncIterator[TokenStore | PgTokenStore]:
    if not cluster:
        async with open_database(settings) as db:
            yield TokenStore(db)
        return
    dsn = settings.cluster_dsn()
    if dsn is None:
        raise TokenError(f"--cluster: {NO_CLUSTER_DSN}, or pass --postgres-dsn")
    async with cluster_database(dsn) as db:
        yield PgTokenStore(db)


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    try:
        return asyncio.run(_run(ns))
    except (TokenError, ScopeError, DatabaseError) as exc:
        print(f"chartgen token: error: {exc}", file=sys.stderr)
        return 1
