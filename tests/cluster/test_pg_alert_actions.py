"""Alert actions on PostgreSQL (alerts/pg_actions.py, pg_action_outcomes.py, daemon/parts/cluster_actions.py),
against a real server: the order intent is recorded in the firing transaction — present exactly when the alert
fired (a rolled-back firing leaves neither), a refusal inside it leaves the firing and no intent —;
the pushed frame waits for the outcome and then takes the principal's next number, after frames
fired meanwhile; settling twice (two workers at once) queues one frame and one announcement; an
intent no leader took is withdrawn by the settle and reported refused."""

from __future__ import annotations

import asyncio
import time
import uuid
from decimal import Decimal
from typing import Any

import orjson
import pytest

from alerts import (
    ActionRefused,
    ActionRunner,
    Alert,
    Firing,
    PgActionOutcomes,
    PgAlertStore,
    PushHub,
    Subscription,
    action_client_id,
)
from brokers import ExchangeOrder
from cluster.orders import ORDER_JSON, OrderIntents
from daemon import ClusterActionExecutor
from storage import PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]

ACCOUNT = "main"


def alert(level: float, *, action: bool = True) -> Alert:
    order = {"place_order": {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": "0.001"}}
    return Alert(
        id=str(uuid.uuid4()),
        principal="alice",
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=level,
        created_at=1.0,
        armed_at=1.0,
        action=order if action else None,
    )


def firing(a: Alert, value: float = 101.0) -> Firing:
    return Firing(alert_id=a.id, value=value, triggered_at=time.time(), bar_time=0)


class Setup:
    def __init__(self, db: PostgresDatabase) -> None:
        self.announced: list[dict[str, list[int]]] = []
        self.store = PgAlertStore(db, announce_push=self.announced.append)
        self.intents = OrderIntents(db)
        self.executor = ClusterActionExecutor(self.intents, ACCOUNT, queue_wait_s=0.2, answer_wait_s=0.2)
        self.outcomes = PgActionOutcomes(self.store)

    async def fire(self, alerts: list[Alert]) -> Any:
        plans = await ActionRunner(self.executor, self.outcomes, PushHub()).plan(alerts)  # type: ignore[arg-type]
        return await self.store.fire([firing(a) for a in alerts], plans, self.executor.commit_in)

    async def intent_states(self) -> dict[str, str]:
        rows = await self.store.db.fetch("SELECT client_order_id, state FROM cluster_order_intents")
        return {r["client_order_id"]: r["state"] for r in rows}

    async def frames(self) -> list[tuple[int, str]]:
        rows = await self.store.db.fetch("SELECT seq, alert_id FROM push_queue WHERE principal = 'alice' ORDER BY seq")
        return [(int(r["seq"]), r["alert_id"]) for r in rows]

    async def answer(self, cid: str, body: str) -> None:
        await self.store.db.execute(
            "UPDATE cluster_order_intents SET state = 'placed', answer = $2 WHERE client_order_id = $1", cid, body
        )


@pytest.fixture
async def setup(cluster: tuple[str, PostgresDatabase]) -> Any:
    _, db = cluster
    s = Setup(db)
    await s.store.subscribe(Subscription(principal="alice"), 0.0)
    try:
        yield s
    finally:
        await s.intents.close()


def placed(cid: str) -> str:
    """A leader's answer body for a filled order (as cluster/order_leader.py records it)."""
    order = ExchangeOrder(
        symbol="BTCUSDT", client_order_id=cid, status="FILLED", side="BUY", type="MARKET",
        orig_qty=Decimal("0.001"), executed_qty=Decimal("0.001"), cumulative_quote=Decimal("60"),
        exchange_order_id="7",
    )  # fmt: skip
    return orjson.dumps({"order": ORDER_JSON.dump_python(order)}, default=str).decode()


async def test_the_intent_is_recorded_with_the_firing_and_the_frame_waits_for_the_outcome(setup: Setup) -> None:
    with_action, plain = alert(100.0), alert(100.0, action=False)
    await setup.store.insert_many([with_action, plain])
    fired = await setup.fire([with_action, plain])
    cid = action_client_id(with_action.id)
    assert {f.alert.id: (f.action or {}).get("status") for f in fired} == {with_action.id: "Pending", plain.id: None}
    assert await setup.intent_states() == {cid: "queued"}
    assert await setup.frames() == [(1, plain.id)]  # the action alert's frame waits for its outcome
    assert setup.announced == [{"alice": [1]}]

    later = alert(100.0, action=False)  # fired while the order is out: it takes the next number
    await setup.store.insert(later)
    await setup.store.fire([firing(later)])
    await setup.answer(cid, placed(cid))
    outcome = await setup.executor.outcome(cid)
    assert outcome == {
        "type": "place_order",
        "order_id": cid,
        "status": "Filled",
        "exchange_status": "FILLED",
        "filled_quantity": 0.001,
        "fill_price": 60000.0,
    }
    await asyncio.gather(*(setup.outcomes.record(with_action.id, outcome) for _ in range(3)))  # three workers
    assert await setup.frames() == [(1, plain.id), (2, later.id), (3, with_action.id)]
    assert setup.announced[-1] == {"alice": [3]} and len(setup.announced) == 3  # one announcement for it
    assert await setup.outcomes.get(with_action.id) == ("done", outcome)
    polled = {n["alert_id"]: n.get("action") for n in await setup.store.drain("alice")}
    assert polled[with_action.id] == outcome and polled[plain.id] is None
    assert await setup.outcomes.pending() == []


async def test_a_rolled_back_firing_leaves_no_intent_and_a_refusal_leaves_the_firing(setup: Setup) -> None:
    a = alert(100.0)
    await setup.store.insert(a)
    plans = await ActionRunner(setup.executor, setup.outcomes, PushHub()).plan([a])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="crash"):
        async with setup.store.db.transaction() as conn:
            await setup.store._fire_tx(conn, [firing(a)], plans, setup.executor.commit_in)
            assert await conn.fetchval("SELECT COUNT(*) FROM cluster_order_intents") == 1
            raise RuntimeError("crash before commit")
    assert await setup.intent_states() == {} and await setup.outcomes.get(a.id) is None
    assert await setup.store.count_of("alice") == 1  # still armed

    async def refuse(conn: Any, token: Any) -> None:
        await conn.execute("INSERT INTO cluster_order_intents (client_order_id, account, request, state)"
                           " VALUES ('half', 'main', '{}', 'queued')")  # fmt: skip
        raise ActionRefused("trading is halted by the operator")

    fired = await setup.store.fire([firing(a)], plans, refuse)
    assert [f.action for f in fired] == [
        {"type": "place_order", "order_id": None, "status": "Refused", "reason": "trading is halted by the operator"}
    ]
    assert await setup.intent_states() == {}  # the savepoint took the half-written intent back
    assert [alert_id for _, alert_id in await setup.frames()] == [a.id]  # a refusal is known now: pushed at once
    assert (await setup.outcomes.get(a.id) or ("",))[0] == "done"


async def test_an_intent_no_leader_took_is_withdrawn_and_refused(setup: Setup) -> None:
    a = alert(100.0)
    await setup.store.insert(a)
    await setup.fire([a])
    cid = action_client_id(a.id)
    token = await setup.executor.prepare("alice", a.id, dict((a.action or {})["place_order"]))
    outcome = await setup.executor.send(token)  # no leader runs: withdrawn after queue_wait_s
    assert outcome["status"] == "Refused" and "no order leader" in outcome["reason"]
    assert await setup.intent_states() == {cid: "rejected"}
    assert await setup.executor.outcome(cid) == outcome  # the settle path reads the same answer
    assert (await setup.executor.outcome("cg-a-never"))["reason"] == "no order was recorded"  # type: ignore[index]


async def test_a_settle_leaves_a_fresh_queued_intent_alone(setup: Setup) -> None:
    slow = ClusterActionExecutor(setup.intents, ACCOUNT, queue_wait_s=60.0)
    a = alert(100.0)
    await setup.store.insert(a)
    await setup.fire([a])
    assert await slow.outcome(action_client_id(a.id)) is None  # queued a moment ago: the leader may take it
    assert await setup.outcomes.pending() == [(a.id, action_client_id(a.id))]
