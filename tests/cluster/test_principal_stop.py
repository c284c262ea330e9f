"""Suspended and revoked principals on a cluster (real PostgreSQL, the exchange simulator): the order
leader refuses their intents in its fenced admission transaction while other principals' orders
are sent, and revoking a token or an OAuth grant on PostgreSQL cancels the principal's schedules and
removes its alerts' actions in the revoking transaction — all of it or none.  A suspended or revoked
principal's cancel-open (``trading suspend --cancel-open --cluster``, ``token revoke --cancel-open
--cluster``, a front's suspension service) is carried out by the order leader: its resting orders,
OCO and working OTOCO cancelled on the exchange, the exit OCO of its filled bracket entry and every
other principal's orders kept; a resume of the halt does not drop it."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from alerts import Alert, alert_row
from brokers import (
    REVOKED_MESSAGE,
    SUSPENDED_MESSAGE,
    HaltAuthority,
    OrderRequest,
    PgSuspensionStore,
    SuspensionService,
)
from cluster.front_orders import FrontOrders
from cluster.halt import ClusterHalt, PendingCancels, PrincipalCancels, cancel_scope_in, read_in
from cluster.order_leader import OrderLeader, run_leader
from cluster.orders import INTENTS_CHANNEL, OrderIntents
from mcp_bridge import PgOAuthStore, PgTokenStore, RefreshRow
from storage import PostgresDatabase
from testkit.daemon_proc import clean_env
from testkit.workers import real_clock_simulator
from tests.cluster.test_cluster_lists import SYMBOL, _oco, _on_exchange, leading
from tests.cluster.test_order_leader import ACCOUNT, TTL_S, exchange_orders, leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

PRICE = 65000.0
_BRACKET = {"take_profit": Decimal("68250.00"), "stop_loss": Decimal("58500.00"), "stop_limit": None}
LIMIT_BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}


def buy(owner: str) -> OrderRequest:
    return OrderRequest(
        symbol="BTCUSDT",
        side="BUY",
        type="MARKET",
        client_order_id=f"p-{uuid.uuid4().hex[:12]}",
        quantity=Decimal("0.001"),
        owner=owner,
    )


async def test_the_leader_refuses_a_suspended_or_revoked_principal_and_sends_the_others(
    cluster: tuple[str, PostgresDatabase], sim: Any
) -> None:
    dsn, db = cluster
    tokens, suspensions = PgTokenStore(db), PgSuspensionStore(db)
    _, gone = await tokens.create("gone", scopes=["trade"])
    await tokens.revoke_all("gone")
    await suspensions.suspend("alice", "cli:op", "probe")
    broker = await leader_broker(sim)
    pool = await PostgresDatabase.open(dsn, min_size=1, max_size=3)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_leader(OrderLeader(pool, broker, account=ACCOUNT, member_id="m0", ttl_s=TTL_S), stop)
    )
    intents = OrderIntents(db)
    try:
        reqs = {who: buy(who) for who in ("alice", gone.principal, "bob")}
        for req in reqs.values():
            await intents.submit(ACCOUNT, req)
        answers = {who: await intents.wait_answer(r.client_order_id, 30) for who, r in reqs.items()}
        alice, revoked, bob = answers["alice"], answers[gone.principal], answers["bob"]
        assert (
            alice is not None and alice.state == "rejected" and alice.refused and SUSPENDED_MESSAGE in str(alice.error)
        )
        assert revoked is not None and revoked.state == "rejected" and REVOKED_MESSAGE in str(revoked.error)
        assert bob is not None and bob.state == "placed"
        on_exchange = exchange_orders(sim)
        assert (
            on_exchange[reqs["alice"].client_order_id] == 0 and on_exchange[reqs[gone.principal].client_order_id] == 0
        )

        assert await suspensions.unsuspend("alice")
        again = buy("alice")
        await intents.submit(ACCOUNT, again)
        answer = await intents.wait_answer(again.client_order_id, 30)
        assert answer is not None and answer.state == "placed"
    finally:
        stop.set()
        await task
        await intents.close()
        await broker.close()
        await pool.close()


async def _arm(db: PostgresDatabase, principal: str, n: int) -> tuple[str, str]:
    """An active schedule and an armed action alert of ``principal``: their ids."""
    now = time.time()
    sid = f"s-{n}"
    await db.execute(
        "INSERT INTO schedules (id, owner, order_args, every, status, created_at, updated_at)"
        " VALUES ($1, $2, $3, '1s', 'active', $4, $4)",
        sid,
        principal,
        json.dumps(LIMIT_BUY),
        now,
    )
    alert = Alert(
        id=str(uuid.uuid4()), principal=principal, symbol="BTCUSDT", interval="1m", kind="price_above",
        threshold=70000.0, created_at=now, action={"place_order": LIMIT_BUY},
    )  # fmt: skip
    await db.execute(
        "INSERT INTO alerts (id, principal, symbol, interval, kind, record, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        *alert_row(alert),
    )
    return sid, alert.id


async def test_revoking_on_postgres_cancels_schedules_and_actions_in_one_transaction(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    _, db = cluster
    tokens = PgTokenStore(db)
    _, bad = await tokens.create("bad", scopes=["trade"])
    _, good = await tokens.create("good", scopes=["trade"])
    bad_sid, bad_alert = await _arm(db, bad.principal, 1)
    good_sid, good_alert = await _arm(db, good.principal, 2)

    # a failing step rolls everything back: the token stays active, the schedule and action stay
    await db.execute("ALTER TABLE revoked_principals RENAME TO revoked_principals_away")
    with pytest.raises(Exception, match="revoked_principals"):
        await tokens.revoke_all("bad")
    await db.execute("ALTER TABLE revoked_principals_away RENAME TO revoked_principals")
    assert all(t.active for t in await tokens.list())
    assert await db.fetchval("SELECT status FROM schedules WHERE id = $1", bad_sid) == "active"

    done = await tokens.revoke_all("bad")
    assert done.stopped.principals == [bad.principal] and done.stopped.schedules == [bad_sid]
    assert done.stopped.alert_actions == [bad_alert]
    statuses = {r["id"]: r["status"] for r in await db.fetch("SELECT id, status FROM schedules")}
    assert statuses == {bad_sid: "cancelled", good_sid: "active"}
    records = {r["id"]: json.loads(r["record"]) for r in await db.fetch("SELECT id, record FROM alerts")}
    assert "action" not in records[bad_alert] and records[good_alert]["action"] is not None  # alerts stay
    assert await db.fetchval("SELECT 1 FROM revoked_principals WHERE principal = $1", bad.principal) == 1


async def test_an_oauth_grant_revoked_on_postgres_stops_it_until_a_new_grant(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    _, db = cluster
    store = PgOAuthStore(db)
    sid, alert_id = await _arm(db, "oauth:c1", 3)
    now = time.time()
    async with db.transaction() as conn:
        await store.insert_refresh(conn, "refresh-1", RefreshRow("c1", "oauth:c1", ["trade"], None, now + 3600))
    stopped = await store.revoke_grant("c1")
    assert stopped.principals == ["oauth:c1"] and stopped.schedules == [sid] and stopped.alert_actions == [alert_id]
    assert await db.fetchval("SELECT 1 FROM revoked_principals WHERE principal = 'oauth:c1'") == 1
    async with db.transaction() as conn:  # approved again: a new grant may trade
        await store.insert_refresh(conn, "refresh-2", RefreshRow("c1", "oauth:c1", ["trade"], None, now + 3600))
    assert await db.fetchval("SELECT 1 FROM revoked_principals WHERE principal = 'oauth:c1'") is None


# --- cancel-open of a suspended or revoked principal, carried out by the order leader (issue 36) ------


def _resting(i: int) -> OrderRequest:
    return OrderRequest(
        SYMBOL, "BUY", "LIMIT", f"r{i}-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.001"),
        price=Decimal(f"{PRICE * 0.9 - i:.2f}"), time_in_force="GTC",
    )  # fmt: skip


def _open(sim: Any) -> set[str]:
    return {cid for cid, o in _on_exchange(sim).items() if o.status == "NEW"}


async def _cli(dsn: str, *args: str) -> tuple[int, str, str]:
    env = clean_env({"CHARTGEN_CLUSTER_ACCOUNT": ACCOUNT})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", *args, "--cluster", "--postgres-dsn", dsn,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(90):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def lists_sim() -> AsyncIterator[Any]:
    """The simulator trading SYMBOL at PRICE (order lists, brackets)."""
    async with real_clock_simulator([SYMBOL]) as running:
        running.exchange.trade(SYMBOL, PRICE, 0.01)
        yield running


async def test_a_stopped_principals_cancel_open_is_carried_out_by_the_leader_keeping_its_protective_exits(
    lists_sim: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    sim = lists_sim
    dsn, db = cluster
    tokens = PgTokenStore(db)
    for who in ("alice", "carol"):
        await tokens.create(who, principal=who, scopes=["trade"])
    broker = await leader_broker(sim)
    async with leading(db, broker, member_id="m") as (_leader, intents):
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        place = front.place_parsed
        # alice: two resting orders, a plain OCO, a limit-entry bracket (OTOCO, entry working) and a
        # filled market entry whose exit OCO protects what it bought
        alice = {(await place(_resting(i), None, owner="alice"))["order_id"] for i in range(2)}
        buy = OrderRequest(SYMBOL, "BUY", "MARKET", f"b-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.006"))
        assert (await place(buy, None, owner="alice"))["status"] == "Filled"
        oco = await front.place_parsed_oco(_oco("0.002", PRICE * 1.05, PRICE * 0.95), owner="alice")
        alice |= {leg["order_id"] for leg in oco["legs"]}
        otoco = await place(_resting(5), _BRACKET, owner="alice")
        entry = OrderRequest(SYMBOL, "BUY", "MARKET", f"e-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.002"))
        bracket = (await place(entry, _BRACKET, owner="alice"))["bracket"]
        assert bracket["state"] == "placed", bracket
        exits = {leg["order_id"] for leg in bracket["legs"]}
        # bob: a resting order and an OCO; carol and dave: a resting order each
        bob = {(await place(_resting(10), None, owner="bob"))["order_id"]}
        bobs_buy = OrderRequest(SYMBOL, "BUY", "MARKET", f"bb-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.003"))
        assert (await place(bobs_buy, None, owner="bob"))["status"] == "Filled"
        bobs_oco = await front.place_parsed_oco(_oco("0.002", PRICE * 1.06, PRICE * 0.94), owner="bob")
        bob |= {leg["order_id"] for leg in bobs_oco["legs"]}
        carol = (await place(_resting(20), None, owner="carol"))["order_id"]
        dave = (await place(_resting(30), None, owner="dave"))["order_id"]
        otoco_open = _open(sim) - alice - exits - bob - {carol, dave}
        assert otoco_open, "the OTOCO's working order rests"
        assert alice | exits | bob | {carol, dave} <= _open(sim)

        # regression: `trading suspend --cancel-open --cluster` was refused
        code, out, err = await _cli(dsn, "trading", "suspend", "alice", "--cancel-open", "--wait", "60")
        assert code == 0, out + err
        assert "cancel-open alice: 2 orders, 2 lists cancelled, 2 protective exit legs kept" in out, out
        assert await db.fetchval("SELECT 1 FROM trading_suspensions WHERE principal = 'alice'") == 1
        left = _open(sim)
        assert not (alice | otoco_open) & left, left  # her resting orders, her OCO and her OTOCO: cancelled
        assert exits <= left and bob | {carol, dave} <= left  # the protective exit and everyone else's stay
        assert otoco["order_id"] not in left

        # regression: `token revoke --cancel-open --cluster` was refused
        code, out, err = await _cli(dsn, "token", "revoke", "carol", "--cancel-open", "--wait", "60")
        assert code == 0, out + err
        assert "stopped trading of carol" in out and "cancel-open carol: 1 orders, 0 lists cancelled" in out, out
        assert carol not in _open(sim)

        # the front's (dashboard's) suspension service: failed with a note before
        suspensions = SuspensionService(
            PgSuspensionStore(db, cancels=PrincipalCancels(db, ACCOUNT, wake_channel=INTENTS_CHANNEL)),
            None,
            cancel_wait_s=60,
        )
        done = await suspensions.suspend("dave", by="dashboard", cancel_open=True)
        assert done["suspended"] and done["cancel_open"]["orders_cancelled"] == 1, done
        assert not done["cancel_open"]["failures"] and "pending" not in done["cancel_open"]
        assert _open(sim) == exits | bob


async def test_a_resume_keeps_a_stopped_principals_pending_cancel_request(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    _, db = cluster
    store = PgSuspensionStore(db, cancels=PrincipalCancels(db, ACCOUNT, wake_channel=INTENTS_CHANNEL))
    halt = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL, wait_s=0.0)
    try:
        _, requests = await store.suspend_cancelling("alice", "cli:op", None)
        answer = await halt.halt(reason="x", by=HaltAuthority.token("bob", admin=False), cancel_open=True)
        assert str(answer["cancel_open"]).startswith("pending")  # no leader runs
        await halt.resume(by=HaltAuthority.token("bob", admin=False))
        state = await read_in(db, ACCOUNT)
        assert state.cancel_pending  # regression: the resume dropped alice's request with the halt's
        pending = await cancel_scope_in(db, ACCOUNT, state.cancel_done_seq, state.cancel_seq)
        assert pending == PendingCancels(frozenset({"alice"}), frozenset({"alice"}))  # bob's was dropped
        result = await store.cancel_results(requests, 0.0)
        assert result["pending"] and "has not carried it out" in result["pending"][0]
    finally:
        await halt.close()
