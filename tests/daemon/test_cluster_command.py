"""``chartgen cluster migrate | status`` against a real PostgreSQL: the schema applied once, then
the members, leases, order intents and market assignment the cluster's state holds; clear
errors for a missing or unreachable ``postgres_dsn`` that never show its password."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from alerts import Alert, OutboxRow, PgAlertStore, PgOutboxStore
from alerts import enqueue as enqueue_outbox
from brokers import OrderRequest
from cluster import Leases, Membership, OrderIntents, owner_of
from storage import PostgresDatabase
from testkit.nginx import free_port
from tests.daemon.test_cli_state_options import chartgen

pytestmark = [pytest.mark.servers, pytest.mark.process]


async def test_migrate_then_status_shows_what_the_cluster_state_holds(postgres: Any, tmp_path: Path) -> None:
    dsn = await postgres.new_database()
    code, out, err = await chartgen("cluster", "migrate", "--postgres-dsn", dsn)
    assert code == 0, err
    assert "alerts v5" in out and "cluster_leases v1" in out and "cluster_orders v5" in out and "cluster_halt v3" in out
    assert "cluster_account v4" in out and "journal v2" in out and "mcp_bridge.oauth v1" in out
    assert "cluster_followed v1" in out and "dashboard v2" in out and "brokers.suspensions v1" in out
    code, _, err = await chartgen("cluster", "migrate", "--postgres-dsn", dsn)  # a second run changes nothing
    assert code == 0, err

    db = await PostgresDatabase.open(dsn)
    try:
        members = Membership(db)
        await members.heartbeat("worker@a", "worker", "10.0.0.1")
        await members.heartbeat("worker@b", "worker", "10.0.0.2", bus="local")
        await members.heartbeat("worker@gone", "worker")
        await db.execute(
            "UPDATE cluster_members SET last_seen = last_seen - interval '1 minute' WHERE id = 'worker@gone'"
        )
        await members.heartbeat("front@a", "front", "10.0.0.3", bus="nats")
        assert await Leases(db).acquire("orders/main", "worker@a", 30) is not None
        placed = uuid.uuid4().hex
        await OrderIntents(db).submit(
            "main",
            OrderRequest(symbol="BTCUSDT", side="BUY", type="MARKET", client_order_id=placed, quantity=None),
        )
        await db.execute(
            "INSERT INTO cluster_order_cancels (client_order_id, account, state, requested_at)"
            " VALUES ($1, 'main', 'queued', clock_timestamp() - interval '20 seconds')",
            placed,
        )
        now = time.time()
        await PgAlertStore(db).insert_many(
            [
                Alert(
                    id=uuid.uuid4().hex,
                    principal="p",
                    symbol=s,
                    interval="1h",
                    kind="price_above",
                    threshold=1.0,
                    created_at=now,
                )
                for s in ("BTCUSDT", "ETHUSDT", "SOLUSDT")
            ]
        )
        await db.execute(
            "INSERT INTO alert_actions (alert_id, principal, client_order_id, state, outcome, at)"
            " VALUES ('a1', 'p', 'cg-a-x', 'pending', '{}', $1)",
            now - 30,
        )
        async with db.transaction() as conn:
            await enqueue_outbox(
                conn,
                [OutboxRow("ops", f"n{i}", "p", "{}", now - 40 + i) for i in range(3)]
                + [OutboxRow("phone", "n0", "p", "{}", now)],
            )
        await PgOutboxStore(db).delivered([1], now)
    finally:
        await db.close()

    # --liveness 30: the heartbeats above stay fresh however long this `chartgen` takes to start under
    # load (four test workers on two cores); worker@gone's is a minute old either way
    code, out, err = await chartgen("cluster", "status", "--json", "--liveness", "30", "--postgres-dsn", dsn)
    assert code == 0, err
    status = orjson.loads(out)
    live = {m["id"]: m["live"] for m in status["members"]}
    assert live == {"worker@a": True, "worker@b": True, "worker@gone": False, "front@a": True}
    assert [(x["name"], x["holder"], x["token"]) for x in status["leases"]] == [("orders/main", "worker@a", 1)]
    assert status["order_intents"] == {"main": {"queued": 1}}
    assert status["buses"] == ["local", "nats"]
    assert status["alert_actions_pending"]["count"] == 1 and status["alert_actions_pending"]["oldest_s"] >= 30
    assert status["cancels_pending"]["count"] == 1 and status["cancels_pending"]["oldest_s"] >= 20
    markets = ["BTCUSDT 1h", "ETHUSDT 1h", "SOLUSDT 1h"]
    expected = {w: [m for m in markets if owner_of(m, ["worker@a", "worker@b"]) == w] for w in ("worker@a", "worker@b")}
    assert status["assignment"] == expected and status["markets_with_alerts"] == 3
    assert status["channels"]["ops"]["pending"] == 2 and status["channels"]["ops"]["delivered"] == 1
    assert status["channels"]["ops"]["oldest_pending_s"] >= 39 and status["channels"]["phone"]["pending"] == 1

    code, out, err = await chartgen("cluster", "status", "--liveness", "30", "--postgres-dsn", dsn)
    assert code == 0, err
    assert "orders/main  holder worker@a  token 1" in out and "worker@gone" in out and "dead" in out
    assert "alert actions waiting for the order leader's answer: 1 (oldest" in out
    assert "bus nats" in out and "BUS MISMATCH: live members use bus local and nats" in out
    assert "cancel requests waiting for the order leader: 1 (oldest" in out
    assert re.search(r"  ops: pending 2 \(oldest \d+ s\), delivered 1, failed 0", out)
    assert "  phone: pending 1" in out


async def test_missing_unreachable_or_unmigrated_postgres_is_a_clear_error(postgres: Any, tmp_path: Path) -> None:
    code, _, err = await chartgen("cluster", "status")
    assert code == 2 and "set postgres_dsn" in err, err
    config = tmp_path / "chartgen.toml"
    config.write_text(f'postgres_dsn = "postgresql://chartgen:hunter2-secret@127.0.0.1:{free_port()}/x"\n')
    code, _, err = await chartgen("cluster", "--config", str(config), "status")
    assert code == 1 and "postgres_dsn=postgresql://chartgen:***@" in err, err
    assert "hunter2-secret" not in err and "Traceback" not in err
    code, _, err = await chartgen("cluster", "status", "--postgres-dsn", await postgres.new_database())
    assert code == 1 and "run `chartgen cluster migrate` first" in err, err
