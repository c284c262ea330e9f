"""A recorded intent reads back as the request it stands for (brokers/orders/views.py ``request_of``),
and a stored side, type or time in force that is not one we send is refused naming the value
(brokers/models.py ``side_of``, ``order_type_of``, ``time_in_force_of``) instead of travelling on."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from brokers.models import OrderRequest, order_type_of, side_of, time_in_force_of
from brokers.orders.store import MIGRATIONS, OrderStore
from brokers.orders.views import request_of
from storage import Database


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[OrderStore]:
    database = await Database.open(tmp_path / "chartgen.db")
    await database.migrate([MIGRATIONS])
    try:
        yield OrderStore(database)
    finally:
        await database.close()


@pytest.mark.parametrize(
    "req",
    [
        OrderRequest("BTCUSDT", "BUY", "LIMIT", "limit-1", quantity=Decimal("0.001"), price=Decimal("60000"),
                     time_in_force="GTC", owner="alice"),
        OrderRequest("ETHUSDT", "SELL", "MARKET", "market-1", quote_quantity=Decimal("25")),
        OrderRequest("BTCUSDT", "SELL", "STOP_LOSS_LIMIT", "stop-1", quantity=Decimal("0.002"),
                     price=Decimal("59000"), stop_price=Decimal("59500"), time_in_force="GTC", owner="bob"),
    ],
)  # fmt: skip
async def test_a_recorded_intent_reads_back_as_its_request(store: OrderStore, req: OrderRequest) -> None:
    await store.record_intent("binance", req, time.time())
    row = await store.get(req.client_order_id)
    assert row is not None
    assert request_of(row) == req


def test_stored_values_that_we_never_send_are_refused_by_name() -> None:
    assert side_of("SELL") == "SELL" and order_type_of("TAKE_PROFIT") == "TAKE_PROFIT"
    assert time_in_force_of(None) is None and time_in_force_of("IOC") == "IOC"
    with pytest.raises(ValueError, match=r"stored order side 'buy'"):
        side_of("buy")
    with pytest.raises(ValueError, match=r"stored order type 'OCO'"):
        order_type_of("OCO")
    with pytest.raises(ValueError, match=r"stored time in force 'GTX'"):
        time_in_force_of("GTX")
