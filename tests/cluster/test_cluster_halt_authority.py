"""Halt and resume rights on a cluster (cluster/halt.py, brokers/halt_authority.py; issue 36), with
real PostgreSQL, a real order leader and the exchange simulator as the oracle:

- a ``trade`` principal's cancel-open at a front cancels, by the leader, only the orders and order
  lists whose intents that principal owns; another principal's resting orders and OCO stay open on
  the exchange; the operator's cancel-open cancels everyone's;
- a principal cannot resume another's halt nor the operator's (dashboard) halt, not even after
  halting over it; its setter, an admin token and the operator can; the refusal names the holder;
- migration 2 records the holder kind of a halt set before it.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from brokers import HaltAuthority, HaltRefused, OrderRequest
from cluster.front_orders import FrontOrders
from cluster.halt import HALT_MIGRATIONS, ClusterHalt, read_in
from cluster.orders import INTENTS_CHANNEL
from storage import Migrations, PostgresDatabase
from tests.cluster.test_cluster_lists import ACCOUNT, SYMBOL, _oco, _on_exchange, leading, sim  # noqa: F401
from tests.cluster.test_order_leader import leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

ALICE, BOB = HaltAuthority.token("alice", admin=False), HaltAuthority.token("bob", admin=False)
ROOT = HaltAuthority.token("root", admin=True)
OPERATOR = HaltAuthority.operator("dashboard", "op")
PRICE = 65000.0


def _resting(i: int) -> OrderRequest:
    return OrderRequest(
        SYMBOL, "BUY", "LIMIT", f"r{i}-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.001"),
        price=Decimal(f"{PRICE * 0.9 - i:.2f}"), time_in_force="GTC",
    )  # fmt: skip


def _open(exchange: Any) -> set[str]:
    return {cid for cid, o in _on_exchange(exchange).items() if o.status == "NEW"}


async def test_a_principals_cancel_open_cancels_only_its_own_and_it_cannot_lift_others_halts(
    sim: Any,  # noqa: F811
    cluster: tuple[str, PostgresDatabase],
) -> None:
    _, db = cluster
    broker = await leader_broker(sim)
    async with leading(db, broker, member_id="m") as (_leader, intents):
        front = FrontOrders(intents, ACCOUNT, last_price=broker.last_price)
        halt = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL, wait_s=20.0)
        try:
            alices = [(await front.place_parsed(_resting(i), None, owner="alice"))["order_id"] for i in range(2)]
            bobs = [(await front.place_parsed(_resting(10 + i), None, owner="bob"))["order_id"] for i in range(3)]
            buy = OrderRequest(SYMBOL, "BUY", "MARKET", f"buy-{uuid.uuid4().hex[:8]}", quantity=Decimal("0.005"))
            assert (await front.place_parsed(buy, None, owner="bob"))["status"] == "Filled"
            protection = await front.place_parsed_oco(_oco("0.004", PRICE * 1.05, PRICE * 0.95), owner="bob")
            legs = {leg["order_id"] for leg in protection["legs"]}
            assert _open(sim) == set(alices) | set(bobs) | legs

            # regression: a principal's cancel-open cancelled every principal's orders and lists
            answer = await halt.halt(reason="mine", by=ALICE, cancel_open=True)
            assert (answer["by"], answer["holder_kind"]) == ("mcp:alice", "principal")
            done = answer["cancel_open"]
            assert (done["orders_cancelled"], done["lists_cancelled"], done["owners"]) == (2, 0, ["alice"])
            assert _open(sim) == set(bobs) | legs  # bob's orders and his OCO's protection stay

            # regression: any trade token resumed any halt
            with pytest.raises(HaltRefused, match="halted by token mcp:alice") as info:
                await halt.resume(by=BOB)
            assert "mcp:alice itself" in str(info.value)
            assert (await read_in(db, ACCOUNT)).halted
            assert (await halt.resume(by=ALICE))["halted"] is False

            await halt.halt(reason="incident", by=OPERATOR)
            with pytest.raises(HaltRefused, match=r"halted by the operator \(dashboard:op\)"):
                await halt.resume(by=BOB)
            over = await halt.halt(reason="me", by=BOB, cancel_open=True)  # halting is allowed...
            assert (over["by"], over["reason"]) == ("dashboard:op", "incident")  # ...the holder stays
            assert "keeps holding it" in over["note"]
            assert (over["cancel_open"]["orders_cancelled"], over["cancel_open"]["lists_cancelled"]) == (3, 1)
            with pytest.raises(HaltRefused):
                await halt.resume(by=BOB)
            assert (await halt.resume(by=ROOT))["halted"] is False  # an admin token lifts the operator's

            # the operator's cancel-open cancels every principal's orders
            more = [(await front.place_parsed(_resting(20 + i), None, owner=o))["order_id"] for i, o in enumerate("ab")]
            assert set(more) == _open(sim)  # each answered once the leader sent it
            everyone = await halt.halt(reason="all", by=OPERATOR, cancel_open=True)
            assert everyone["cancel_open"]["orders_cancelled"] == 2 and everyone["cancel_open"]["owners"] is None
            assert _open(sim) == set()
            assert (await halt.resume(by=OPERATOR))["halted"] is False
        finally:
            await halt.close()


async def test_takeover_rules_and_the_holder_in_the_row(cluster: tuple[str, PostgresDatabase]) -> None:
    _, db = cluster
    halt = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL)
    try:
        await halt.halt(reason="a", by=ALICE)
        assert (await halt.halt(reason="b", by=BOB))["by"] == "mcp:alice"
        with pytest.raises(HaltRefused):
            await halt.resume(by=BOB)
        assert (await halt.halt(reason="root", by=ROOT))["by"] == "mcp:root"
        assert (await halt.halt(reason="op", by=OPERATOR))["by"] == "dashboard:op"
        assert (await halt.halt(reason="root again", by=ROOT))["by"] == "dashboard:op"
        guard = HaltAuthority.protection("max_drawdown")
        assert (await halt.halt(reason="dd", by=guard))["by"] == "dashboard:op"
        await halt.resume(by=OPERATOR)
        held = await halt.halt(reason="dd", by=guard)
        assert (held["by"], held["holder_kind"]) == ("protection:max_drawdown", "protection")
        with pytest.raises(HaltRefused, match="only the operator"):
            await halt.resume(by=ALICE)
        assert (await halt.resume(by=ROOT))["halted"] is False
        assert (await halt.resume(by=BOB))["halted"] is False  # nothing to lift: no refusal
    finally:
        await halt.close()


async def test_migration_2_records_the_holder_of_a_halt_set_before_it(postgres: Any) -> None:
    dsn = await postgres.new_database()
    db = await PostgresDatabase.open(dsn)
    try:
        await db.migrate([Migrations(HALT_MIGRATIONS.package, HALT_MIGRATIONS.steps[:1])])
        await db.execute(
            "INSERT INTO cluster_halt (account, halted, reason, halted_by, halted_at) VALUES"
            " ('a', TRUE, 'old', 'mcp:alice', clock_timestamp()), ('b', TRUE, 'old', 'cli', clock_timestamp()),"
            " ('c', FALSE, NULL, NULL, NULL)"
        )
        await db.migrate([HALT_MIGRATIONS])
        kinds = {a: (await read_in(db, a)).holder_kind for a in "abc"}
        assert kinds == {"a": "principal", "b": "operator", "c": None}
    finally:
        await db.close()
