"""``--cluster`` and ``--postgres-dsn`` of the operator's commands (``chartgen token``, ``passphrase``,
``oauth``): the same two options everywhere, accepted before or after the action's arguments."""

from __future__ import annotations

import argparse

from config import Settings, load_settings


def cluster_options(p: argparse.ArgumentParser, what: str) -> argparse.ArgumentParser:
    """--cluster and --postgres-dsn on ``p``, and a parent parser for the actions so that they are
    also accepted after the action's arguments (absent from the namespace unless given)."""
    anywhere = argparse.ArgumentParser(add_help=False)
    for parser in (p, anywhere):
        parser.add_argument(
            "--cluster", action="store_true", default=argparse.SUPPRESS, help=f"the cluster's {what} (postgres_dsn)"
        )
        parser.add_argument(
            "--postgres-dsn", default=argparse.SUPPRESS, help="with --cluster: the cluster's PostgreSQL"
        )
    return anywhere


def on_cluster(ns: argparse.Namespace) -> bool:
    return bool(getattr(ns, "cluster", False))


def settings_of(ns: argparse.Namespace) -> Settings:
    dsn = getattr(ns, "postgres_dsn", None)
    return load_settings({"data_dir": ns.data_dir} | ({"postgres_dsn": dsn} if dsn else {}), ns.config)
