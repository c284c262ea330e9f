"""Alert-action benchmarks: a crossing trade on the simulator → the action's order request at the simulator.

    python -m bench.alert_actions

- Trigger to exchange (its row in docs/benchmarks.md): the simulator runs in this process; ``chartgen
  --serve --trade`` is its own process with the Binance broker against it (the real path:
  the simulator's trade stream → the live engine → the alert evaluator → the action's guard
  checks → the firing transaction, durable, with the order intent and the notification → the
  signed ``POST /api/v3/order``).  N market-buy action alerts sit one price step apart; trades
  that each cross exactly one of them are posted at a fixed rate (100/s).  Latency = the
  simulator receiving the order request (``time.monotonic_ns`` at its HTTP middleware) − the
  moment the crossing trade was posted to ``/sim/v1/price`` (same clock; both in this process,
  the daemon in between).  Every crossing's order must arrive, exactly once.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

from alerts import action_client_id
from bench.sim_limits import lift_order_limits
from simulator import start_simulator

BASE = 70_000.0
STEP = 10.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_trigger_to_exchange(n: int = 300, rate: float = 100.0, warmup: int = 10) -> dict[str, Any]:
    """``n`` crossings at ``rate``/s, each firing one market-buy action alert."""
    from testkit.daemon_proc import PRODUCTION_RENDER, create_token, mcp_client, start_daemon

    total = n + warmup
    sim = await start_simulator(clock="manual", symbols=["BTCUSDT"], balances={"USDT": Decimal("1000000")})
    try:
        await lift_order_limits(sim.url)  # 100 firings/s: past Binance's ORDERS limit (bench/sim_limits.py)
        ws = sim.url.replace("http://", "ws://")
        env = {
            **PRODUCTION_RENDER,
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_BINANCE_STREAM_URL": ws,
            "CHARTGEN_BINANCE_WS_API_URL": f"{ws}/ws-api/v3",
            "CHARTGEN_SYMBOLS": "BTCUSDT",
            "CHARTGEN_INTERVALS": "1m",
            "CHARTGEN_ENGINE_WINDOW_BARS": "100",
            "CHARTGEN_BROKER": "binance",
            "CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000",
            "CHARTGEN_TRADING_MAX_DAILY_NOTIONAL": "100000000",
            "CHARTGEN_ALERTS_MAX_PER_CLIENT": str(total + 10),
            "CHARTGEN_LOG_LEVEL": "info",
            "BINANCE_API_KEY": "sim-api-key",
            "BINANCE_API_SECRET": "sim-api-secret",
        }
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            token = await create_token(data_dir, "bench", "charts,alerts,trade")
            async with aiohttp.ClientSession() as http:

                async def price(p: float) -> int:
                    t0 = time.monotonic_ns()
                    async with http.post(
                        f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": f"{p:.2f}"}
                    ) as r:
                        assert r.status == 200, await r.text()
                    return t0

                await price(BASE)
                daemon = await start_daemon(["--serve", "--trade"], data_dir=data_dir, env=env)
                try:
                    await daemon.wait_ready()
                    ids: list[str] = []
                    async with mcp_client(daemon.mcp_url, token) as client:
                        for i in range(total):
                            args = {
                                "symbol": "BTCUSDT",
                                "condition": {"price_above": BASE + STEP * (i + 1)},
                                "action": {"place_order": {"side": "buy", "type": "market", "quantity": "0.0001"}},
                            }
                            result = await client.call_tool("set_alert", args)
                            assert not result.is_error, result.content[0].text
                            ids.append(json.loads(result.content[0].text)["alert_id"])
                    cids = [action_client_id(a) for a in ids]
                    period_ns = int(1e9 / rate)
                    sent: list[int] = []
                    start = time.monotonic_ns()
                    for i in range(total):
                        due = start + i * period_ns
                        delay = (due - time.monotonic_ns()) / 1e9
                        if delay > 0:
                            await asyncio.sleep(delay)  # pacing the load, not synchronisation
                        sent.append(await price(BASE + STEP * (i + 1) + STEP / 2))
                    try:
                        async with asyncio.timeout(60):
                            while len(_arrivals(sim, cids)) < total:  # noqa: ASYNC110 - the daemon is another process
                                await asyncio.sleep(0.05)  # waiting for the daemon, bounded by the timeout
                    except TimeoutError:
                        log = (data_dir / "trades.log").read_text().splitlines()
                        raise AssertionError(
                            f"{len(_arrivals(sim, cids))} of {total} orders arrived; trades.log tail: {log[-3:]}; "
                            f"requests: {sim.exchange.requests.most_common(8)}"
                        ) from None
                    arrivals = _arrivals(sim, cids)
                finally:
                    await daemon.stop()
    finally:
        await sim.close()
    lat = [(arrivals[cid] - sent[i]) / 1e6 for i, cid in enumerate(cids)][warmup:]
    return {
        "crossings": n,
        "rate_per_s": rate,
        "p50_ms": statistics.median(lat),
        "p99_ms": _pct(lat, 0.99),
        "max_ms": max(lat),
    }


def _arrivals(sim: Any, cids: list[str]) -> dict[str, int]:
    """When the simulator received each action's order request (monotonic ns), by client order id."""
    wanted = set(cids)
    return {cid: t for cid, t in sim.exchange.order_arrivals.items() if cid in wanted}


def run() -> dict[str, Any]:
    return {"trigger_to_exchange": asyncio.run(bench_trigger_to_exchange())}


def print_table(r: dict[str, Any]) -> None:
    t = r["trigger_to_exchange"]
    print(f"{'bench':60} {'value':>10}  target")
    print(f"{'crossing trade -> action order at the simulator p50 (ms)':60} {t['p50_ms']:>10.2f}  <= 5")
    print(f"{'crossing trade -> action order at the simulator p99 (ms)':60} {t['p99_ms']:>10.2f}  <= 20")
    print(f"({t['crossings']} crossings at {t['rate_per_s']:g}/s; max {t['max_ms']:.2f} ms)")


if __name__ == "__main__":
    print_table(run())
