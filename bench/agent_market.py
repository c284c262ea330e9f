"""Agent market-data benchmarks: get_quotes for 50 followed pairs and get_history 1y daily, in process.

    python -m bench.agent_market

The exchange simulator runs in this process (manual clock, 50 pairs); a real LiveEngine
follows the 50 pairs at 1m from it, and the tools are called through the daemon's own
:class:`~mcp_bridge.server.ToolRouter` (argument parsing, the agent convention, the result
envelope) — no HTTP in between, so the figures are the tool's own.

- get_quotes, 50 followed pairs, warm: the 24 h ticker rows are cached (60 s), prices come
  from the engine, so no request is made.  Target p50 ≤ 2 ms.
- get_history BTCUSDT 1y 1d, warm connection, the result cache cleared before every call so
  each call really fetches (one klines request to the in-process simulator, whose own work
  is included).  Target ≤ 50 ms.  Also shown: the same call answered from the result cache.

Logging is filtered to warnings (the router's per-call audit line is not part of the figure).
A rare p99 outlier of get_history is a garbage collection of the whole process (simulator
and engine included); about half of a fetched call is agent_calls' deep copy of the answer
into the result cache.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiohttp

from bench.agent_common import pct, print_machine, quiet_logs
from engine import BinanceRest, EngineConfig, LiveEngine, MarketData, StreamSettings, Tick
from mcp_bridge import RESULT_CACHE, Services, ToolRouter
from simulator import start_simulator

SYMBOLS = [f"Q{i:02d}USDT" for i in range(50)]
QUOTE_CALLS = 2000
HISTORY_CALLS = 200
TARGET_QUOTES_MS = 2.0
TARGET_HISTORY_MS = 50.0


async def _time(n: int, call: Callable[[], Awaitable[Any]], before: Callable[[], None] | None = None) -> list[float]:
    out: list[float] = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        result = await call()
        out.append((time.perf_counter() - t0) * 1000)
        if result.is_error:
            raise RuntimeError(result.content[0].text)
    return out


async def run() -> dict[str, float]:
    sim = await start_simulator(clock="manual", symbols=["BTCUSDT", *SYMBOLS])
    try:
        async with aiohttp.ClientSession() as session:
            engine = LiveEngine(
                session=session,
                rest=BinanceRest(session, sim.url),
                stream_url=sim.ws_url,
                config=EngineConfig(window_bars=100, streams=StreamSettings(stall_timeout_s=None)),
            )
            for s in SYMBOLS:
                engine.follow(s, "1m")
            async with engine.running():
                async with asyncio.timeout(120):
                    await engine.wait_ready()
                    with engine.subscribe([Tick], maxsize=10_000) as ticks:
                        for i, s in enumerate(SYMBOLS):  # a trade each, so the engine has seen a price
                            sim.exchange.trade(s, 10.0 + i, 0.01)
                        while not all(engine.last_price(s) is not None for s in SYMBOLS):
                            await ticks.get()
                services = Services(charts=cast(Any, None), engine=engine)
                services.market = MarketData(session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9")
                router = ToolRouter(services)
                args = {"symbols": SYMBOLS}
                await _time(20, lambda: router.call("get_quotes", args))  # warm: ticker rows cached
                tickers = sim.exchange.requests["GET /api/v3/ticker/24hr"]
                quotes = await _time(QUOTE_CALLS, lambda: router.call("get_quotes", args))
                assert sim.exchange.requests["GET /api/v3/ticker/24hr"] == tickers, "hot path made a request"

                hargs = {"symbol": "BTCUSDT", "period": "1y", "interval": "1d"}
                await _time(5, lambda: router.call("get_history", hargs), RESULT_CACHE.clear)
                history = await _time(HISTORY_CALLS, lambda: router.call("get_history", hargs), RESULT_CACHE.clear)
                cached = await _time(HISTORY_CALLS, lambda: router.call("get_history", hargs))
    finally:
        await sim.close()
    return {
        "quotes50_p50_ms": statistics.median(quotes),
        "quotes50_p99_ms": pct(quotes, 0.99),
        "history_1y_1d_p50_ms": statistics.median(history),
        "history_1y_1d_p99_ms": pct(history, 0.99),
        "history_cached_p50_ms": statistics.median(cached),
        "history_cached_p99_ms": pct(cached, 0.99),
    }


def print_table(r: dict[str, float]) -> None:
    print_machine()
    print(f"{'figure':<44}{'p50 ms':>10}{'p99 ms':>10}{'target':>12}")
    rows = [
        ("get_quotes, 50 followed pairs (warm)", "quotes50", f"≤ {TARGET_QUOTES_MS:g} ms"),
        ("get_history BTCUSDT 1y 1d (fetched)", "history_1y_1d", f"≤ {TARGET_HISTORY_MS:g} ms"),
        ("get_history BTCUSDT 1y 1d (result cache)", "history_cached", ""),
    ]
    for label, key, target in rows:
        print(f"{label:<44}{r[key + '_p50_ms']:>10.3f}{r[key + '_p99_ms']:>10.3f}{target:>12}")


def main() -> None:
    quiet_logs()
    print_table(asyncio.run(run()))


if __name__ == "__main__":
    main()
