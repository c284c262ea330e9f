"""``chartgen trading suspend NAME [--reason TEXT] [--cancel-open] | unsuspend NAME``: one principal's trading.

NAME is how the principal is known: a token's name or id (``chartgen token list``), an OAuth
client's name or id (``chartgen oauth list``), or the principal itself (``tok_…``, ``oauth:…``).
A name several tokens share suspends each of their principals.  The suspension is a row of
``trading_suspensions`` (brokers/suspensions.py) that every order admission reads in its own
transaction, so it applies to the very next order, schedule run or alert action of that
principal, whichever process runs them; its charts, alerts and notifications keep working and
every other principal keeps trading.  ``--cancel-open`` also asks the running daemon to cancel the
principal's open orders and order lists (protective exits of filled entries stay) and waits up to
``--wait`` seconds for the result; with no daemon running the request is carried out at its next
start.  SUSPEND and UNSUSPEND lines go to trades.log.

``--cluster`` works on the cluster's PostgreSQL instead (brokers/pg_suspensions.py); there
``--cancel-open`` writes the cancel request in the suspending transaction (cluster/halt.py
``PrincipalCancels``, for the account ``cluster_account``), the account's order leader carries it
out (protective exits stay), and the command waits up to ``--wait`` seconds for its result; with no
leader running it stays pending and is carried out when one runs.

:func:`request_cancels`, :func:`cluster_cancels` and :func:`report_cancels` are shared with
``chartgen token revoke --cancel-open``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import time
from collections.abc import Callable
from typing import Any

from brokers import PgSuspensionStore, SuspensionStore
from cluster import INTENTS_CHANNEL, PrincipalCancels
from config import Settings
from daemon.commands.cluster import NO_CLUSTER_DSN, cluster_database
from daemon.commands.cluster_options import cluster_options, on_cluster, settings_of
from daemon.database import TRADES_LOG_FILE, open_database
from daemon.logging import configure_logging
from daemon.parts.halt import daemon_running
from daemon.trades_log import TradesLog
from mcp_bridge import PgTokenStore, TokenStore
from storage import DatabaseError, PostgresDatabase

WAIT_S = 5.0
POLL_S = 0.05
ACTIONS = ("suspend", "unsuspend")


class SuspendError(ValueError):
    """A suspend/unsuspend the operator must correct (unknown name, option not available)."""


def add_parsers(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """The ``suspend`` and ``unsuspend`` actions of ``chartgen trading`` (``add_parser``: its subparsers')."""
    anywhere = cluster_options(argparse.ArgumentParser(add_help=False), "suspensions")
    suspend = add_parser(
        "suspend", help="stop one principal's trading (orders, schedules, alert actions)", parents=[anywhere]
    )
    suspend.add_argument("name", help="a token name or id, an OAuth client name or id, or a principal")
    suspend.add_argument("--reason", help="why (shown on the dashboard and in trades.log)")
    suspend.add_argument(
        "--cancel-open",
        action="store_true",
        help="also cancel the principal's open orders and order lists (protective exits stay)",
    )
    suspend.add_argument(
        "--wait",
        type=float,
        default=WAIT_S,
        help=f"seconds to wait for the daemon's cancel result (default {WAIT_S:g})",
    )
    unsuspend = add_parser("unsuspend", help="let a suspended principal trade again", parents=[anywhere])
    unsuspend.add_argument("name", help="as for suspend")


def who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def no_principal(name: str) -> SuspendError:
    return SuspendError(
        f"no token or OAuth client named {name!r}; `chartgen token list` and `chartgen oauth list` show them"
    )


async def _cancel_result(store: SuspensionStore, seq: int, deadline: float) -> dict[str, Any] | None:
    """Poll request ``seq`` (another process answers; SQLite has no cross-process notification)."""
    while True:
        result = await store.cancel_result(seq)
        if result is not None or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(POLL_S)


def cancel_line(principal: str, result: dict[str, Any]) -> str:
    """What the CLI prints of one principal's cancel-open result."""
    failures = result.get("failures") or []
    return (
        f"cancel-open {principal}: {result.get('orders_cancelled', 0)} orders, {result.get('lists_cancelled', 0)}"
        f" lists cancelled, {result.get('protective_exits_kept', 0)} protective exit legs kept"
        + (f"; {len(failures)} failed: " + "; ".join(map(str, failures[:5])) if failures else "")
    )


def cluster_cancels(pg: PostgresDatabase, settings: Settings) -> PrincipalCancels:
    """The cancel-open requests of suspended or revoked principals on the cluster's account."""
    return PrincipalCancels(pg, settings.cluster_account, wake_channel=INTENTS_CHANNEL)


async def report_cancels(cancels: PrincipalCancels, requests: dict[str, list[tuple[str, int]]], wait_s: float) -> int:
    """Wait for the order leader's results of ``requests`` (per principal) and print them; the exit
    status (1 when one is still pending or reports failures)."""
    deadline = time.monotonic() + wait_s
    status = 0
    for principal, asked in requests.items():
        result = await cancels.results(asked, max(0.0, deadline - time.monotonic()))
        for note in result.get("pending") or []:
            print(f"cancel-open {principal}: {note}", file=sys.stderr)
            status = 1
        if not result.get("pending"):
            print(cancel_line(principal, result))
            status = status or (1 if result.get("failures") else 0)
    return status


async def request_cancels(store: SuspensionStore, principals: list[str], by: str, wait_s: float) -> int:
    """Ask the running daemon to cancel each principal's open orders, wait for and print the results;
    the exit status (1 when a result is missing or reports failures)."""
    assert store.db.path is not None
    seqs = [(p, await store.request_cancel(p, by)) for p in principals]
    if not daemon_running(store.db.path):
        print(
            "no trading daemon is running on this data dir: the open orders of "
            f"{', '.join(principals)} will be cancelled when the daemon next starts with --trade"
        )
        return 0
    deadline = time.monotonic() + wait_s
    status = 0
    for principal, seq in seqs:
        result = await _cancel_result(store, seq, deadline)
        if result is None:
            print(
                f"the daemon did not report the cancel result for {principal} within {wait_s:g} s; the request stays"
                " pending and is carried out when it does",
                file=sys.stderr,
            )
            status = 1
            continue
        print(cancel_line(principal, result))
        status = status or (1 if result.get("failures") else 0)
    return status


async def run(ns: argparse.Namespace) -> int:
    """``suspend`` / ``unsuspend`` (``ns`` from ``chartgen trading``'s parser)."""
    settings = settings_of(ns)
    configure_logging("warning", settings.log_format)
    by = who()
    if on_cluster(ns):
        dsn = settings.cluster_dsn()
        if dsn is None:
            raise SuspendError(f"--cluster: {NO_CLUSTER_DSN}, or pass --postgres-dsn")
        async with cluster_database(dsn) as pg:
            principals = await PgTokenStore(pg).principals_named(ns.name)
            if not principals:
                raise no_principal(ns.name)
            if not (ns.action == "suspend" and ns.cancel_open):
                return await _apply(ns, PgSuspensionStore(pg), principals, by)
            cancels = cluster_cancels(pg, settings)
            pg_store = PgSuspensionStore(pg, cancels=cancels)
            requests: dict[str, list[tuple[str, int]]] = {}
            for principal in principals:  # each suspension and its cancel request in one transaction
                row, requests[principal] = await pg_store.suspend_cancelling(principal, by, ns.reason)
                print(f"suspended trading of {principal} ({ns.name}) by {row.by}: {row.reason or 'no reason given'}")
            return await report_cancels(cancels, requests, ns.wait)
    trades = TradesLog(settings.resolved_data_dir() / TRADES_LOG_FILE)
    async with open_database(settings) as db:
        principals = await TokenStore(db).principals_named(ns.name)
        if not principals:
            raise no_principal(ns.name)
        store = SuspensionStore(db)
        status = await _apply(ns, store, principals, by)
        await trades.append(
            [
                f"{_stamp()} {ns.action.upper()} {p} by {by}"
                + (f": {ns.reason or 'no reason given'}" if ns.action == "suspend" else "")
                for p in principals
            ]
        )
        if ns.action == "suspend" and ns.cancel_open:
            return await request_cancels(store, principals, by, ns.wait)
        return status


async def _apply(
    ns: argparse.Namespace, store: SuspensionStore | PgSuspensionStore, principals: list[str], by: str
) -> int:
    for principal in principals:
        if ns.action == "suspend":
            row = await store.suspend(principal, by, ns.reason)
            print(f"suspended trading of {principal} ({ns.name}) by {row.by}: {row.reason or 'no reason given'}")
        elif await store.unsuspend(principal):
            print(f"unsuspended {principal} ({ns.name}): it may trade again")
        else:
            print(f"{principal} ({ns.name}) was not suspended")
    return 0


def main(ns: argparse.Namespace) -> int:
    if ns.action == "suspend" and not 0 <= ns.wait <= 600:
        print("chartgen trading: error: --wait must be between 0 and 600 seconds", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(ns))
    except (SuspendError, DatabaseError) as exc:
        print(f"chartgen trading: error: {exc}", file=sys.stderr)
        return 1
