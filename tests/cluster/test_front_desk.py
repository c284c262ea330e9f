"""The front's desk for the agent tools (cluster/front_desk.py), in one process on a real PostgreSQL,
against the simulator — the cases the end-to-end test (test_front_agent_trading.py) does not reach:

- a leg no leader takes is withdrawn: no order id, nothing sent; retried with the same client order
  id it is reported as that refusal (its id is used up) with the fix, and still nothing is sent;
- a client order id recorded for another principal is refused, a pair the exchange does not list is
  INVALID_SYMBOL; neither records an intent;
- the simulation's guard rails are the leader's: none published yet (no snapshot) refuses the leg
  (fail closed); published ones are read back exactly (per-order, daily, allowed symbols; limits off);
  the daily limit counts the account's admitted intents of the last 24 hours plus the pending legs;
  the cluster's halt switch refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers import (
    HaltAuthority,
    LimitExceeded,
    OrderRefused,
    OrderRequest,
    PublicVenue,
    SafetyLimits,
    TradingHalted,
    place_leg,
)
from cluster.account_mirror import AccountView, guard_json, guard_of
from cluster.front_desk import FrontLegs, FrontSimulation
from cluster.front_orders import FrontOrders
from cluster.halt import ClusterHalt
from cluster.orders import INTENTS_CHANNEL, OrderIntents
from engine import BinanceRest, SymbolDirectory
from storage import PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]

ACCOUNT = "sim"
SYMBOL = "BTCUSDT"


@dataclass
class Desk:
    db: PostgresDatabase
    sim: Any
    legs: FrontLegs
    simulation: FrontSimulation


@pytest.fixture
async def desk(cluster: tuple[str, PostgresDatabase], sim: Any) -> AsyncIterator[Desk]:
    _dsn, db = cluster
    intents = OrderIntents(db)
    async with aiohttp.ClientSession() as session:
        venue = PublicVenue(rest := BinanceRest(session, sim.url), SymbolDirectory(rest))
        orders = FrontOrders(intents, ACCOUNT, queue_wait_s=0.3, answer_wait_s=1.0)
        try:
            yield Desk(db, sim, FrontLegs(orders, venue), FrontSimulation(db, ACCOUNT, AccountView(db, ACCOUNT), venue))
        finally:
            await intents.close()


def _args(cid: str, qty: str = "0.001", symbol: str = SYMBOL) -> dict[str, Any]:
    return {"symbol": symbol, "side": "buy", "type": "market", "quantity": qty, "client_order_id": cid}


async def test_a_leg_no_leader_takes_is_withdrawn_and_its_retry_sends_nothing(desk: Desk) -> None:
    placed = await place_leg(desk.legs, _args("ag-none-0"), "alice", None)
    assert placed.client_order_id is None and placed.outcome is None
    assert placed.code == "NETWORK_ERROR" and "no order leader" in (placed.message or "")
    again = await place_leg(desk.legs, _args("ag-none-0"), "alice", None)
    assert again.client_order_id is None and not again.replayed
    assert "call with a new tool_call_id" in (again.message or "")
    assert desk.sim.exchange.order_arrivals == {}


async def test_another_principals_id_and_an_unlisted_pair_record_nothing(desk: Desk) -> None:
    await place_leg(desk.legs, _args("ag-bob-0"), "bob", None)  # withdrawn: no leader
    taken = await place_leg(desk.legs, _args("ag-bob-0"), "alice", None)
    assert (taken.client_order_id, taken.code) == (None, "INVALID_ARGUMENT") and "another's" in (taken.message or "")
    unlisted = await place_leg(desk.legs, _args("ag-x-0", symbol="NOPEUSDT"), "alice", None)
    assert unlisted.code == "INVALID_SYMBOL" and "not a trading pair" in (unlisted.message or "")
    count = await desk.db.fetchval("SELECT COUNT(*) FROM cluster_order_intents")
    assert count == 1  # bob's only


async def _publish(db: PostgresDatabase, limits: SafetyLimits) -> None:
    await db.execute(
        "INSERT INTO cluster_account_mirror (account, broker, refreshed_at, guard) VALUES ($1, 'binance',"
        " clock_timestamp(), $2) ON CONFLICT (account) DO UPDATE SET refreshed_at = excluded.refreshed_at,"
        " guard = excluded.guard",
        ACCOUNT,
        guard_json(limits),
    )


def _order(qty: str) -> OrderRequest:
    return OrderRequest(symbol=SYMBOL, side="BUY", type="MARKET", client_order_id="simulated-0", quantity=Decimal(qty))


async def test_the_simulation_judges_with_the_leaders_published_guard_rails(desk: Desk) -> None:
    with pytest.raises(OrderRefused, match="guard rails could not be read"):
        await desk.simulation.evaluate(_order("0.001"), pending=Decimal(0))
    price = dict(desk.sim.exchange.start_prices())[SYMBOL]  # about 65,000
    await _publish(desk.db, SafetyLimits(max_order_notional=Decimal(price), max_daily_notional=Decimal(price)))
    checked = await desk.simulation.evaluate(_order("0.5"), pending=Decimal(0))
    assert checked.notional == pytest.approx(Decimal(price) / 2, rel=Decimal("0.02"))
    with pytest.raises(LimitExceeded, match="per-order limit"):
        await desk.simulation.evaluate(_order("2"), pending=Decimal(0))
    with pytest.raises(LimitExceeded, match="daily limit"):  # half of it pending in earlier legs
        await desk.simulation.evaluate(_order("0.6"), pending=Decimal(price) / 2)
    req = dataclasses.replace(_order("0.001"), client_order_id="admitted-0")
    await OrderIntents(desk.db).submit(ACCOUNT, req)
    await desk.db.execute(  # as the leader's admission leaves it
        "UPDATE cluster_order_intents SET state = 'placed', notional = $1, claimed_at = clock_timestamp()",
        Decimal(price) * Decimal("0.6"),
    )
    with pytest.raises(LimitExceeded, match="daily limit"):
        await desk.simulation.evaluate(_order("0.5"), pending=Decimal(0))
    await _publish(desk.db, SafetyLimits(max_order_notional=None, max_daily_notional=None))
    await desk.simulation.evaluate(_order("2"), pending=Decimal(10**9))  # limits off: only the filters
    await _publish(desk.db, SafetyLimits(allowed_symbols=frozenset({"ETHUSDT"})))
    with pytest.raises(LimitExceeded, match="ETHUSDT"):
        await desk.simulation.evaluate(_order("0.001"), pending=Decimal(0))
    await _publish(desk.db, SafetyLimits())
    halt = ClusterHalt(desk.db, ACCOUNT, wake_channel=INTENTS_CHANNEL)
    await halt.halt(reason="test", by=HaltAuthority.token("alice", admin=False), cancel_open=False)
    with pytest.raises(TradingHalted):
        await desk.simulation.evaluate(_order("0.001"), pending=Decimal(0))
    await halt.close()


decimals = st.none() | st.decimals(min_value=Decimal("0.00000001"), max_value=Decimal(10**12), places=8)


@settings(max_examples=50, deadline=None)
@given(decimals, decimals, st.frozensets(st.from_regex(r"[A-Z0-9]{2,12}", fullmatch=True), max_size=5))
def test_guard_rails_read_back_as_published(
    order: Decimal | None, daily: Decimal | None, symbols: frozenset[str]
) -> None:
    limits = SafetyLimits(max_order_notional=order, max_daily_notional=daily, allowed_symbols=symbols)
    assert guard_of(guard_json(limits)) == limits
