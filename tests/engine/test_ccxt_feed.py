"""The ccxt.pro feed (``--exchange``): closed-bar inference, and the live engine on ccxt's binance class.

The unit test drives :class:`CcxtStreamFeed` with a scripted exchange.  The acceptance test
points ccxt.pro's own ``binance`` class (REST and websocket) at the simulator on a manual
clock: after every advance, after stream drops and after a stall, each window equals the
simulator's REST klines exactly — the guarantees the Binance feed gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Collection
from typing import Any

import aiohttp
import ccxt.pro  # noqa: F401 - imported, never skipped: a broken ccxt.pro must fail the run
import pytest

from engine.feed.ccxt_feed import CcxtKlineRest, CcxtMarkets, CcxtStreamFeed, build_pro_exchange
from engine.feed.messages import KlineUpdate
from engine.feed.stream_settings import StreamSettings
from engine.live import EngineConfig, LiveEngine
from engine.market_data.errors import MarketDataError
from tests.engine.test_live_engine_sim import MARKETS, SYMBOLS, WINDOW, Sim, in_sync, started


class ScriptedExchange:
    """Answers watch_ohlcv with scripted candle batches, then waits forever."""

    id = "scripted"

    def __init__(self, batches: list[list[list[float]]]) -> None:
        self.batches = list(batches)
        self.done = asyncio.Event()

    async def load_markets(self) -> dict[str, Any]:
        return {"BTC/USDT": {"id": "BTCUSDT", "symbol": "BTC/USDT", "base": "BTC", "quote": "USDT", "spot": True}}

    async def watch_ohlcv(self, symbol: str, timeframe: str) -> list[list[float]]:
        assert (symbol, timeframe) == ("BTC/USDT", "1m")
        if not self.batches:
            self.done.set()
            await asyncio.Event().wait()
        return self.batches.pop(0)

    async def close_ws_clients(self) -> None:
        return None

    async def close(self) -> None:
        return None


class RecordingSink:
    def __init__(self) -> None:
        self.updates: list[KlineUpdate] = []
        self.live: list[str] = []

    def on_kline(self, update: KlineUpdate) -> None:
        self.updates.append(update)

    def on_streams_live(self, streams: Collection[str]) -> None:
        self.live.extend(streams)

    def on_streams_down(self, streams: Collection[str]) -> None:
        pass


def candle(minute: int, close: float) -> list[float]:
    return [minute * 60_000, close - 1, close + 1, close - 2, close, 10.0]


async def test_a_candle_is_closed_when_a_newer_one_arrives_and_the_first_batch_only_opens() -> None:
    ex = ScriptedExchange(
        [
            [candle(1, 100), candle(2, 101), candle(3, 102)],  # after connect: only minute 3 is current
            [candle(3, 103)],
            [candle(3, 104), candle(4, 105)],  # minute 3's last values close it
            [candle(2, 99)],  # a late update of an older candle is ignored
            [candle(5, 106), candle(6, 107)],  # several closes in one batch
        ]
    )
    sink = RecordingSink()
    feed = CcxtStreamFeed(ex, CcxtMarkets(ex), sink, StreamSettings(stall_timeout_s=None, rotate_after_s=None))
    feed.add(["btcusdt@kline_1m"])
    async with feed.running():
        async with asyncio.timeout(5):
            await ex.done.wait()
    closed = [(u.time // 60, u.close) for u in sink.updates if u.closed]
    assert closed == [(3, 104), (4, 105), (5, 106)]
    assert sink.live == ["btcusdt@kline_1m"]
    last_open = [u for u in sink.updates if not u.closed][-1]
    assert (last_open.time // 60, last_open.close, last_open.symbol, last_open.interval) == (6, 107, "BTCUSDT", "1m")


async def test_an_unknown_symbol_or_exchange_is_a_clear_error() -> None:
    ex = ScriptedExchange([])
    with pytest.raises(MarketDataError, match="not a spot market"):
        await CcxtMarkets(ex).unified("NOPEUSDT")
    with pytest.raises(MarketDataError, match="websocket support"):
        build_pro_exchange("no_such_exchange")


@contextlib.asynccontextmanager
async def ccxt_engine(url: str, markets: list[tuple[str, str]]) -> AsyncIterator[LiveEngine]:
    ws = url.replace("http", "ws", 1) + "/ws"
    exchange = build_pro_exchange("binance", urls={"public": url + "/api/v3", "ws": {"spot": ws}})
    names = CcxtMarkets(exchange)
    streams = StreamSettings(stall_timeout_s=5.0, rotate_after_s=None, backoff_initial_s=0.05, backoff_max_s=0.5)
    async with aiohttp.ClientSession() as session:
        engine = LiveEngine(
            session=session,
            rest=CcxtKlineRest(exchange, names),
            stream_url="",
            config=EngineConfig(window_bars=WINDOW, streams=streams, retry_initial_s=0.05),
            feed=lambda sink: CcxtStreamFeed(exchange, names, sink, streams, rng=random.Random(3)),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


@pytest.mark.slow
async def test_ccxt_binance_class_keeps_windows_equal_to_the_exchange() -> None:
    rng = random.Random(8)
    async with started(SYMBOLS) as running, aiohttp.ClientSession() as ctl:
        sim = Sim(ctl, running.url)
        async with ccxt_engine(running.url, MARKETS) as engine:
            await in_sync(engine, sim)
            for i in range(8):
                if i % 3 == 1:
                    await sim.fault(drop_streams=True)
                await sim.post("/sim/v1/price", {"symbol": rng.choice(SYMBOLS), "price": f"{200 + i}.25"})
                await sim.advance(rng.randint(1, 400))
                await in_sync(engine, sim)
            feed = engine.streams
            assert isinstance(feed, CcxtStreamFeed)
            connects = sum(s["connects"] for s in feed.status())
            assert connects > len(MARKETS)  # the drops were noticed and every stream came back

            # a stall: no frames for 60 s → the feed resets its websockets and backfills
            await sim.fault(stall_streams_s=60)
            await sim.advance(300)
            await in_sync(engine, sim)
            assert sum(s["stalls"] for s in feed.status()) >= 1
            assert feed.resets >= 1


@pytest.mark.slow
async def test_the_daemon_runs_its_engine_on_a_ccxt_exchange_from_settings(tmp_path: Any) -> None:
    """``exchange = "binanceus"`` (a ccxt.pro id) with URL overrides: the engine's windows and its catalogue."""
    from config import load_settings
    from daemon import running_engine

    async with started(SYMBOLS) as running, aiohttp.ClientSession() as ctl:
        sim = Sim(ctl, running.url)
        settings = load_settings(
            {
                "exchange": "binanceus",
                "exchange_rest_url": running.url + "/api/v3",
                "exchange_ws_url": running.url.replace("http", "ws", 1) + "/ws",
                "symbols": SYMBOLS,
                "intervals": ["1m", "5m"],
                "engine_window_bars": WINDOW,
                "data_dir": str(tmp_path),
            }
        )
        async with running_engine(settings) as engine:
            assert isinstance(engine.streams, CcxtStreamFeed)
            await in_sync(engine, sim)
            await sim.advance(180)
            await in_sync(engine, sim)
            assert engine.catalogue is not None
            assert await engine.catalogue.check("ETHUSDT") is None
            message = await engine.catalogue.check("ETHUSDX")
            assert message is not None and "not a spot market on binanceus" in message and "ETHUSDT" in message
