"""The order tracker: intent before send, unknown outcomes looked up (never re-sent), forward-only states."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal as D

import pytest

from brokers.filters import SymbolRules
from brokers.models import Actor, BrokerError, ExchangeOrder, Fill, OrderRequest, OutcomeUnknown, RateLimitedError
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from storage import Database
from tests.brokers.test_filters_and_positions import ENTRY


class FakeBroker:
    """An exchange in memory whose place() can fail in chosen ways."""

    name = "fake"

    def __init__(self) -> None:
        self.handler = None
        self.orders: dict[str, ExchangeOrder] = {}
        self.placed: list[str] = []
        self.fail_with: Exception | None = None
        self.accept_on_failure = False

    def set_event_handler(self, handler) -> None:  # type: ignore[no-untyped-def]
        self.handler = handler

    async def rules(self, symbol: str) -> SymbolRules | None:
        return SymbolRules.from_exchange_info(ENTRY) if symbol == "BTCUSDT" else None

    async def last_price(self, symbol: str) -> D | None:
        return D(65000)

    def _filled(self, req: OrderRequest) -> ExchangeOrder:
        qty = req.quantity or D(0)
        fill = Fill(len(self.placed), req.symbol, req.side, req.client_order_id, qty, D(65000), D(0), "USDT", 1)
        return ExchangeOrder(
            req.symbol, req.client_order_id, "FILLED", req.side, req.type, qty, qty, qty * 65000, fills=(fill,)
        )

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        self.placed.append(req.client_order_id)
        order = self._filled(req)
        if self.fail_with is not None:
            if self.accept_on_failure:
                self.orders[req.client_order_id] = order
            raise self.fail_with
        self.orders[req.client_order_id] = order
        return order

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        raise AssertionError("not used")

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        return self.orders.get(client_order_id)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        return []

    async def balances(self) -> list:  # type: ignore[type-arg]
        return []

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        return [f for o in self.orders.values() for f in o.fills if from_id is None or f.trade_id >= from_id]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def db() -> AsyncIterator[Database]:
    database = await Database.open(":memory:")
    await database.migrate([MIGRATIONS])
    try:
        yield database
    finally:
        await database.close()


def service(db: Database, broker: FakeBroker, clock: Clock) -> OrderService:
    svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None), clock=clock)
    svc.unknown_lookup_delays_s = (0.0, 0.0)
    return svc


BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01}
ADMIN = Actor(None, admin=True)


async def test_a_lost_answer_is_looked_up_by_client_order_id_not_resent(db: Database) -> None:
    """Timeout after the exchange accepted: the order is found by its id and reported Filled, placed once."""
    broker, clock = FakeBroker(), Clock()
    broker.fail_with, broker.accept_on_failure = OutcomeUnknown("timeout"), True
    out = await service(db, broker, clock).place_order(BUY)
    assert out["status"] == "Filled" and len(broker.placed) == 1


async def test_an_order_that_never_arrived_is_rejected_by_reconciliation_after_the_grace(db: Database) -> None:
    """Timeout before the exchange saw it: Pending, then Rejected on reconciliation — never re-sent."""
    broker, clock = FakeBroker(), Clock()
    broker.fail_with = OutcomeUnknown("timeout")
    svc = service(db, broker, clock)
    out = await svc.place_order(BUY)
    assert out["status"] == "Pending"
    assert (await svc.reconcile())["rejected"] == 0  # still within the grace period
    clock.now += 60
    assert (await svc.reconcile())["rejected"] == 1
    orders = await svc.get_orders("all", actor=ADMIN)
    assert orders[0]["state"] == "Rejected" and len(broker.placed) == 1


async def test_a_recorded_intent_found_on_the_exchange_after_a_crash_is_settled(db: Database) -> None:
    """Crash between record and answer: reconciliation adopts the exchange's order and its fill."""
    broker, clock = FakeBroker(), Clock()
    svc = service(db, broker, clock)
    req = OrderRequest("BTCUSDT", "BUY", "MARKET", "crash-1", quantity=D("0.01"))
    await svc.store.record_intent("fake", req, clock())
    broker.orders["crash-1"] = broker._filled(req)
    assert (await svc.reconcile())["settled"] == 1
    positions = await svc.get_positions()
    assert positions[0]["quantity"] == 0.01


async def test_states_only_move_forward_and_fills_are_stored_once(db: Database) -> None:
    """A late NEW after FILLED is ignored; the same fill from three sources counts once."""
    broker, clock = FakeBroker(), Clock()
    svc = service(db, broker, clock)
    out = await svc.place_order(BUY)
    order = broker.orders[out["order_id"]]
    await svc.on_update(order)
    stale = ExchangeOrder(order.symbol, order.client_order_id, "NEW", "BUY", "MARKET", D("0.01"), D(0), D(0))
    row = await svc.on_update(stale)
    assert row is not None and row.status == "FILLED"
    await svc.reconcile()
    assert len(await svc.store.fills("fake")) == 1


async def test_a_rate_limit_rejects_with_retry_after_in_the_error(db: Database) -> None:
    """429 → the order is Rejected locally and the error carries -32001 and retry_after_secs."""
    broker, clock = FakeBroker(), Clock()
    broker.fail_with = RateLimitedError("slow down", 12.5)
    svc = service(db, broker, clock)
    with pytest.raises(RateLimitedError) as info:
        await svc.place_order(BUY)
    assert info.value.code == -32001 and info.value.data == {"retry_after_secs": 13}
    assert (await svc.get_orders("all", actor=ADMIN))[0]["state"] == "Rejected"


async def test_a_client_order_id_cannot_be_used_twice(db: Database) -> None:
    """Reusing client_order_id is refused before anything is sent."""
    broker, clock = FakeBroker(), Clock()
    svc = service(db, broker, clock)
    await svc.place_order({**BUY, "client_order_id": "mine-1"})
    from brokers.orders.service import OrderInputError

    with pytest.raises(OrderInputError, match="already used"):
        await svc.place_order({**BUY, "client_order_id": "mine-1"})
    assert broker.placed == ["mine-1"]


async def test_a_failing_reconciliation_is_remembered_until_a_pass_succeeds(db: Database) -> None:
    broker = FakeBroker()
    svc = service(db, broker, Clock())
    await svc.reconcile()
    assert svc.reconcile_error is None

    async def down(symbol: str | None = None) -> list[ExchangeOrder]:
        raise BrokerError("cannot reach the exchange: timeout")

    broker.open_orders = down  # type: ignore[method-assign]
    with pytest.raises(BrokerError):
        await svc.reconcile()
    assert svc.reconcile_error == "cannot reach the exchange: timeout"
    del broker.open_orders
    await svc.reconcile()
    assert svc.reconcile_error is None
