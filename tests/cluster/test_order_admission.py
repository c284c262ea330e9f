"""The guard rails and the halt switch on the cluster's order path, with real PostgreSQL and the
exchange simulator: a front's place_order (cluster/front_orders.py) is judged by the order leader
(cluster/leader_admission.py) with the single node's limits and messages; a halt set at a front
stops the next order before it is signed; cancel-open is carried out by the leader; an order no
leader takes is withdrawn and never sent."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from brokers import (
    HALTED_MESSAGE,
    HaltAuthority,
    OrderInputError,
    OrderRefused,
    OrderRejected,
    OrderRequest,
    SafetyLimits,
)
from cluster.front_orders import FrontOrders
from cluster.halt import ClusterHalt
from cluster.order_leader import OrderLeader, run_leader
from cluster.orders import INTENTS_CHANNEL, OrderIntents
from simulator import FEE
from storage import PostgresDatabase
from tests.cluster.test_order_leader import exchange_orders, leader_broker

pytestmark = [pytest.mark.servers, pytest.mark.process]

ACCOUNT = "sim"


class Path:
    """A front's order placer and halt switch, and (when started) one leader, on one database."""

    def __init__(self, db: PostgresDatabase, sim: Any) -> None:
        self.db, self.sim = db, sim
        self.intents = OrderIntents(db)
        self.front = FrontOrders(self.intents, ACCOUNT, queue_wait_s=5.0, answer_wait_s=20.0)
        self.halt = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL, wait_s=10.0)
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.leader: OrderLeader | None = None

    async def start_leader(self, limits: SafetyLimits | None = None) -> OrderLeader:
        self.broker = await leader_broker(self.sim)
        self.leader = OrderLeader(self.db, self.broker, account=ACCOUNT, member_id="m0", ttl_s=2.0, limits=limits)
        self.task = asyncio.create_task(run_leader(self.leader, self.stop, idle_s=0.2))
        return self.leader

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task
            await self.broker.close()
        await self.intents.close()
        await self.halt.close()


@pytest.fixture
async def path(cluster: tuple[str, PostgresDatabase], sim: Any) -> AsyncIterator[Path]:
    p = Path(cluster[1], sim)
    try:
        yield p
    finally:
        await p.close()


def order(symbol: str = "BTCUSDT", **kw: Any) -> OrderRequest:
    fields: dict[str, Any] = {"side": "BUY", "type": "MARKET", "quote_quantity": Decimal(600)} | kw
    return OrderRequest(symbol=symbol, client_order_id=f"t-{uuid.uuid4().hex[:12]}", **fields)


async def refusal(path: Path, req: OrderRequest) -> str:
    with pytest.raises(OrderRefused) as caught:
        await path.front.place_parsed(req, None, owner="alice")
    return str(caught.value)


async def test_the_leader_applies_the_guard_rails_with_the_single_nodes_messages(path: Path, sim: Any) -> None:
    limits = SafetyLimits(
        max_order_notional=Decimal(1000), max_daily_notional=Decimal(1500), allowed_symbols=frozenset({"BTCUSDT"})
    )
    await path.start_leader(limits)
    usdt, btc = sim.exchange.account.free["USDT"], sim.exchange.account.free["BTC"]
    first = await path.front.place_parsed(order(), None, owner="alice")
    assert first["status"] == "Filled" and first["exchange_status"] == "FILLED"
    big = await refusal(path, order(quote_quantity=Decimal(1200)))
    assert "exceeds the per-order limit 1000" in big and "trading_max_order_notional" in big
    second = await path.front.place_parsed(order(), None, owner="alice")
    assert second["status"] == "Filled"
    over = await refusal(path, order())
    assert "over the daily limit 1500" in over and "would take today's traded value to 1800" in over
    other = await refusal(path, order("ETHUSDT"))
    assert "ETHUSDT is not in the allowed symbols (BTCUSDT)" in other
    # Only the two admitted orders reached the exchange, and the answers equal its balances.
    on_exchange = exchange_orders(sim)
    assert sorted(on_exchange.values()) == [1, 1] and set(on_exchange) == {first["order_id"], second["order_id"]}
    bought = Decimal(str(first["filled_quantity"])) + Decimal(str(second["filled_quantity"]))
    spent = sum(
        (o.cumulative_quote for o in sim.exchange.account.orders.values()), Decimal(0)
    )  # what the exchange charged
    assert sim.exchange.account.free["USDT"] == usdt - spent
    assert sim.exchange.account.free["BTC"] == btc + bought - bought * FEE
    assert path.leader is not None and path.leader.refused == 3


async def test_a_halt_at_a_front_stops_the_next_order_and_resume_lets_it_through(path: Path, sim: Any) -> None:
    await path.start_leader()
    state = await path.halt.halt(reason="maintenance", by=HaltAuthority.token("alice", admin=False))
    assert state["halted"] is True and state["reason"] == "maintenance"
    assert await refusal(path, order()) == HALTED_MESSAGE
    assert not exchange_orders(sim)
    again = await path.halt.halt(reason="still", by=HaltAuthority.operator("dashboard"))
    assert again["since"] == state["since"], "a second halt keeps the first one's time"
    assert again["by"] == "dashboard" and again["holder_kind"] == "operator", "the operator takes the halt over"
    resumed = await path.halt.resume(by=HaltAuthority.operator("dashboard"))
    assert resumed["halted"] is False
    placed = await path.front.place_parsed(order(), None, owner="alice")
    assert placed["status"] == "Filled" and exchange_orders(sim)[placed["order_id"]] == 1


async def test_cancel_open_is_carried_out_by_the_leader(path: Path, sim: Any) -> None:
    await path.start_leader()
    price = await path.broker.last_price("BTCUSDT")
    assert price is not None
    limit = (price * Decimal("0.95")).quantize(Decimal("0.01"))
    resting = await path.front.place_parsed(
        order(quote_quantity=None, quantity=Decimal("0.001"), type="LIMIT", price=limit, time_in_force="GTC"),
        None,
        owner="alice",
    )
    assert resting["exchange_status"] == "NEW"
    result = await path.halt.halt(
        reason="stop everything", by=HaltAuthority.token("alice", admin=False), cancel_open=True
    )
    assert result["halted"] is True and result["cancel_pending"] is False
    assert result["cancel_open"]["orders_cancelled"] == 1 and result["cancel_open"]["failures"] == []
    statuses = {o.client_order_id: o.status for o in sim.exchange.account.orders.values()}
    assert statuses[resting["order_id"]] == "CANCELED"


async def test_a_cancel_open_without_a_leader_is_answered_pending(path: Path) -> None:
    path.halt.wait_s = 0.3
    result = await path.halt.halt(reason=None, by=HaltAuthority.operator("cli"), cancel_open=True)
    assert result["halted"] is True and result["cancel_pending"] is True
    assert "has not carried it out" in result["cancel_open"]


async def test_an_order_no_leader_takes_is_withdrawn_and_never_sent(path: Path, sim: Any) -> None:
    path.front.queue_wait_s = 0.3
    req = order()
    why = await refusal(path, req)
    assert "not sent — no order leader of account 'sim' took it within 0.3 s" in why
    await path.start_leader()
    placed = await path.front.place_parsed(order(), None, owner="alice")  # the leader runs now
    assert placed["status"] == "Filled"
    assert exchange_orders(sim)[req.client_order_id] == 0, "the withdrawn order was sent"


async def test_a_withdrawal_cannot_cross_a_claim(path: Path) -> None:
    req = order()
    await path.intents.submit(ACCOUNT, req)
    await path.db.execute(
        "UPDATE cluster_order_intents SET state = 'sending', sender_token = 1 WHERE client_order_id = $1",
        req.client_order_id,
    )
    assert await path.intents.withdraw(req.client_order_id, "late") is False
    assert (
        await path.db.fetchval(
            "SELECT state FROM cluster_order_intents WHERE client_order_id = $1", req.client_order_id
        )
        == "sending"
    )


async def test_what_a_front_refuses_itself(path: Path) -> None:
    with pytest.raises(OrderInputError, match="may not start with 'cg-'"):
        await path.front.place_parsed(OrderRequest("BTCUSDT", "BUY", "MARKET", "cg-a-1", Decimal(1)), None, owner="a")
    used = order()
    await path.intents.submit(ACCOUNT, used)
    with pytest.raises(OrderRefused, match="already used"):
        await path.front.place_parsed(used, None, owner="alice")


async def test_an_exchange_rejection_is_answered_as_the_single_node_does(path: Path, sim: Any) -> None:
    await path.start_leader(SafetyLimits(max_order_notional=None, max_daily_notional=None))
    assert "NOPEUSDT is not a tradable symbol" in await refusal(path, order("NOPEUSDT"))
    with pytest.raises(OrderRejected, match="insufficient balance"):
        await path.front.place_parsed(order(quote_quantity=Decimal(20000)), None, owner="alice")


async def test_an_order_that_cannot_be_judged_is_refused_and_not_sent(path: Path, sim: Any) -> None:
    leader = await path.start_leader()

    async def broken(symbol: str) -> None:
        raise RuntimeError("boom")

    leader.checks._rules = broken  # an unexpected failure inside the checks
    assert "could not be checked (RuntimeError); nothing was sent" in await refusal(path, order())
    assert not exchange_orders(sim)
