"""Degraded broker states reach /readyz and STATUS=: a failing reconciliation, a lost user-data stream."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from brokers import BrokerError
from daemon.parts.orders import _reconcile, broker_readiness
from daemon.single.modes import daemon_readiness, status_line


class FakeOrders:
    def __init__(self) -> None:
        self.fail: BrokerError | None = None
        self.reconcile_error: str | None = None
        self.user_stream = SimpleNamespace(connected=True)

    async def reconcile(self) -> dict[str, Any]:
        self.reconcile_error = None if self.fail is None else str(self.fail)
        if self.fail is not None:
            raise self.fail
        return {}


class ReadyEngine:
    def __init__(self) -> None:
        self.markets = [("BTCUSDT", "1m")]

    def readiness(self) -> tuple[bool, list[str]]:
        return True, []


async def test_broker_problems_make_the_daemon_degraded_until_they_clear() -> None:
    orders = FakeOrders()
    services: Any = SimpleNamespace(engine=ReadyEngine(), orders=orders, alerts=None)
    job = _reconcile(orders)  # type: ignore[arg-type]
    await job()
    assert daemon_readiness(services) == (True, [])

    orders.fail = BrokerError("cannot reach binance: timeout")
    with pytest.raises(BrokerError):
        await job()
    ready, reasons = daemon_readiness(services)
    assert not ready and reasons == ["broker: reconciliation failing (cannot reach binance: timeout)"]
    assert status_line(services).startswith("degraded: broker: reconciliation failing")

    orders.user_stream.connected = False
    assert len(broker_readiness(orders)) == 2  # type: ignore[arg-type]

    orders.fail = None
    orders.user_stream.connected = True
    await job()
    assert daemon_readiness(services) == (True, [])
