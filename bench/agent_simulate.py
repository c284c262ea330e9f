"""trade_simulate benchmark: 10 legs over a 1-year daily history, warm caches, in process.

    python -m bench.agent_simulate

The exchange simulator runs in this process (manual clock, 10 pairs); a real LiveEngine follows
the 10 pairs at 1m from it, and the order service is the daemon's paper set-up (PaperBroker on
an in-memory database with every migration, EngineQuotes for rules and prices, the guard priced
by the engine).  The account holds 100,000 USDT and five of the ten assets.  trade_simulate is
called through the daemon's own :class:`~mcp_bridge.server.ToolRouter` (argument parsing, the
agent convention, the envelope) with 10 legs (a buy of ~20 USDT on each pair): every leg runs
the guard's dry run (filters, engine price, per-order limit, one SQLite transaction for the halt
switch and the daily limit), the portfolio is valued, and the risk metrics read 366 daily closes
of up to ten assets (warm: the 60 s history cache and the ticker rows are filled by the warm-up).
Target p50 ≤ 30 ms.  Logging is filtered to warnings.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from decimal import ROUND_FLOOR, Decimal
from typing import Any, cast

import aiohttp

from bench.agent_common import pct, print_machine, quiet_logs
from brokers import OrderService, OrderStore, PaperBroker, SafetyLimits
from daemon import ALL_MIGRATIONS, EngineQuotes
from engine import BinanceRest, EngineConfig, LiveEngine, MarketData, StreamSettings, SymbolDirectory, Tick
from mcp_bridge import Services, ToolRouter
from simulator import start_simulator
from storage import Database

SYMBOLS = [f"S{i:02d}USDT" for i in range(10)]
CALLS = 300
TARGET_MS = 30.0


async def _legs(quotes: EngineQuotes, engine: LiveEngine) -> list[dict[str, Any]]:
    legs = []
    for s in SYMBOLS:
        rules = await quotes.rules(s)
        price = engine.last_price(s)
        assert rules is not None and price is not None
        qty = (Decimal(20) / Decimal(str(price)) / rules.step_size).to_integral_value(ROUND_FLOOR) * rules.step_size
        legs.append({"symbol": s, "action": "buy", "quantity": float(max(qty, rules.min_qty))})
    return legs


async def run() -> dict[str, float]:
    sim = await start_simulator(clock="manual", symbols=SYMBOLS)
    db = await Database.open(":memory:")
    await db.migrate(ALL_MIGRATIONS)
    try:
        async with aiohttp.ClientSession() as session:
            rest = BinanceRest(session, sim.url)
            engine = LiveEngine(
                session=session,
                rest=rest,
                stream_url=sim.ws_url,
                config=EngineConfig(window_bars=100, streams=StreamSettings(stall_timeout_s=None)),
            )
            for s in SYMBOLS:
                engine.follow(s, "1m")
            async with engine.running():
                async with asyncio.timeout(120):
                    await engine.wait_ready()
                    with engine.subscribe([Tick], maxsize=10_000) as ticks:
                        for s in SYMBOLS:  # a trade each, so the engine has seen a price
                            sim.exchange.trade(s, sim.exchange.markets[s].last_price(sim.exchange.now_ms()), 0.01)
                        while not all(engine.last_price(s) is not None for s in SYMBOLS):
                            await ticks.get()
                quotes = EngineQuotes(engine, SymbolDirectory(rest), "1m")
                held = {"USDT": Decimal(100_000)} | {s.removesuffix("USDT"): Decimal(50) for s in SYMBOLS[:5]}
                broker = PaperBroker(db, rules=quotes.rules, price=quotes.price, starting_balances=held)
                await broker.start()
                orders = OrderService(
                    broker,
                    OrderStore(db),
                    mark_price=engine.last_price,
                    limits=SafetyLimits(),
                    engine_price=quotes.live_price,
                )
                services = Services(charts=cast(Any, None), engine=engine, orders=orders)
                services.market = MarketData(session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9")
                router = ToolRouter(services)
                args = {"trades": await _legs(quotes, engine)}
                klines = sim.exchange.requests["GET /api/v3/klines"]
                for _ in range(5):  # warm: rules, ticker rows, daily closes
                    await router.call("trade_simulate", args)
                fetched = sim.exchange.requests["GET /api/v3/klines"] - klines
                samples: list[float] = []
                for _ in range(CALLS):
                    t0 = time.perf_counter()
                    result = await router.call("trade_simulate", args)
                    samples.append((time.perf_counter() - t0) * 1000)
                    if result.is_error:
                        raise RuntimeError(result.content[0].text)
                assert sim.exchange.requests["GET /api/v3/klines"] - klines == fetched, "a measured call fetched"
                body = result.structured_content or {}
                legs = body["data"]["simulation"]["trades"]
                assert len(legs) == 10 and all(t["status"] == "filled" for t in legs), legs
                assert body["data"]["simulation"]["risk_metrics"]["observations"] == 365
    finally:
        await db.close()
        await sim.close()
    return {"p50_ms": statistics.median(samples), "p99_ms": pct(samples, 0.99), "klines_fetched": float(fetched)}


def print_table(r: dict[str, float]) -> None:
    print_machine()
    print(f"{'figure':<52}{'p50 ms':>10}{'p99 ms':>10}{'target':>12}")
    label = "trade_simulate, 10 legs, 1y daily risk (warm)"
    print(f"{label:<52}{r['p50_ms']:>10.3f}{r['p99_ms']:>10.3f}{f'≤ {TARGET_MS:g} ms':>12}")
    print(f"daily-kline requests during warm-up: {int(r['klines_fetched'])} (none while measuring)")


def main() -> None:
    quiet_logs()
    print_table(asyncio.run(run()))


if __name__ == "__main__":
    main()
