"""A cluster front's prices from the workers' ticks on NATS (cluster/bus_prices.py).

In process, on a real nats-server: the newest tick per symbol is kept (an older one from a second
worker around a hand-over does not replace it), a message that is not a tick is counted and
ignored, a price older than the freshness limit is not used, and QuoteSource prices a quote with it
(the 24 h change against the ticker's open).  End to end: a ``chartgen worker`` and a
``chartgen --serve --cluster`` front on ``bus = "nats"`` with the simulator: get_quotes at the front
answers a followed pair with a price the worker published (the test's own subscription to the
ticks is the oracle) and names the bus as its source.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from cluster.bus import Bus
from cluster.bus_prices import BusPrices, TickMessage
from cluster.bus_streams import BusLimits
from cluster.bus_subjects import market_subject
from engine import QuoteSource
from mcp_bridge import ALL_SCOPES, PgTokenStore
from storage import PostgresDatabase
from testkit.daemon_proc import mcp_client, start_daemon
from testkit.nats import SMALL_BUS_LIMITS, NatsServer, nats_env
from testkit.workers import Workers, real_clock_simulator, until

pytestmark = [pytest.mark.servers, pytest.mark.process]

SYMBOL = "PB1USDT"
DEADLINE_S = 60.0


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    connected = await Bus.connect(
        nats_server.url, name="test", limits=BusLimits(**SMALL_BUS_LIMITS), connect_timeout_s=5.0
    )
    await connected.ensure_streams()
    try:
        yield connected
    finally:
        await connected.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _tick(bus: Bus, symbol: str, price: float, time_ms: int, worker: str = "worker-a") -> None:
    body = TickMessage(symbol=symbol, price=price, time_ms=time_ms, worker=worker).model_dump_json().encode()
    assert await bus.send(market_subject("tick", symbol, None), body, msg_id=f"tick|{symbol}|{time_ms}|{price!r}")


async def _received(prices: BusPrices, n: int) -> None:
    async def done() -> bool:
        return prices.received + prices.invalid >= n

    await until(done, 10.0, every_s=0.01)


class Ticker:
    """MarketData with only Binance's 24 h ticker (one row per symbol asked)."""

    def __init__(self, open_price: float) -> None:
        self.open_price = open_price
        self.binance = self
        self.calls = 0

    async def get(self, path: str, query: dict[str, str], *, weight: int) -> Any:
        self.calls += 1
        return [
            {
                "symbol": s,
                "openPrice": str(self.open_price),
                "lastPrice": "1",
                "priceChange": "-1",
                "priceChangePercent": "-50",
                "volume": "12.5",
                "closeTime": 5_000,
            }
            for s in json.loads(query["symbols"])
        ]


async def test_the_newest_fresh_tick_prices_a_quote(bus: Bus, nats_server: NatsServer) -> None:
    clock = Clock()
    prices = BusPrices(bus, max_age_s=3.0, clock=clock)
    await prices.open()
    await _tick(bus, "BTCUSDT", 65000.5, 1_000)
    await _tick(bus, "BTCUSDT", 65010.0, 2_000)
    await _tick(bus, "BTCUSDT", 64000.0, 1_500, worker="worker-b")  # the old owner, late: not newer
    raw = await nats.connect(nats_server.url)
    try:
        await raw.publish(market_subject("tick", "ETHUSDT", None), b'{"symbol": "ETHUSDT", "price": -1}')
        await raw.publish(market_subject("tick", "ETHUSDT", None), b"not json")
        await raw.flush()
    finally:
        await raw.close()
    await _received(prices, 5)
    assert (prices.received, prices.invalid) == (3, 2)
    assert (prices.last_price("BTCUSDT"), prices.exchange_time_ms("BTCUSDT")) == (65010.0, 2_000)
    assert prices.last_price("ETHUSDT") is None
    assert prices.status()["bus_prices_fresh"] == 1

    market = Ticker(open_price=64000.0)
    quote = await QuoteSource(market, prices).quote("BTCUSDT")  # type: ignore[arg-type]
    assert (quote.price, quote.change, quote.timestamp) == (65010.0, 1010.0, 2.0)
    assert quote.source_ref.startswith("nats:chartgen.market.tick BTCUSDT from worker-a@")

    clock.now += 3.5  # no tick for longer than the limit: not used; the quote comes from the ticker
    assert prices.last_price("BTCUSDT") is None and prices.exchange_time_ms("BTCUSDT") is None
    stale = await QuoteSource(market, prices, price_ttl_s=0.0).quote("BTCUSDT")  # type: ignore[arg-type]
    assert stale.price == 1.0 and stale.source_ref.startswith("binance:")
    await prices.close()


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    async with real_clock_simulator([SYMBOL]) as running:
        yield running


async def test_a_front_quotes_a_followed_pair_at_the_workers_price(
    sim: Any, nats_server: NatsServer, cluster: tuple[str, PostgresDatabase], tmp_path: Path
) -> None:
    dsn, db = cluster
    bus_env = nats_env(nats_server.url)
    token, _ = await PgTokenStore(db).create("alice", principal="alice", scopes=ALL_SCOPES)
    workers = Workers(dsn, sim.url, tmp_path, symbols=[SYMBOL], heartbeat_s=0.5, liveness_s=2.0, env=bus_env)
    published: list[dict[str, Any]] = []
    raw = await nats.connect(nats_server.url)
    front = None
    try:

        async def seen(msg: Any) -> None:
            published.append(json.loads(msg.data))

        await raw.subscribe(market_subject("tick", SYMBOL, None), cb=seen)
        await workers.start()
        front_env = {
            "CHARTGEN_POSTGRES_DSN": dsn,
            "CHARTGEN_BINANCE_REST_URL": sim.url,
            "CHARTGEN_CLUSTER_HEARTBEAT_S": "0.5",
            "CHARTGEN_CLUSTER_LIVENESS_S": "2",
            "CHARTGEN_LOG_FORMAT": "json",
            **bus_env,
        }
        front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=front_env)
        await front.wait_ready()
        async with mcp_client(front.mcp_url, token) as client:

            async def quoted_from_the_bus() -> dict[str, Any] | None:
                result = await client.call_tool("get_quotes", {"symbols": [SYMBOL]})
                body = result.structured_content
                assert body is not None and not result.is_error, result.content[0].text
                refs = body["data"]["source_refs"]
                return body["data"] if any(r.startswith("nats:") for r in refs) else None

            data = await until(quoted_from_the_bus, DEADLINE_S, every_s=0.2)
        [quote] = data["quotes"]

        async def the_same_tick() -> bool:  # the test's subscription got what the front got
            return any(p["price"] == quote["price"] and p["symbol"] == SYMBOL for p in published)

        assert await until(the_same_tick, 10.0), (quote, published[-5:])
        assert next(r for r in data["source_refs"] if r.startswith("nats:")).startswith(
            f"nats:chartgen.market.tick {SYMBOL} from worker@"
        )
    finally:
        await raw.close()
        if front is not None:
            await front.stop()
        await workers.close()
