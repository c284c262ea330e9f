"""The cluster's order path (cluster/orders.py) with real PostgreSQL and the exchange simulator:
intents from any process, sent by the one order leader; when the leader is killed or paused in
the middle of a burst, a new one takes over within the lease TTL, and every intent either reached
the exchange exactly once (by client order id) or was answered with an error — none doubled."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from brokers import BinanceBroker, OrderRequest
from cluster.order_leader import ORDER_PATH_MIGRATIONS, OrderLeader, run_leader
from cluster.orders import Answer, OrderIntents, lease_name
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import PostgresDatabase

pytestmark = [pytest.mark.slow, pytest.mark.servers, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "sim"
TTL_S = 2.0
RECV_WINDOW_S = 2.0


@pytest.fixture
async def orders_db(postgres: Any) -> AsyncIterator[tuple[str, PostgresDatabase]]:
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn)
    await db.migrate(ORDER_PATH_MIGRATIONS)
    try:
        yield dsn, db
    finally:
        await db.close()


def buy(n: int) -> OrderRequest:
    return OrderRequest(
        symbol="BTCUSDT",
        side="BUY",
        type="MARKET",
        client_order_id=f"c{n:03d}-{uuid.uuid4().hex[:8]}",
        quantity=Decimal("0.001"),
        owner="alice",
    )


def exchange_orders(sim: Any) -> Counter[str]:
    """How many orders the simulator holds per client order id."""
    return Counter(o.client_order_id for o in sim.exchange.account.orders.values())


async def leader_broker(sim: Any) -> BinanceBroker:
    """A Binance broker on the simulator with the tests' short recvWindow, its clock synced."""
    broker = BinanceBroker(
        api_key=DEFAULT_API_KEY,
        api_secret=DEFAULT_API_SECRET,
        rest_url=sim.url,
        recv_window_ms=int(RECV_WINDOW_S * 1000),
    )
    await broker.sync_time()
    return broker


def check_exactly_once(answers: list[Answer | None], sim: Any) -> tuple[int, int]:
    """Every intent answered; placed ⇔ on the exchange exactly once; rejected ⇔ not on it at all."""
    on_exchange = exchange_orders(sim)
    assert all(a is not None for a in answers), "an intent was never answered"
    placed = rejected = 0
    for a in answers:
        assert a is not None
        if a.state == "placed":
            assert on_exchange[a.client_order_id] == 1, a
            placed += 1
        else:
            assert a.state == "rejected" and a.error, a
            assert on_exchange[a.client_order_id] == 0, a
            rejected += 1
    assert max(on_exchange.values(), default=0) <= 1, "an order reached the exchange twice"
    return placed, rejected


async def test_two_candidates_one_sends_every_intent_once(orders_db: tuple[str, PostgresDatabase], sim: Any) -> None:
    dsn, db = orders_db
    pools = [await PostgresDatabase.open(dsn, min_size=1, max_size=3) for _ in range(2)]
    brokers = [await leader_broker(sim) for _ in range(2)]
    leaders = [
        OrderLeader(p, b, account=ACCOUNT, member_id=f"m{i}", ttl_s=TTL_S)
        for i, (p, b) in enumerate(zip(pools, brokers, strict=True))
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run_leader(leader, stop, idle_s=0.2)) for leader in leaders]
    try:
        intents = OrderIntents(db)
        reqs = [buy(i) for i in range(40)]
        await asyncio.gather(*(intents.submit(ACCOUNT, r) for r in reqs))
        answers = await asyncio.gather(*(intents.wait_answer(r.client_order_id, 30) for r in reqs))
        assert check_exactly_once(answers, sim) == (40, 0)
        with pytest.raises(ValueError, match="already used"):
            await intents.submit(ACCOUNT, reqs[0])
        await intents.close()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for b in brokers:
            await b.close()
        for p in pools:
            await p.close()


async def _leader_process(dsn: str, sim: Any, member: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cluster.order_leader_proc",
        dsn,
        sim.url,
        ACCOUNT,
        member,
        str(TTL_S),
        str(RECV_WINDOW_S),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"ready"
    return proc


async def _answered(db: PostgresDatabase) -> int:
    return int(await db.fetchval("SELECT COUNT(*) FROM cluster_order_intents WHERE state IN ('placed', 'rejected')"))


async def _until(cond: Any, within_s: float) -> None:
    async with asyncio.timeout(within_s):
        while True:
            if await cond():
                return
            await asyncio.sleep(0.005)  # polling state another process changes, bounded by the timeout


@pytest.mark.parametrize("how", ["kill", "pause"])
async def test_the_leader_dies_or_pauses_mid_burst_and_nothing_is_doubled(
    orders_db: tuple[str, PostgresDatabase], sim: Any, how: str
) -> None:
    """A burst of 100 intents; the leader (its own process) is SIGKILLed — or SIGSTOPped and later
    resumed — once 10 are answered.  A successor in this process leads within the TTL."""
    dsn, db = orders_db
    old = await _leader_process(dsn, sim, "old")
    successor_db = await PostgresDatabase.open(dsn, min_size=1, max_size=3, idle_in_transaction_timeout_s=TTL_S / 2)
    broker = await leader_broker(sim)
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    try:
        intents = OrderIntents(db)
        reqs = [buy(i) for i in range(100)]
        waiting = [asyncio.create_task(intents.wait_answer(r.client_order_id, 60)) for r in reqs]
        await asyncio.gather(*(intents.submit(ACCOUNT, r) for r in reqs))
        await _until(lambda: _answered_at_least(db, 10), 30)
        os.kill(old.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        stopped_at = time.monotonic()
        successor = OrderLeader(successor_db, broker, account=ACCOUNT, member_id="new", ttl_s=TTL_S)
        task = asyncio.create_task(run_leader(successor, stop, idle_s=0.1))
        await _until(lambda: _led_by(db, "new"), 10)
        took_over_s = time.monotonic() - stopped_at
        answers = await asyncio.gather(*waiting)
        await intents.close()
        if how == "pause":
            os.kill(old.pid, signal.SIGCONT)  # it finds its lease gone and sends nothing more
            old.terminate()
            await old.wait()
        placed, rejected = check_exactly_once(answers, sim)
        assert placed + rejected == 100 and placed >= 10
        assert took_over_s < 10
    finally:
        stop.set()
        if task is not None:
            await task
        if old.returncode is None:
            os.kill(old.pid, signal.SIGCONT)
            old.kill()
            await old.wait()
        await broker.close()
        await successor_db.close()


async def _answered_at_least(db: PostgresDatabase, n: int) -> bool:
    return await _answered(db) >= n


async def _led_by(db: PostgresDatabase, member: str) -> bool:
    holder = await db.fetchval(
        "SELECT holder FROM cluster_leases WHERE name = $1 AND expires_at > clock_timestamp()", lease_name(ACCOUNT)
    )
    return bool(holder == member)


async def test_an_order_signed_before_a_pause_is_refused_as_stale(sim: Any) -> None:
    """What closes the gap between the lease check and the request leaving: the order carries the
    time of the check, and the exchange refuses it once that is older than recvWindow — not
    re-signed with a fresh time (the broker's usual -1021 retry)."""
    from brokers import OrderRejected

    broker = await leader_broker(sim)
    try:
        stale = broker.exchange_time_ms() - int(RECV_WINDOW_S * 1000) - 500
        with pytest.raises(OrderRejected, match="recvWindow"):
            await broker.place_signed_at(buy(1), stale)
        assert exchange_orders(sim) == Counter()
        fresh = await broker.place_signed_at(buy(2), broker.exchange_time_ms())
        assert fresh.status == "FILLED" and sum(exchange_orders(sim).values()) == 1
    finally:
        await broker.close()


async def test_an_order_whose_answer_was_lost_is_settled_by_asking_the_exchange(
    orders_db: tuple[str, PostgresDatabase], sim: Any
) -> None:
    """The exchange accepts two orders but answers 503 (OutcomeUnknown): the leader does not resend;
    once recvWindow + margin has passed it finds them by client order id and answers placed."""
    from simulator import OrderFault

    _, db = orders_db
    broker = await leader_broker(sim)
    sim.exchange.faults.order_faults.append(OrderFault(kind="error_after_accept", count=2))
    leader = OrderLeader(db, broker, account=ACCOUNT, member_id="m", ttl_s=TTL_S, settle_margin_s=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(run_leader(leader, stop, idle_s=0.1))
    intents = OrderIntents(db)
    try:
        reqs = [buy(i) for i in range(3)]
        for r in reqs:
            await intents.submit(ACCOUNT, r)
        started = time.monotonic()
        answers = await asyncio.gather(*(intents.wait_answer(r.client_order_id, 30) for r in reqs))
        assert check_exactly_once(answers, sim) == (3, 0)
        assert time.monotonic() - started >= RECV_WINDOW_S  # the two unknown ones waited out the window
        assert sim.exchange.requests["POST /api/v3/order"] == 3  # nothing was sent again
    finally:
        stop.set()
        await task
        await intents.close()
        await broker.close()


async def test_the_order_path_rides_out_a_postgres_outage(sim: Any) -> None:
    """PostgreSQL stopped: a new order is refused clearly (not recorded, nothing sent), the leader
    reports itself degraded; PostgreSQL back on the same port: both recover by themselves, and every
    order recorded before or after was sent exactly once."""
    from storage import StorageUnavailable
    from testkit.postgres import postgres_server

    own = postgres_server()  # a server of its own: this test stops it
    server = await asyncio.to_thread(own.__enter__)
    broker = await leader_broker(sim)
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    db = leader_db = None
    try:
        dsn = await server.new_database()
        db = await PostgresDatabase.open(dsn, min_size=1, max_size=4)
        await db.migrate(ORDER_PATH_MIGRATIONS)
        leader_db = await PostgresDatabase.open(dsn, min_size=1, max_size=3)
        leader = OrderLeader(leader_db, broker, account=ACCOUNT, member_id="m", ttl_s=TTL_S)
        task = asyncio.create_task(run_leader(leader, stop, idle_s=0.1))
        intents = OrderIntents(db)
        before = [buy(i) for i in range(5)]
        for r in before:
            await intents.submit(ACCOUNT, r)
        answers = [await intents.wait_answer(r.client_order_id, 30) for r in before]
        await intents.close()

        await asyncio.to_thread(server.stop)
        refused = buy(99)
        with pytest.raises(StorageUnavailable, match="order not recorded, nothing sent"):
            await intents.submit(ACCOUNT, refused)
        await _until(lambda: _is_degraded(leader), 10)

        await asyncio.to_thread(server.start)
        after = [buy(100 + i) for i in range(5)]
        for r in after:
            await intents.submit(ACCOUNT, r)  # the pool reconnects by itself
        answers += [await intents.wait_answer(r.client_order_id, 30) for r in after]
        assert check_exactly_once(answers, sim) == (10, 0)
        assert exchange_orders(sim)[refused.client_order_id] == 0
        await _until(lambda: _is_degraded(leader, False), 10)
        await intents.close()
    finally:
        stop.set()
        if task is not None:
            await task
        await broker.close()
        for pool in (db, leader_db):
            if pool is not None:
                await pool.close()
        await asyncio.to_thread(own.__exit__, None, None, None)


async def _is_degraded(leader: OrderLeader, wanted: bool = True) -> bool:
    return (leader.degraded is not None) == wanted
