"""cancel_order and positions on a cluster, in one process: a front's order intents and cancel
requests (cluster/front_orders.py, cluster/cancels.py), a real order leader (cluster/order_leader.py)
and the account mirror (cluster/account_mirror.py, cluster/account_fills.py) on a real PostgreSQL,
against the exchange simulator.

- a resting order cancelled at the front is cancelled on the exchange by the leader, and the intent's
  answer says so at once; cancelling it again, or a filled one, is an invalid transition; another
  principal's order is "not found";
- an order a former leader already cancelled (the exchange answers "unknown order") is settled by
  asking for it: cancelled; one that filled before the cancel reached the exchange fails with its
  state, and the intent records the fill;
- an intent no leader took yet is withdrawn instead (never sent);
- positions from the mirrored fills equal the exchange account's balance changes (an independent
  oracle: the simulator's balances), with the entry price of the fills' weighted average.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from brokers import Actor, BinanceBroker, OrderInputError, OrderRejected, OrderRequest, SafetyLimits
from cluster.account_mirror import AccountMirror, AccountView
from cluster.front_orders import FrontOrders
from cluster.order_leader import OrderLeader, run_leader
from cluster.orders import OrderIntents
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]

ACCOUNT = "sim"
SYMBOL = "BTCUSDT"
ALICE = Actor("alice")


@dataclass
class Setup:
    db: PostgresDatabase
    sim: Any
    broker: BinanceBroker
    front: FrontOrders
    price: Decimal


@pytest.fixture
async def setup(cluster: tuple[str, PostgresDatabase], sim: Any) -> AsyncIterator[Setup]:
    _dsn, db = cluster
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await broker.sync_time()
    intents = OrderIntents(db)
    price = await broker.last_price(SYMBOL)
    assert price is not None
    try:
        yield Setup(db, sim, broker, FrontOrders(intents, ACCOUNT, queue_wait_s=10, answer_wait_s=20), price)
    finally:
        await intents.close()
        await broker.close()


@pytest.fixture
async def leading(setup: Setup) -> AsyncIterator[OrderLeader]:
    leader = OrderLeader(setup.db, setup.broker, account=ACCOUNT, member_id="leader", ttl_s=3.0)
    stop = asyncio.Event()
    task = asyncio.create_task(run_leader(leader, stop, idle_s=0.2))
    try:
        yield leader
    finally:
        stop.set()
        await task


def _order(side: str, kind: str, qty: str, price: Decimal | None = None) -> OrderRequest:
    return OrderRequest(
        symbol=SYMBOL,
        side=side,  # type: ignore[arg-type]
        type=kind,  # type: ignore[arg-type]
        client_order_id=f"t-{uuid.uuid4().hex[:12]}",
        quantity=Decimal(qty),
        price=price,
        time_in_force="GTC" if kind == "LIMIT" else None,
    )


async def _place(s: Setup, side: str, kind: str, qty: str, price: Decimal | None = None) -> dict[str, Any]:
    return await s.front.place_parsed(_order(side, kind, qty, price), None, owner="alice")


def _sim_order(s: Setup, cid: str) -> Any:
    account = s.sim.exchange.account
    return account.find(SYMBOL, None, cid)


async def test_cancel_at_a_front_is_carried_out_once_by_the_leader(setup: Setup, leading: OrderLeader) -> None:
    s = setup
    far = (s.price * Decimal("0.5")).quantize(Decimal("0.01"))
    resting = await _place(s, "BUY", "LIMIT", "0.001", far)
    assert resting["status"] == "Open"
    cid = resting["order_id"]
    with pytest.raises(OrderInputError, match=f"order not found: {cid}"):
        await s.front.cancel_order(cid, actor=Actor("bob"))
    assert await s.front.cancel_order(cid, actor=ALICE) == {"ok": True}
    assert _sim_order(s, cid).status == "CANCELED"
    answer = await s.front.intents.answer(cid)
    assert answer is not None and answer.order is not None and answer.order.status == "CANCELED"
    with pytest.raises(OrderInputError, match="invalid transition: Cancelled"):
        await s.front.cancel_order(cid, actor=ALICE)
    assert leading.cancelled == 1

    # A leader that died after cancelling: the exchange no longer knows the order as open.
    again = (await _place(s, "BUY", "LIMIT", "0.001", far))["order_id"]
    s.sim.exchange.account.cancel(_sim_order(s, again), s.sim.exchange.now_ms())
    assert await s.front.cancel_order(again, actor=Actor(None, admin=True)) == {"ok": True}

    # Filled before the cancel reached the exchange (the mirror still said open): refused with its state.
    filled = (await _place(s, "BUY", "LIMIT", "0.001", far))["order_id"]
    s.sim.exchange.account.match(SYMBOL, far, s.sim.exchange.now_ms())
    assert _sim_order(s, filled).status == "FILLED"
    with pytest.raises(OrderRejected, match="invalid transition: Filled"):
        await s.front.cancel_order(filled, actor=ALICE)
    answer = await s.front.intents.answer(filled)
    assert answer is not None and answer.order is not None and answer.order.status == "FILLED"
    with pytest.raises(OrderInputError, match="invalid transition: Filled"):
        await s.front.cancel_order(filled, actor=ALICE)
    rows = dict(await s.db.fetch("SELECT client_order_id, state FROM cluster_order_cancels"))
    assert rows == {cid: "done", again: "done", filled: "failed"}
    with pytest.raises(OrderInputError, match="order not found"):
        await s.front.cancel_order("never-placed", actor=ALICE)


async def test_a_queued_intent_is_withdrawn_and_never_sent(setup: Setup) -> None:
    s = setup
    req = _order("BUY", "MARKET", "0.001")
    await s.front.intents.submit(ACCOUNT, dataclasses.replace(req, owner="alice"))
    assert await s.front.cancel_order(req.client_order_id, actor=ALICE) == {"ok": True}
    answer = await s.front.intents.answer(req.client_order_id)
    assert answer is not None and answer.state == "rejected" and answer.refused
    assert "cancelled" in (answer.error or "")
    leader = OrderLeader(s.db, s.broker, account=ACCOUNT, member_id="late", ttl_s=3.0)
    assert await leader.step() == 0  # nothing left to send
    await leader.resign()
    assert _sim_order(s, req.client_order_id) is None
    await s.db.execute(
        "UPDATE cluster_order_intents SET state = 'sending' WHERE client_order_id = $1", req.client_order_id
    )
    with pytest.raises(OrderInputError, match="being sent"):
        await s.front.cancel_order(req.client_order_id, actor=ALICE)


async def test_positions_from_the_mirrored_fills_equal_the_exchange_account(setup: Setup, leading: OrderLeader) -> None:
    s = setup
    view = AccountView(s.db, ACCOUNT)
    mirror = AccountMirror(s.db, s.broker, ACCOUNT, limits=SafetyLimits())
    base = SYMBOL.removesuffix("USDT")

    def held() -> Decimal:
        balances = {b["asset"]: b for b in s.sim.exchange.account.balances_view()}
        b = balances.get(base)
        return Decimal(0) if b is None else Decimal(b["free"]) + Decimal(b["locked"])

    before = held()
    bought = [await _place(s, "BUY", "MARKET", q) for q in ("0.003", "0.002")]
    sold = await _place(s, "SELL", "MARKET", "0.001")
    assert all(o["status"] == "Filled" for o in [*bought, sold])
    t0 = s.sim.exchange.now_ms()
    await mirror.refresh()
    fetched = mirror.fills.fetched
    listed = await view.get_positions()
    t1 = s.sim.exchange.now_ms()
    assert [p["symbol"] for p in listed] == [SYMBOL]
    pos = listed[0]
    assert Decimal(str(pos["quantity"])) == held() - before  # base commissions included
    orders = [_sim_order(s, o["order_id"]) for o in bought]
    avg_in = sum((o.cumulative_quote for o in orders), Decimal(0)) / sum((o.executed_qty for o in orders), Decimal(0))
    assert pos["entry_price"] == pytest.approx(float(avg_in), rel=1e-9)
    # marked at the exchange's last price when the mirror was refreshed (by this refresh or a later
    # one of the leader's): one of the prices the simulator's path took in that window, to the tick
    path = s.sim.exchange.markets[SYMBOL].path
    window = path.price(np.arange(t0, t1 + 1, dtype=np.int64))
    assert Decimal(str(pos["current_price"])) in {Decimal(f"{p:.8f}") for p in window}
    assert pos["as_of"]

    await mirror.refresh()  # nothing new executed: no trades fetched again
    assert mirror.fills.fetched == fetched
    await _place(s, "SELL", "MARKET", "0.001")
    await mirror.refresh()
    assert mirror.fills.fetched > fetched
    assert Decimal(str((await view.get_positions())[0]["quantity"])) == held() - before
    stored = await s.db.fetchval("SELECT COUNT(*) FROM cluster_account_fills")
    trades = await s.broker.trades(SYMBOL)
    assert stored == len(trades)  # each trade once

    stale = AccountView(s.db, ACCOUNT, stale_s=0.0)
    with pytest.raises(OrderInputError, match="s old"):
        await stale.get_positions()
