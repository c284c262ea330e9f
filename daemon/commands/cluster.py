"""``chartgen cluster migrate | status``: the cluster's PostgreSQL, for the operator.

``migrate`` applies the PostgreSQL schema of every cluster package (alerts, leases, membership,
order intents, hand-over marks, bearer tokens, OAuth, …; storage/postgres.py: all pending steps in one
transaction, a newer database refused).  ``status`` shows what the cluster's state says now: the
members and whether each is live, the leases (who leads which exchange account, with its fencing
token; the lease ``channels`` names the worker delivering the notification channels), the order
intents per account and state, each notification channel's outbox (pending with the oldest's age,
delivered, failed), and which live worker owns each market that has armed alerts (the rendezvous
assignment every worker computes the same way).  ``--json`` prints the same as one JSON object.
Both read ``postgres_dsn`` (``--postgres-dsn``, ``CHARTGEN_POSTGRES_DSN`` or the settings file);
the password never appears in output.

It also shows each live worker's alert evaluation lag: per market, the server's clock minus the
exchange time of the newest tick the worker evaluated (cluster/marks.py), the worst per worker.
Fronts (``chartgen --serve --cluster``) are listed as members with their address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from alerts import PG_MIGRATIONS as ALERT_PG_MIGRATIONS
from alerts import PgOutboxStore
from brokers import PG_SCHEDULE_MIGRATIONS, PG_SUSPENSION_MIGRATIONS
from cluster import (
    ACCOUNT_MIGRATIONS,
    FOLLOWED_MIGRATIONS,
    HALT_MIGRATIONS,
    LEASE_MIGRATIONS,
    MARK_MIGRATIONS,
    MEMBER_MIGRATIONS,
    ORDER_MIGRATIONS,
    FollowedMarkets,
    Leases,
    MarketMarks,
    Membership,
    assign,
)
from config import ConfigFileError, load_settings
from daemon.commands.cluster_follow import FollowError, run_follow
from dashboard import PG_SESSION_MIGRATIONS
from mcp_bridge import PG_JOURNAL_MIGRATIONS, PG_OAUTH_MIGRATIONS, PG_TOKEN_MIGRATIONS
from storage import DatabaseError, Migrations, PostgresDatabase

NO_CLUSTER_DSN = (
    "no postgres_dsn: set CHARTGEN_POSTGRES_DSN, postgres_dsn in the settings file or the systemd credential"
    " postgres_dsn to the cluster's PostgreSQL (postgresql://user:password@host:5432/db)"
)
"""What a cluster role or command says when ``Settings.cluster_dsn()`` finds none."""

CLUSTER_MIGRATIONS: tuple[Migrations, ...] = (
    ALERT_PG_MIGRATIONS,
    LEASE_MIGRATIONS,
    MEMBER_MIGRATIONS,
    ORDER_MIGRATIONS,
    HALT_MIGRATIONS,
    MARK_MIGRATIONS,
    PG_TOKEN_MIGRATIONS,
    PG_SCHEDULE_MIGRATIONS,
    PG_SUSPENSION_MIGRATIONS,
    ACCOUNT_MIGRATIONS,
    PG_JOURNAL_MIGRATIONS,
    PG_OAUTH_MIGRATIONS,
    FOLLOWED_MIGRATIONS,
    PG_SESSION_MIGRATIONS,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chartgen cluster", description="The cluster's PostgreSQL state.")
    p.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--config", type=Path, help="TOML settings file")
    dsn = argparse.ArgumentParser(add_help=False)
    dsn.add_argument("--postgres-dsn", help="the cluster's PostgreSQL (default: the postgres_dsn setting)")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("migrate", help="create or upgrade the cluster's tables", parents=[dsn])
    status = sub.add_parser("status", help="members, leaders, order intents, market assignment", parents=[dsn])
    status.add_argument("--json", action="store_true", help="one JSON object instead of text")
    for action, what in (("follow", "have the cluster follow"), ("unfollow", "stop following")):
        cmd = sub.add_parser(action, help=f"{what} markets (SYMBOL… -i INTERVAL…)", parents=[dsn])
        cmd.add_argument("symbols", nargs="+", metavar="SYMBOL")
        cmd.add_argument("-i", "--interval", action="append", required=True, help="repeatable: 1m, 1h, …")
    sub.add_parser("followed", help="the markets the operator has the cluster follow", parents=[dsn])
    status.add_argument(
        "--liveness",
        type=float,
        default=4.0,
        help="seconds without a heartbeat after which a member is dead (default: cluster_liveness_s's default)",
    )
    return p


def _dsn(ns: argparse.Namespace) -> str | None:
    if ns.postgres_dsn:
        return str(ns.postgres_dsn)
    return load_settings({}, ns.config).cluster_dsn()


@contextlib.asynccontextmanager
async def cluster_database(dsn: str, *, min_size: int = 1, max_size: int = 2) -> AsyncIterator[PostgresDatabase]:
    """A pool on the cluster's PostgreSQL with its schema applied (a newer one refused), closed on exit."""
    db = await PostgresDatabase.open(dsn, min_size=min_size, max_size=max_size)
    try:
        await db.migrate(CLUSTER_MIGRATIONS)
        yield db
    finally:
        await db.close()


async def _migrate(dsn: str) -> int:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    try:
        versions = await db.migrate(CLUSTER_MIGRATIONS)
    finally:
        await db.close()
    print(f"cluster schema at {db.where}: " + ", ".join(f"{k} v{v}" for k, v in versions.items()))
    return 0


async def collect(db: PostgresDatabase, liveness_s: float) -> dict[str, Any]:
    """The status as data (what ``--json`` prints)."""
    members = Membership(db, liveness_s)
    now = time.time()
    rows = await members.members()
    live_workers = await members.live("worker")
    live_any = {m.id for m in rows if m.seen_s_ago <= liveness_s}
    leases = await Leases(db).all()
    intents = await db.fetch(
        "SELECT account, state, COUNT(*) AS n FROM cluster_order_intents"
        " GROUP BY account, state ORDER BY account, state"
    )
    markets = [
        f"{r['symbol']} {r['interval']}"
        for r in await db.fetch("SELECT DISTINCT symbol, interval FROM alerts ORDER BY symbol, interval")
    ]
    evaluation: dict[str, dict[str, Any]] = {}
    for mark in await MarketMarks(db).all():
        if mark.member not in live_any:
            continue  # a dead member's marks are its markets' hand-over points, not anyone's lag
        e = evaluation.setdefault(mark.member, {"markets": 0, "max_lag_s": 0.0, "worst": ""})
        e["markets"] += 1
        if mark.lag_s >= e["max_lag_s"]:
            e["max_lag_s"], e["worst"] = round(mark.lag_s, 3), mark.market
    halted = await db.fetch(
        "SELECT account, reason, halted_by, holder_kind FROM cluster_halt WHERE halted ORDER BY account"
    )
    actions = await db.fetchrow(
        "SELECT COUNT(*) AS n, COALESCE(EXTRACT(EPOCH FROM clock_timestamp()) - MIN(at), 0) AS oldest_s"
        " FROM alert_actions WHERE state = 'pending'"
    )
    cancels = await db.fetchrow(
        "SELECT COUNT(*) AS n, COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - MIN(requested_at)), 0) AS oldest_s"
        " FROM cluster_order_cancels WHERE state = 'queued'"
    )
    assert actions is not None and cancels is not None  # an aggregate without GROUP BY has one row
    channels = await PgOutboxStore(db).counts()
    followed = await FollowedMarkets(db).all()
    by_account: dict[str, dict[str, int]] = {}
    for r in intents:
        by_account.setdefault(r["account"], {})[r["state"]] = int(r["n"])
    return {
        "members": [
            {
                "id": m.id,
                "role": m.role,
                "address": m.address,
                "seen_s_ago": round(m.seen_s_ago, 3),
                "live": m.id in live_any,
                "bus": m.bus,
            }
            for m in rows
        ],
        "buses": sorted({m.bus for m in rows if m.id in live_any and m.bus is not None}),
        "leases": [
            {"name": x.name, "holder": x.holder, "token": x.token, "expires_in_s": round(x.expires_in_s, 3)}
            for x in leases
        ],
        "order_intents": by_account,
        "halted": [
            {"account": r["account"], "reason": r["reason"], "by": r["halted_by"], "holder_kind": r["holder_kind"]}
            for r in halted
        ],
        "alert_actions_pending": {"count": int(actions["n"]), "oldest_s": round(float(actions["oldest_s"]), 1)},
        "cancels_pending": {"count": int(cancels["n"]), "oldest_s": round(float(cancels["oldest_s"]), 1)},
        "channels": {
            name: {
                "pending": c.pending,
                "delivered": c.delivered,
                "failed": c.failed,
                "oldest_pending_s": None if c.oldest_pending_at is None else round(now - c.oldest_pending_at, 1),
            }
            for name, c in sorted(channels.items())
        },
        "followed": [f"{sym} {iv}" for sym, iv in followed],
        "markets_with_alerts": len(markets),
        "assignment": assign(markets, live_workers) if live_workers else {},
        "unassigned_markets": markets if not live_workers else [],
        "evaluation": evaluation,
    }


def render(status: dict[str, Any], liveness_s: float) -> str:
    lines = [f"members (dead after {liveness_s:g} s without a heartbeat):"]
    for m in status["members"] or []:
        state = "live" if m["live"] else "dead"
        bus = f"  bus {m['bus']}" if m["bus"] else ""
        lines.append(
            f"  {m['role']:<6} {m['id']}  {m['address'] or '-'}  seen {m['seen_s_ago']:.1f} s ago  {state}{bus}"
        )
    if not status["members"]:
        lines.append("  none")
    if len(status["buses"]) > 1:
        lines.append(
            f"  BUS MISMATCH: live members use bus {' and '.join(status['buses'])}; set the same bus on every worker"
            " and front (a front hears another bus's firings only from its 15 s sweep)"
        )
    lines.append("leases:")
    for x in status["leases"]:
        held = f"expires in {x['expires_in_s']:.1f} s" if x["expires_in_s"] > 0 else "expired"
        lines.append(f"  {x['name']}  holder {x['holder']}  token {x['token']}  {held}")
    if not status["leases"]:
        lines.append("  none")
    lines.append("order intents:")
    for account, states in status["order_intents"].items():
        lines.append(f"  {account}: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    if not status["order_intents"]:
        lines.append("  none")
    for h in status["halted"]:
        kind = f" ({h['holder_kind']})" if h.get("holder_kind") else ""
        lines.append(f"  {h['account']}: HALTED by {h['by'] or '?'}{kind}: {h['reason'] or 'no reason given'}")
    pending = status["alert_actions_pending"]
    waiting = f" (oldest {pending['oldest_s']:.0f} s)" if pending["count"] else ""
    lines.append(f"alert actions waiting for the order leader's answer: {pending['count']}{waiting}")
    cancels = status["cancels_pending"]
    waiting = f" (oldest {cancels['oldest_s']:.0f} s)" if cancels["count"] else ""
    lines.append(f"cancel requests waiting for the order leader: {cancels['count']}{waiting}")
    lines.append("notification channels (outbox; delivered by the holder of the lease channels):")
    for name, c in status["channels"].items():
        oldest = f" (oldest {c['oldest_pending_s']:.0f} s)" if c["oldest_pending_s"] is not None else ""
        lines.append(f"  {name}: pending {c['pending']}{oldest}, delivered {c['delivered']}, failed {c['failed']}")
    if not status["channels"]:
        lines.append("  none")
    shown = ", ".join(status["followed"][:5]) + (" …" if len(status["followed"]) > 5 else "")
    lines.append(
        f"markets the operator follows (chartgen cluster follow): {len(status['followed'])}"
        + (f" ({shown})" if shown else "")
    )
    lines.append(f"markets with armed alerts: {status['markets_with_alerts']}")
    for worker, owned in status["assignment"].items():
        shown = ", ".join(owned[:5]) + (" …" if len(owned) > 5 else "")
        lines.append(f"  {worker}: {len(owned)}" + (f" ({shown})" if owned else ""))
    if status["unassigned_markets"]:
        lines.append(f"  no live worker: {len(status['unassigned_markets'])} unassigned")
    lines.append("alert evaluation (lag: the server's clock minus the newest tick evaluated):")
    for member, e in status["evaluation"].items():
        lines.append(f"  {member}: {e['markets']} markets, lag up to {e['max_lag_s']:.1f} s ({e['worst']})")
    if not status["evaluation"]:
        lines.append("  no live worker has evaluated a market")
    return "\n".join(lines)


async def _status(dsn: str, as_json: bool, liveness_s: float) -> int:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    try:
        if await db.fetchval("SELECT to_regclass('cluster_members')") is None:
            print(
                f"chartgen cluster: error: no cluster schema in {db.where}: run `chartgen cluster migrate` first",
                file=sys.stderr,
            )
            return 1
        status = await collect(db, liveness_s)
    finally:
        await db.close()
    print(orjson.dumps(status).decode() if as_json else render(status, liveness_s))
    return 0


async def _follow(dsn: str, ns: argparse.Namespace) -> int:
    settings = load_settings({}, ns.config)
    async with cluster_database(dsn) as db:
        print(await run_follow(db, settings, ns.action, getattr(ns, "symbols", []), getattr(ns, "interval", [])))
    return 0


def main(argv: Sequence[str]) -> int:
    ns = _parser().parse_args(list(argv))
    if ns.data_dir is not None:
        print(
            "chartgen cluster: error: --data-dir does not apply: the cluster's state is in PostgreSQL"
            " (postgres_dsn); drop --data-dir",
            file=sys.stderr,
        )
        return 2
    if ns.action == "status" and not 0 < ns.liveness <= 3600:
        print("chartgen cluster: error: --liveness must be between 0 and 3600 seconds", file=sys.stderr)
        return 2
    try:
        dsn = _dsn(ns)
    except (ValidationError, ConfigFileError) as exc:
        print(f"chartgen cluster: error: invalid settings: {exc}", file=sys.stderr)
        return 2
    if not dsn:
        print(
            "chartgen cluster: error: no PostgreSQL configured: set postgres_dsn in the settings file,"
            " CHARTGEN_POSTGRES_DSN, or pass --postgres-dsn",
            file=sys.stderr,
        )
        return 2
    try:
        if ns.action == "migrate":
            return asyncio.run(_migrate(dsn))
        if ns.action in ("follow", "unfollow", "followed"):
            return asyncio.run(_follow(dsn, ns))
        return asyncio.run(_status(dsn, ns.json, ns.liveness))
    except FollowError as exc:
        print(f"chartgen cluster: error: {exc}", file=sys.stderr)
        return 2
    except DatabaseError as exc:
        print(f"chartgen cluster: error: {exc}", file=sys.stderr)
        return 1
