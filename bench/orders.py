"""Order benchmarks: a market order through the real daemon and the real Binance broker, the
daemon's in-process overhead with a stub broker, and reconciliation of 1,000 open orders.

    python -m bench.orders

- Real path (its order row in docs/benchmarks.md): ``chartgen --serve --trade --sim`` as its own process,
  broker ``binance`` against the daemon's exchange simulator; 200 market orders, one at a
  time, as session-less JSON-RPC ``tools/call place_order`` over one keep-alive HTTP
  connection with the demo bearer token (it has every scope).  Reports the end-to-end
  tool-call latency p50/p99, the split at the simulator (``POST /api/v3/order`` arrival,
  timestamped by the simulator with ``time.monotonic_ns``, which is the same clock in both
  processes): tool call sent → order request received, and order request received → tool
  answer received; and the REST requests the simulator saw per order (``GET
  /api/v3/ticker/price`` among them).  Then 200 more through the official MCP SDK client
  (Streamable HTTP session), same figures.  The simulator runs in the daemon's process
  (``--sim``, real clock); daemon, simulator and client share the machine.
- Stub broker (in-process, no HTTP, no exchange): from the ``place_order`` tool call entering
  the router to the broker's ``place`` being called — argument checks, filters, limits, the
  SQLite intent record and the SUBMITTED audit line.  A lower bound, not the order path.
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

from bench.sim_limits import lift_order_limits
from brokers import (
    ORDER_MIGRATIONS,
    BinanceBroker,
    ExchangeOrder,
    OrderRequest,
    OrderService,
    OrderStore,
    SafetyLimits,
    SymbolRules,
)
from daemon import TradesLog, configure_logging
from mcp_bridge import Services, ToolRouter
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, start_simulator
from storage import Database

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
        await db.migrate([ORDER_MIGRATIONS])
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


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


ORDER_ARGS = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.0001}


def _split(spans: list[tuple[int, int]], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Latencies of ``spans`` (tool call sent, answer received; monotonic ns) split at the simulator's
    arrival times of the orders, and the simulator's request counts per order in between."""
    n = len(spans)
    # one POST per order: a re-send (e.g. after a -1021 clock refusal) would pair the timestamps wrongly
    assert len(after["order_posts_ns"]) - len(before["order_posts_ns"]) == n, (before["requests"], after["requests"])
    arrivals = after["order_posts_ns"][-n:]
    total = sorted((t1 - t0) / 1e6 for t0, t1 in spans)
    to_sim = sorted((a - t0) / 1e6 for (t0, _), a in zip(spans, arrivals, strict=True))
    from_sim = sorted((t1 - a) / 1e6 for (_, t1), a in zip(spans, arrivals, strict=True))
    seen = {
        k: (after["requests"].get(k, 0) - before["requests"].get(k, 0)) / n
        for k in sorted(set(after["requests"]) | set(before["requests"]))
        if after["requests"].get(k, 0) != before["requests"].get(k, 0)
    }
    return {
        "orders": n,
        "p50_ms": statistics.median(total),
        "p99_ms": _pct(total, 0.99),
        "to_exchange_p50_ms": statistics.median(to_sim),
        "to_exchange_p99_ms": _pct(to_sim, 0.99),
        "after_exchange_p50_ms": statistics.median(from_sim),
        "after_exchange_p99_ms": _pct(from_sim, 0.99),
        "sim_requests_per_order": seen,
        "ticker_price_per_order": seen.get("GET /api/v3/ticker/price", 0.0),
    }


async def bench_http_binance(n: int = 200, warmup: int = 10) -> dict[str, Any]:
    """``n`` market orders through ``chartgen --serve --trade --sim`` (Binance broker, simulator), over HTTP:
    session-less JSON-RPC on one keep-alive connection (chartgen's clients), then the official SDK client."""
    import aiohttp

    from testkit.daemon_proc import PRODUCTION_RENDER, mcp_client, start_daemon

    with tempfile.TemporaryDirectory() as tmp:
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "real", "-s", "BTCUSDT", "-i", "1m"],
            data_dir=Path(tmp),
            env={
                "CHARTGEN_BROKER": "binance",
                "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
                "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "100000000",
                "CHARTGEN_LOG_LEVEL": "info",  # as in production: one audit line per tool call
                **PRODUCTION_RENDER,
            },
        )
        try:
            assert daemon.sim_url is not None and daemon.token is not None
            connector = aiohttp.TCPConnector(limit=1)
            async with aiohttp.ClientSession(connector=connector) as http, aiohttp.ClientSession() as control:
                await daemon.wait_ready()
                await lift_order_limits(daemon.sim_url)  # past Binance's ORDERS limit (bench/sim_limits.py)
                async with control.post(
                    f"{daemon.sim_url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": "65000"}
                ) as r:
                    assert r.status == 200, await r.text()
                headers = {"Authorization": f"Bearer {daemon.token}"}

                async def state() -> dict[str, Any]:
                    async with control.get(f"{daemon.sim_url}/sim/v1/state") as r:
                        result: dict[str, Any] = await r.json()
                        return result

                async def raw_order(i: int) -> tuple[int, int]:
                    body = {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "place_order", "arguments": ORDER_ARGS},
                    }
                    t0 = time.monotonic_ns()
                    async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
                        payload: Any = await r.json()
                    t1 = time.monotonic_ns()
                    assert r.status == 200 and not payload["result"].get("isError"), payload
                    assert '"Filled"' in payload["result"]["content"][0]["text"], payload
                    return t0, t1

                for i in range(warmup):  # rules cached, connections open
                    await raw_order(i)
                before = await state()
                spans = [await raw_order(warmup + i) for i in range(n)]
                after = await state()
                out = {"jsonrpc": _split(spans, before, after)}

                async with mcp_client(daemon.mcp_url, daemon.token) as client:

                    async def sdk_order() -> tuple[int, int]:
                        t0 = time.monotonic_ns()
                        result = await client.call_tool("place_order", ORDER_ARGS)
                        t1 = time.monotonic_ns()
                        assert not result.is_error and '"Filled"' in result.content[0].text, result
                        return t0, t1

                    for _ in range(warmup):
                        await sdk_order()
                    before = await state()
                    spans = [await sdk_order() for _ in range(n)]
                    after = await state()
                out["sdk"] = _split(spans, before, after)
        finally:
            await daemon.stop()
    return out


async def bench_reconcile(n: int = 1000) -> dict[str, float]:
    sim = await start_simulator(clock="real", symbols=["BTCUSDT"], balances={"USDT": Decimal(10_000_000)})
    sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
    await lift_order_limits(sim.url)  # 1,000 open orders: past MAX_NUM_ORDERS (bench/sim_limits.py)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = await Database.open(Path(tmp) / "bench.db")
            await db.migrate([ORDER_MIGRATIONS])
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
    out: dict[str, Any] = {"market_order_http_binance": asyncio.run(bench_http_binance())}
    out["order_overhead_stub_broker"] = asyncio.run(bench_overhead())
    out.update(asyncio.run(bench_reconcile()))
    return out


def print_table(r: dict[str, Any]) -> None:
    o, s = r["order_overhead_stub_broker"], r["reconcile_1000_open_s"]
    rows: list[tuple[str, str, str]] = []
    for key, client in (("jsonrpc", "session-less JSON-RPC"), ("sdk", "official SDK client")):
        h = r["market_order_http_binance"][key]
        rows += [
            (f"market order over HTTP ({client}), Binance broker + simulator, n={h['orders']}", "", ""),
            ("  tool call sent → POST /api/v3/order at simulator (p50)", f"{h['to_exchange_p50_ms']:.2f} ms", "≤5 ms"),
            ("  tool call sent → POST /api/v3/order at simulator (p99)", f"{h['to_exchange_p99_ms']:.2f} ms", ""),
            (
                "  POST at simulator → tool answer received (p50 / p99)",
                f"{h['after_exchange_p50_ms']:.2f} / {h['after_exchange_p99_ms']:.2f} ms",
                "",
            ),
            ("  end to end, tool call → answer (p50 / p99)", f"{h['p50_ms']:.2f} / {h['p99_ms']:.2f} ms", ""),
        ]
        rows += [
            (f"  simulator requests per order: {k}", f"{v:.2f}", "") for k, v in h["sim_requests_per_order"].items()
        ]
        rows.append(("  GET /api/v3/ticker/price per order", f"{h['ticker_price_per_order']:.2f}", ""))
    rows += [
        ("stub broker, in-process, router → place (p50 / p99)", f"{o['p50_ms']:.2f} / {o['p99_ms']:.2f} ms", ""),
        ("reconciliation of 1,000 open orders", f"{s:.2f} s", "≤2 s"),
    ]
    for name, value, target in rows:
        print(f"{name:<72} {value:>18}  {target}")


if __name__ == "__main__":
    print_table(run())
