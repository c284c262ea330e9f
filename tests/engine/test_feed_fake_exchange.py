"""The live feed against a small fake Binance: warm-up, stream closes, drops, stalls, 429s."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from engine.bars import Bars
from engine.events import BarClosed, IndicatorsUpdated, Tick
from engine.feed.stream_settings import StreamSettings
from engine.indicators.base import IndicatorDef
from engine.indicators.model import Dot, Line, PanelResult
from engine.indicators.registry import IndicatorRequest
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.rate_gate import RateGate
from tests.engine.fake_binance import FakeBinance, bar_values

WAIT = 10.0


def _last_close(bars: Any, params: Any, ctx: Any) -> PanelResult:
    """Fake indicator: a line of closes and a signal on the newest bar."""
    n = len(bars)
    return PanelResult(
        label="LAST",
        is_overlay=False,
        lines=[Line(bars.close.copy(), "white")],
        dots=[Dot(n - 1, 1.0, "g", label="buy")],
    )


FAKE_DEF = IndicatorDef(name="lastclose", kind="panel", description="test", compute=_last_close, signals=("buy",))
FAKE_REQ = IndicatorRequest("lastclose", FAKE_DEF, {})


def _compute(req: IndicatorRequest, bars: Bars, ctx: Any) -> PanelResult:
    return req.definition.compute(bars, req.params, ctx)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBinance]:
    fb = FakeBinance()
    server = TestServer(fb.app(), host="127.0.0.1")
    await server.start_server()
    fb.url = str(server.make_url("")).rstrip("/")
    try:
        yield fb
    finally:
        await server.close()


@asynccontextmanager
async def engine_for(
    fb: FakeBinance, markets: list[tuple[str, str]], *, window: int = 50, **stream_opts: Any
) -> AsyncIterator[LiveEngine]:
    opts: dict[str, Any] = {
        "stall_timeout_s": None,
        "rotate_after_s": None,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
        "control_interval_s": 0.0,
    }
    opts.update(stream_opts)
    async with aiohttp.ClientSession() as session:
        rest = BinanceRest(session, fb.url, gate=RateGate(weight_limit=6000), retries=2)
        engine = LiveEngine(
            session=session,
            rest=rest,
            stream_url=fb.url.replace("http", "ws", 1),
            indicators=[FAKE_REQ],
            config=EngineConfig(window_bars=window, streams=StreamSettings(**opts), retry_initial_s=0.01),
            compute=_compute,
            rng=random.Random(7),
        )
        for m in markets:
            engine.follow(*m)
        async with engine.running():
            yield engine


def matches_exchange(engine: LiveEngine, fb: FakeBinance, symbol: str, interval: str) -> bool:
    """The window holds exactly the exchange's newest closed bars, final values."""
    bars = engine.window_bars(symbol, interval)
    if bars is None or len(bars) == 0:
        return False
    expected = fb.closed_times(interval, len(bars))
    if bars.times.tolist() != expected:
        return False
    values = np.array([bar_values(symbol, interval, t) for t in expected]).T
    got = np.vstack([bars.open, bars.high, bars.low, bars.close, bars.volume])
    return bool(np.array_equal(values, got))


def all_match(
    engine: LiveEngine, fb: FakeBinance, markets: list[tuple[str, str]], full: int | None = None
) -> Callable[[], bool]:
    def check() -> bool:
        return all(
            matches_exchange(engine, fb, s, i)
            and (full is None or len(engine.window_bars(s, i) or ()) == full)
            and not engine.is_stale(s, i)
            for s, i in markets
        )

    return check


async def settle(engine: LiveEngine, predicate: Callable[[], bool] | None = None) -> None:
    """Wait (bounded) until ``predicate`` holds, or until the engine is ready."""
    async with asyncio.timeout(WAIT):
        if predicate is None:
            await engine.wait_ready()
        else:
            await engine.wait_until(predicate)


MARKETS = [("BTCUSDT", "1m"), ("ETHUSDT", "1m"), ("BTCUSDT", "5m")]


async def test_warm_up_fills_every_window_with_closed_bars_only(fake: FakeBinance) -> None:
    """After start-up every window holds `window` closed bars equal to the exchange's."""
    async with engine_for(fake, MARKETS) as engine:
        await settle(engine, all_match(engine, fake, MARKETS, full=50))
        await settle(engine)
        assert engine.readiness() == (True, [])
        assert fake.weight_used <= 1 + 2 * len(MARKETS) * 2


async def test_bars_closing_on_the_stream_extend_the_window_and_publish_events(fake: FakeBinance) -> None:
    """Each x=true kline appends one bar, publishes BarClosed and recomputes indicators."""
    async with engine_for(fake, MARKETS) as engine:
        await settle(engine)
        with engine.subscribe() as sub:
            await fake.advance(300, MARKETS)
            await settle(engine, all_match(engine, fake, MARKETS, full=50))
            seen: list[Any] = []
            while not any(isinstance(e, IndicatorsUpdated) and e.interval == "5m" for e in seen):
                seen.append(await sub.get())
        closes = [e for e in seen if isinstance(e, BarClosed)]
        assert [(e.symbol, e.interval) for e in closes].count(("BTCUSDT", "1m")) == 5
        assert any(isinstance(e, Tick) for e in seen)
        upd = [e for e in seen if isinstance(e, IndicatorsUpdated) and e.interval == "5m"][-1]
        assert upd.signals == (("lastclose", "buy"),)
        assert engine.last_price("btcusdt") is not None


async def test_bars_missed_during_stream_drops_are_backfilled_without_duplicates(fake: FakeBinance) -> None:
    """Drops at random moments followed by closes lose nothing and duplicate nothing."""
    rng = random.Random(3)
    async with engine_for(fake, MARKETS) as engine:
        await settle(engine)
        for _ in range(8):
            if rng.random() < 0.7:
                await fake.drop_streams()
            await fake.advance(60 * rng.randint(1, 7), MARKETS)
            await settle(engine, all_match(engine, fake, MARKETS, full=50))


async def test_server_shutdown_reconnects_at_once_and_resyncs(fake: FakeBinance) -> None:
    """A serverShutdown event makes the connection reconnect; the window stays exact."""
    async with engine_for(fake, MARKETS, backoff_initial_s=30.0, backoff_max_s=30.0) as engine:
        await settle(engine)
        await fake.server_shutdown()
        await settle(engine, lambda: engine.streams.connections[0].stats.shutdowns == 1)
        await fake.advance(120, MARKETS)
        await settle(engine, all_match(engine, fake, MARKETS))
        assert engine.streams.connections[0].stats.connects == 2


async def test_a_silent_stream_is_detected_as_stalled_and_replaced(fake: FakeBinance) -> None:
    """No data within the stall timeout → reconnect and backfill what closed meanwhile."""
    async with engine_for(fake, MARKETS, stall_timeout_s=0.3) as engine:
        await settle(engine)
        fake.stalled = True
        await fake.advance(180, MARKETS)
        conn = engine.streams.connections[0]
        await settle(engine, lambda: conn.stats.stalls >= 1 and conn.connected)
        fake.stalled = False
        await settle(engine, all_match(engine, fake, MARKETS))


async def test_connections_rotate_before_their_age_limit(fake: FakeBinance) -> None:
    """A connection older than rotate_after_s is replaced and the windows stay exact."""
    async with engine_for(fake, MARKETS, rotate_after_s=0.3) as engine:
        await settle(engine)
        conn = engine.streams.connections[0]
        await settle(engine, lambda: conn.stats.rotations >= 1 and conn.connected)
        await fake.advance(60, MARKETS)
        await settle(engine, all_match(engine, fake, MARKETS))


async def test_rate_limited_backfill_sends_nothing_before_retry_after(fake: FakeBinance) -> None:
    """Three 429 answers with Retry-After are waited out; no request arrives early."""
    async with engine_for(fake, MARKETS) as engine:
        await settle(engine)
        await fake.drop_streams()
        fake.http_errors = [(429, 1), (429, 1), (429, 1)]
        await fake.advance(120, MARKETS)
        await settle(engine, all_match(engine, fake, MARKETS))
        assert not fake.http_errors
        assert fake.early_requests == 0


async def test_markets_can_be_followed_and_unfollowed_at_runtime(fake: FakeBinance) -> None:
    """A market followed while running is subscribed and warmed up; unfollowing removes it."""
    async with engine_for(fake, MARKETS[:1], max_url_streams=1) as engine:
        await settle(engine)
        engine.follow("SOLUSDT", "1m")
        await settle(engine, all_match(engine, fake, [("SOLUSDT", "1m")], full=50))
        assert fake.subscribe_acks >= 1
        engine.unfollow("SOLUSDT", "1m")
        assert engine.window_bars("SOLUSDT", "1m") is None
        assert engine.markets == [("BTCUSDT", "1m")]


async def test_streams_are_spread_over_connections_by_capacity(fake: FakeBinance) -> None:
    """With at most 2 streams per connection, 5 markets use 3 connections, all in sync."""
    markets = [(f"S{i}USDT", "1m") for i in range(5)]
    async with engine_for(fake, markets, max_streams_per_connection=2) as engine:
        await settle(engine, all_match(engine, fake, markets, full=50))
        assert [len(c.streams) for c in engine.streams.connections] == [2, 2, 1]


async def test_engine_payload_answers_from_the_window_with_cache_shape(fake: FakeBinance) -> None:
    """indicator_payload has the engine_cache shape and None for markets not followed."""
    async with engine_for(fake, MARKETS) as engine:
        await settle(engine)
        payload = await engine.indicator_payload("btcusdt", "1m", [FAKE_REQ], bars=20)
        assert payload is not None
        assert payload["source"] == "engine_cache" and payload["bars"] == 20 and payload["stale"] is False
        assert payload["last_bar_time"] == fake.closed_times("1m", 1)[0]
        assert (
            payload["indicators"]["lastclose"]["lines"][0]["last_value"]
            == bar_values("BTCUSDT", "1m", payload["last_bar_time"])[3]
        )
        assert await engine.indicator_payload("XRPUSDT", "1m", [FAKE_REQ]) is None
