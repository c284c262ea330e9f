"""Order benchmarks: the daemon's own overhead per order, and reconciliation of 1,000 open orders.

    python -m bench.orders

- Overhead: from the ``place_order`` tool call entering the router to the request leaving
  for the exchange (the broker's ``place`` being called): argument checks, filters, limits,
  the SQLite intent record and the SUBMITTED audit line.  Target p50 ≤ 5 ms.
- Reconciliation: 1,000 resting orders on the simulator (placed through the Binance broker),
  then one full reconciliation pass.  Target ≤ 2 s.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from brokers.binance_broker import BinanceBroker
from brokers.filters import SymbolRules
from brokers.models import ExchangeOrder, OrderRequest
from brokers.order_store import MIGRATIONS, OrderStore
from brokers.service import OrderService, SafetyLimits
from brokers.simulator.app import start_simulator
from brokers.simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET
from config.database import Database
from daemon.logging import configure_logging
from daemon.trades_log import TradesLog
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services

RULES = {
    "symbol": "BTCUSDT",
    "status": "TRADING",
    "baseAsset": "BTC",
    "quoteAsset": "USDT",
    "filters": [
        {"filterType": "PRICE_FILTER", "minPrice": "0.01", "maxPrice": "1000000", "tickSize": "0.01"},
        {"filterType": "LOT_SIZE", "minQty": "0.00001", "maxQty": "9000", "stepSize": "0.00001"},
        {"filterType": "NOTIONAL", "minNotional": "5", "applyMinToMarket": True},
    ],
}


class TimingBroker:
    """Accepts every order at once and records when each request would have left."""

    name = "timing"

    def __init__(self) -> None:
        self.sent_at: dict[str, float] = {}
        self._rules = SymbolRules.from_exchange_info(RULES)

    def set_event_handler(self, handler: Any) -> None:
        return None

    async def rules(self, symbol: str) -> SymbolRules | None:
        return self._rules

    async def last_price(self, symbol: str) -> Decimal | None:
        return Decimal(65000)

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        self.sent_at[req.client_order_id] = time.perf_counter()
        qty = req.quantity or Decimal(0)
        return ExchangeOrder(req.symbol, req.client_order_id, "NEW", req.side, req.type, qty, Decimal(0), Decimal(0))


async def bench_overhead(n: int = 1000) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        await db.migrate([MIGRATIONS])
        broker = TimingBroker()
        svc = OrderService(
            broker,
            OrderStore(db),
            audit=TradesLog(Path(tmp) / "trades.log").append,
            limits=SafetyLimits(max_daily_notional=Decimal(10**9)),
        )
        router = ToolRouter(Services(charts=None, orders=svc))  # type: ignore[arg-type]
        samples = []
        for i in range(n):
            cid = f"bench-{i}"
            args = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001, "price": 60000,
                    "client_order_id": cid}  # fmt: skip
            t0 = time.perf_counter()
            result = await router.call("place_order", args, "bench")
            assert not result.is_error, result.content[0].text
            samples.append((broker.sent_at[cid] - t0) * 1000)
        await db.close()
    samples.sort()
    return {"p50_ms": statistics.median(samples), "p99_ms": samples[int(n * 0.99) - 1]}


async def bench_reconcile(n: int = 1000) -> dict[str, float]:
    sim = await start_simulator(clock="real", symbols=["BTCUSDT"], balances={"USDT": Decimal(10_000_000)})
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = await Database.open(Path(tmp) / "bench.db")
            await db.migrate([MIGRATIONS])
            broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
            await broker.sync_time()
            svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
            for i in range(n):
                price = 50000 + (i % 500)
                await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.001,
                                       "price": price})  # fmt: skip
            t0 = time.perf_counter()
            result = await svc.reconcile()
            elapsed = time.perf_counter() - t0
            await broker.close()
            await db.close()
    finally:
        await sim.close()
    assert result["open"] == n
    return {"reconcile_1000_open_s": elapsed}


def run() -> dict[str, Any]:
    configure_logging("warning")
    out: dict[str, Any] = {"order_overhead": asyncio.run(bench_overhead())}
    out.update(asyncio.run(bench_reconcile()))
    return out


def print_table(r: dict[str, Any]) -> None:
    o = r["order_overhead"]
    ok = "yes" if o["p50_ms"] <= 5 else "NO"
    print(f"{'order overhead, tool call → exchange request (p50)':<55} {o['p50_ms']:>8.2f}ms  ≤5ms  {ok}")
    print(f"{'order overhead (p99)':<55} {o['p99_ms']:>8.2f}ms")
    s = r["reconcile_1000_open_s"]
    print(f"{'reconciliation of 1,000 open orders':<55} {s:>8.2f}s   ≤2s   {'yes' if s <= 2 else 'NO'}")


if __name__ == "__main__":
    print_table(run())
