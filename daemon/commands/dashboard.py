"""``chartgen dashboard link``: a one-time sign-in URL for the dashboard, for the operator with a shell.

However many wrong passphrases a guesser sends, the operator who can run commands on the server
gets in: the printed URL (``/ui/link?token=…``) opens a session in the browser that opens it —
once, within :data:`~dashboard.sessions.LINK_S` (5 minutes) — and gives that browser a device
cookie.  The token is random (256 bits) and stored only as its SHA-256 (dashboard/sessions.py).
The URL's origin is ``base_url`` when set (the proxy's public URL), else the loopback address the
daemon listens on (``host``/``port``); ``--url`` names another.  Works while the daemon runs, on the
data dir's database, or with ``--cluster`` on the cluster's PostgreSQL, where every front accepts
the link.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from config import Settings
from daemon.commands.cluster import NO_CLUSTER_DSN, cluster_database
from daemon.commands.cluster_options import cluster_options, on_cluster, settings_of
from daemon.database import open_database
from daemon.logging import configure_logging
from dashboard import LINK_S, PgSessionStore, SessionStore
from storage import DatabaseError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chartgen dashboard", description="The operator's dashboard (/ui).")
    p.add_argument("--data-dir", type=Path, help="state directory (default $STATE_DIRECTORY, else ~/.chartgen)")
    p.add_argument("--config", type=Path, help="TOML settings file")
    anywhere = cluster_options(p, "dashboard sessions")
    sub = p.add_subparsers(dest="action", required=True)
    link = sub.add_parser(
        "link",
        help=f"print a one-time sign-in URL (valid {int(LINK_S // 60)} minutes, single use)",
        parents=[anywhere],
    )
    link.add_argument("--url", help="the daemon's origin to print (default base_url, else http://host:port)")
    return p


class LinkOriginError(ValueError):
    """No origin can be named for the link."""


def link_origin(settings: Settings, url: str | None) -> str:
    """Where the link points: ``url``, else ``base_url``, else the loopback address served."""
    chosen = url or settings.base_url
    if chosen:
        parsed = urlparse(chosen)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LinkOriginError(f"--url {chosen!r} is not an http(s) URL: pass e.g. --url http://127.0.0.1:9315")
        return f"{parsed.scheme}://{parsed.netloc}"
    if settings.port == 0:
        raise LinkOriginError(
            "port = 0: the daemon picks its port at start, so the link cannot name it; pass --url with the"
            " address it printed (http://127.0.0.1:PORT) or set base_url"
        )
    host = settings.host
    shown = f"[{host}]" if ":" in host else host
    if not settings.host_is_loopback():
        shown = "127.0.0.1"
    return f"http://{shown}:{settings.port}"


async def _create(settings: Settings, cluster: bool) -> str:
    if not cluster:
        async with open_database(settings) as db:
            return await SessionStore(db).create_link()
    dsn = settings.cluster_dsn()
    if dsn is None:
        raise DatabaseError(f"--cluster: {NO_CLUSTER_DSN}, or pass --postgres-dsn")
    async with cluster_database(dsn) as pg:
        return await PgSessionStore(pg).create_link()


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    configure_logging("warning")
    try:
        settings = settings_of(ns)
        origin = link_origin(settings, ns.url)
        token = asyncio.run(_create(settings, on_cluster(ns)))
    except LinkOriginError as exc:
        print(f"chartgen dashboard: error: {exc}", file=sys.stderr)
        return 2
    except DatabaseError as exc:
        print(f"chartgen dashboard: error: {exc}", file=sys.stderr)
        return 1
    print(f"{origin}/ui/link?token={token}")
    print(f"Open it within {int(LINK_S // 60)} minutes; it signs in one browser, once.", file=sys.stderr)
    return 0
