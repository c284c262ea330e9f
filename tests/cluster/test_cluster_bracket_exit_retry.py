"""A bracket's exit refused by the account's order rate limit (HTTP 429, -1015) in a cluster
(cluster/bracket_exits.py): the order leader puts it back to ``waiting`` with the refusal and a
not-before time, does not send it before ``Retry-After``, then sends it once with the same ids; a real
refusal (a filter) stays ``rejected``.  Real PostgreSQL and the exchange simulator's ``order_rate``
fault; the simulator's own lists and request counts are the oracle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from structlog.testing import capture_logs

from cluster import bracket_exits
from cluster.order_leader import OrderLeader
from cluster.orders import OrderIntents
from storage import PostgresDatabase
from testkit.workers import until
from tests.cluster import test_cluster_lists
from tests.cluster.test_cluster_brackets import OCO_POSTS, _filled_entries, _row
from tests.cluster.test_cluster_lists import ACCOUNT, _lists_on_exchange, _on_exchange
from tests.cluster.test_order_leader import leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

sim = test_cluster_lists.sim  # the fixture: the real-clock simulator trading BTCUSDT at 65,000


@pytest.fixture
async def control(sim: Any) -> AsyncIterator[Any]:
    """POST to the simulator's control API: ``await control("faults", {...})``."""
    async with aiohttp.ClientSession() as http:

        async def post(path: str, body: dict[str, Any]) -> None:
            async with http.post(f"{sim.url}/sim/v1/{path}", json=body) as r:
                assert r.status == 200, await r.text()

        yield post


async def _pg_now(db: PostgresDatabase) -> float:
    return float(await db.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8"))


async def test_an_exit_refused_for_the_order_rate_waits_out_retry_after_then_is_sent_once(
    sim: Any, control: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """per_10s 1 (an OCO counts 2): the leader's exit send is refused — waiting again with the refusal and
    its not-before, logged at warning, shown by the front without waiting; the next round, before
    Retry-After, sends nothing; once the limit is lifted and the wait is over it is sent, once."""
    _, db = cluster
    broker = await leader_broker(sim)
    # stand ~6 s into a 10-s ORDERS window, so the refusal says Retry-After 3 or 4 s
    await control("advance", {"seconds": ((6_200 - sim.exchange.now_ms() % 10_000) % 10_000) / 1000})
    await broker.sync_time()
    await control("faults", {"order_rate": {"per_10s": 1}})
    (exit_oco,) = await _filled_entries(db, broker, ["rl-e1"], "waiting")
    list_id = exit_oco.list_client_id
    leader = OrderLeader(db, broker, account=ACCOUNT, member_id="m", ttl_s=2.0)
    intents = OrderIntents(db)
    try:
        with capture_logs() as logs:
            await leader.step()
        row = await _row(db, list_id)
        answer = orjson.loads(row["answer"])
        assert (row["state"], row["sender_token"], row["claimed_at"]) == ("waiting", None, None)
        assert answer["code"] == "RATE_LIMITED" and "-1015" in answer["error"]
        assert answer["not_before"] > await _pg_now(db)
        assert sim.exchange.requests[OCO_POSTS] == 1 and not _lists_on_exchange(sim)
        limited = [e for e in logs if e["event"] == "bracket_exit_rate_limited"]
        assert len(limited) == 1 and limited[0]["log_level"] == "warning" and limited[0]["retry_after_s"] >= 1
        assert not [e for e in logs if e["event"] == "bracket_exit_refused"]

        view = await bracket_exits.exit_view(intents, ACCOUNT, exit_oco, wait_s=30.0)  # answered at once
        assert view["state"] == "waiting" and "order rate limit" in view["note"] and "-1015" in view["error"]

        await leader.step()  # before Retry-After: not claimed, not sent
        assert await _pg_now(db) < answer["not_before"]
        assert (await _row(db, list_id))["state"] == "waiting" and sim.exchange.requests[OCO_POSTS] == 1

        await control("faults", {"reset": True})

        async def placed() -> bool:
            await leader.step()
            return (await _row(db, list_id))["state"] == "placed"

        await until(placed, 20.0)
        assert await _pg_now(db) >= answer["not_before"]
        assert list(_lists_on_exchange(sim)) == [list_id] and sim.exchange.requests[OCO_POSTS] == 2
        legs = (exit_oco.take_profit.client_order_id, exit_oco.stop.client_order_id)
        assert {_on_exchange(sim)[c].status for c in legs} == {"NEW"}
        await leader.step()
        assert sim.exchange.requests[OCO_POSTS] == 2
        view = await bracket_exits.exit_view(intents, ACCOUNT, exit_oco, wait_s=0)
        assert view["state"] == "placed" and {leg["order_id"] for leg in view["legs"]} == set(legs)
    finally:
        await intents.close()
        await leader.resign()
        await broker.close()


async def test_an_exit_refused_by_a_filter_stays_rejected(
    sim: Any, control: Any, cluster: tuple[str, PostgresDatabase]
) -> None:
    """MAX_NUM_ORDERS 1: the filled entry's two-leg exit is refused (-2010) — rejected, never sent again."""
    _, db = cluster
    broker = await leader_broker(sim)
    await control("faults", {"max_num_orders": 1})
    (exit_oco,) = await _filled_entries(db, broker, ["flt-e1"], "waiting")
    leader = OrderLeader(db, broker, account=ACCOUNT, member_id="m", ttl_s=2.0)
    try:
        await leader.step()
        row = await _row(db, exit_oco.list_client_id)
        assert row["state"] == "rejected" and "MAX_NUM_ORDERS" in orjson.loads(row["answer"])["error"]
        await leader.step()
        assert sim.exchange.requests[OCO_POSTS] == 1 and not _lists_on_exchange(sim)
    finally:
        await leader.resign()
        await broker.close()
