"""A worker's market data on NATS (daemon/parts/market_bus.py): a ``chartgen worker`` process with
``bus = "nats"`` on a real nats-server and PostgreSQL, the exchange simulator on a manual clock.

- each closed bar is published on ``chartgen.market.bar.<symbol>.<interval>`` equal to the
  simulator's kline (read over its REST API: an oracle independent of the worker);
- each indicator update follows on ``chartgen.market.indicator.…`` for the same bar, its RSI equal to
  TA-Lib's RSI over the window's closes (an independent implementation);
- a posted price reaches ``chartgen.market.tick.<symbol>._`` within the tick cadence;
- every message carries its ``Nats-Msg-Id`` and the ``CHARTGEN_MARKET`` stream stored them;
- the worker's ``/metrics`` counts what it published.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import numpy as np
import pytest

from cluster.bus_prices import TickMessage
from cluster.bus_streams import MARKET_STREAM, TICKS_STREAM
from cluster.bus_subjects import market_of
from storage import PostgresDatabase
from testkit.nats import NatsServer, nats_env
from testkit.workers import Workers, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOLS = ["AA1USDT", "AA2USDT"]
WINDOW_BARS = 50
"""The workers' window (testkit/workers.py)."""


@pytest.fixture
async def manual_sim() -> AsyncIterator[Any]:
    from simulator import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0, symbols=SYMBOLS)
    try:
        yield running
    finally:
        await running.close()


async def _post_price(http: aiohttp.ClientSession, sim: Any, symbol: str, price: float) -> float:
    """Trade ``symbol`` at ``price``; the price the simulator traded at (on the symbol's tick grid)."""
    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": f"{price:.8f}"}) as r:
        assert r.status == 200, await r.text()
        return float((await r.json())["price"])


async def test_a_worker_publishes_bars_indicator_updates_and_ticks(
    manual_sim: Any, nats_server: NatsServer, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    import talib

    sim = manual_sim
    dsn, db = cluster
    env = nats_env(nats_server.url)
    workers = Workers(dsn, sim.url, tmp_path, symbols=SYMBOLS, heartbeat_s=0.5, liveness_s=2.0, env=env)
    seen: list[tuple[str, dict[str, Any], str | None]] = []

    async def on_message(msg: Any) -> None:
        seen.append((msg.subject, json.loads(msg.data), (msg.headers or {}).get("Nats-Msg-Id")))

    client = await nats.connect(nats_server.url)
    base = {s: float(p) for s, p in sim.exchange.start_prices()}
    try:
        await client.subscribe("chartgen.market.>", cb=on_message)
        async with aiohttp.ClientSession() as http:
            await workers.start(http=True)

            async def settled() -> Any:
                for s in SYMBOLS:  # a tick per market, so each hand-over has one to evaluate
                    await _post_price(http, sim, s, base[s])
                return await workers.settled(db, 1)

            await until(settled, 60, every_s=0.5)
            worker_url = await workers.http_url(0)
            sim.exchange.advance(60)  # one bar closes on every market

            def messages(kind: str, symbol: str) -> list[dict[str, Any]]:
                return [body for subject, body, _ in seen if market_of(subject)[:2] == (kind, symbol)]

            async def closed() -> bool:
                return all(
                    any(u["bar_time"] == b["time"] for b in messages("bar", s) for u in messages("indicator", s))
                    for s in SYMBOLS
                )

            await until(closed, 30, every_s=0.1)
            for s in SYMBOLS:
                bar = messages("bar", s)[-1]
                async with http.get(
                    f"{sim.url}/api/v3/klines", params={"symbol": s, "interval": "1m", "limit": "100"}
                ) as r:
                    klines = {int(k[0]) // 1000: k for k in await r.json()}
                k = klines[bar["time"]]
                assert [bar["open"], bar["high"], bar["low"], bar["close"], bar["volume"]] == [
                    float(k[1]), float(k[2]), float(k[3]), float(k[4]), float(k[5])
                ]  # fmt: skip
                update = next(u for u in messages("indicator", s) if u["bar_time"] == bar["time"])
                assert update["worker"] == bar["worker"]
                # The RSI state was seeded on the warm-up window (WINDOW_BARS closed bars) and stepped
                # with each bar since: TA-Lib over those closes and the new one.
                closes = [float(k[4]) for t, k in sorted(klines.items()) if t <= bar["time"]][-(WINDOW_BARS + 1) :]
                want = float(talib.RSI(np.array(closes, dtype=float), 14)[-1])
                assert update["indicators"]["rsi"]["values"]["RSI"] == pytest.approx(want, rel=1e-9)
                assert set(update["indicators"]) == {"cipher_b", "macd", "rsi"}

            moved = await _post_price(http, sim, SYMBOLS[0], base[SYMBOLS[0]] * 1.01)

            async def ticked() -> bool:
                return any(t["price"] == moved for t in messages("tick", SYMBOLS[0]))

            await until(ticked, 10, every_s=0.1)
            for tick in messages("tick", SYMBOLS[0]):  # what a front reads (cluster/bus_prices.py)
                assert TickMessage.model_validate(tick).symbol == SYMBOLS[0]
            assert all(msg_id for _, _, msg_id in seen)
            js = client.jetstream()
            info = await js.stream_info(MARKET_STREAM)
            assert info.state.messages >= sum(1 for subject, _, _ in seen if market_of(subject)[0] != "tick") > 0
            ticks = await js.stream_info(TICKS_STREAM)  # the newest price per market
            assert ticks.state.messages == len({subject for subject, _, _ in seen if market_of(subject)[0] == "tick"})
            async with http.get(f"{worker_url}/metrics") as r:
                text = await r.text()
            published = next(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("chartgen_worker_market_published_total")
            )
            assert published >= len(seen)
    finally:
        await client.close()
        await workers.close()
