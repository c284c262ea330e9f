"""A region the exchange refuses (HTTP 451 on REST and on the websocket handshake), against the simulator.

Readiness names the status, the exchange's own message and what to do; the next attempt is
minutes away (the recorded backoff, not a clock); once the fault is gone and the engine is
back the reason disappears.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import ccxt
import pytest

from engine.feed.ccxt_feed import CcxtKlineRest, CcxtMarkets, CcxtStreamFeed, build_pro_exchange, refusal_status
from engine.feed.health import REFUSED_HINT, LastError
from engine.feed.stream_manager import StreamManager
from engine.feed.stream_settings import StreamSettings
from engine.live import EngineConfig, LiveEngine
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError
from engine.market_data.rate_gate import RateGate
from simulator import RESTRICTED_LOCATION_MSG, start_simulator

pytestmark = pytest.mark.slow

WAIT = 20.0
NORMAL_MAX_S = 0.5  # the engine's usual reconnect/retry backoff in these tests is at most this


async def fault(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(f"{url}/sim/v1/faults", json=body) as resp:
        assert resp.status == 200, await resp.text()


async def until(predicate: Callable[[], bool], what: Callable[[], Any]) -> None:
    """Poll ``predicate`` until it holds; fail after WAIT s.

    A connection's or backfill's last error is plain state with no event to wait on (the
    engine's change event is for window changes), so it is polled, bounded by the timeout.
    """
    try:
        async with asyncio.timeout(WAIT):
            while True:
                if predicate():
                    return
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"condition not reached: {what()}")


@asynccontextmanager
async def engine_on_sim(*faults: dict[str, Any]) -> AsyncIterator[tuple[LiveEngine, aiohttp.ClientSession, str]]:
    sim = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=["BTCUSDT"], seed=3)
    try:
        async with aiohttp.ClientSession() as session:
            for body in faults:
                await fault(session, sim.url, body)
            streams = StreamSettings(
                stall_timeout_s=None, rotate_after_s=None, backoff_initial_s=0.05, backoff_max_s=NORMAL_MAX_S
            )
            engine = LiveEngine(
                session=session,
                rest=BinanceRest(session, sim.url, gate=RateGate()),
                stream_url=sim.ws_url,
                config=EngineConfig(window_bars=50, streams=streams, retry_initial_s=0.05),
                rng=random.Random(7),
            )
            engine.follow("BTCUSDT", "1h")
            async with engine.running():
                yield engine, session, sim.url
    finally:
        await sim.close()


def reasons(engine: LiveEngine) -> str:
    return "\n".join(engine.readiness()[1])


async def test_a_refused_websocket_handshake_is_named_and_retried_after_minutes() -> None:
    refuse = {"refuse_streams": {"status": 451}, "http_error": {"status": 451, "count": 1_000_000}}
    async with engine_on_sim(refuse) as (engine, session, url):
        assert isinstance(engine.streams, StreamManager)
        conn = engine.streams.connections[0]
        await until(lambda: conn.last_error is not None, lambda: engine.status())

        ready, why = engine.readiness()
        assert not ready and len(why) == 1
        reason = why[0]
        assert reason.startswith("BTCUSDT 1h: stream: HTTP 451 on websocket handshake to 127.0.0.1:")
        assert RESTRICTED_LOCATION_MSG in reason  # the exchange's own words
        assert REFUSED_HINT in reason and "--exchange binanceus" in reason
        assert "next attempt in" in reason and "min" in reason

        error = conn.last_error
        assert isinstance(error, LastError) and error.status == 451 and error.refused
        assert error.retry_in_s is not None and error.retry_in_s >= 0.8 * StreamSettings().refused_backoff_s
        assert error.retry_in_s > 100 * NORMAL_MAX_S  # minutes, not the usual backoff
        assert conn.stats.refusals == 1 and conn.stats.connect_failures == 1
        status = engine.status()
        assert status["connections"][0]["last_error"]["status"] == 451
        assert status["markets"][0]["stream_error"]["refused"] is True

        await fault(session, url, {"reset": True})
        engine.streams.restart_all()  # stands in for the minutes passing
        async with asyncio.timeout(WAIT):
            await engine.wait_ready()
        assert engine.readiness() == (True, [])
        assert conn.last_error is None and engine.status()["connections"][0]["last_error"] is None


async def test_a_refused_warm_up_is_named_with_binances_message_and_retried_after_minutes() -> None:
    async with engine_on_sim({"http_error": {"status": 451, "count": 1_000_000}}) as (engine, session, url):
        key = ("BTCUSDT", "1h")
        scheduler = engine.sync.scheduler
        await until(lambda: key in scheduler.errors, lambda: engine.status())

        reason = reasons(engine)
        assert reason.startswith("BTCUSDT 1h: warm-up failed: HTTP 451 from 127.0.0.1:")
        assert RESTRICTED_LOCATION_MSG in reason and REFUSED_HINT in reason
        assert "stream" not in reason.split(" — ")[0].removeprefix("BTCUSDT 1h: ")  # the stream is fine
        error = scheduler.errors[key]
        assert error.status == 451 and error.retry_in_s is not None
        assert error.retry_in_s >= 0.8 * StreamSettings().refused_backoff_s > 100 * NORMAL_MAX_S
        assert scheduler.failures == 1  # no second attempt on the usual schedule
        assert engine.status()["markets"][0]["backfill_error"]["status"] == 451

        await fault(session, url, {"reset": True})
        engine.streams.restart_all()  # the stream comes back live: the waiting warm-up retries now
        async with asyncio.timeout(WAIT):
            await engine.wait_ready()
        assert engine.readiness() == (True, []) and key not in scheduler.errors
        assert engine.status()["markets"][0]["backfill_error"] is None


async def test_a_failed_warm_up_and_a_refused_stream_are_both_named_in_one_reason() -> None:
    async with engine_on_sim({"http_error": {"status": 451, "count": 1_000_000}}) as (engine, session, url):
        assert isinstance(engine.streams, StreamManager)
        conn = engine.streams.connections[0]
        await until(lambda: ("BTCUSDT", "1h") in engine.sync.scheduler.errors, engine.status)
        await fault(session, url, {"refuse_streams": {"status": 451}, "drop_streams": True})
        await until(lambda: conn.last_error is not None and conn.last_error.refused, engine.status)

        (reason,) = engine.readiness()[1]
        host = url.removeprefix("http://")
        assert reason.startswith(
            f"BTCUSDT 1h: warm-up failed: HTTP 451 from {host}: {RESTRICTED_LOCATION_MSG}; "
            f"stream: HTTP 451 on websocket handshake to {host}: {RESTRICTED_LOCATION_MSG} — {REFUSED_HINT} "
            "(next attempt in "
        )
        assert reason.count(REFUSED_HINT) == 1

        await fault(session, url, {"reset": True})
        engine.streams.restart_all()
        async with asyncio.timeout(WAIT):
            await engine.wait_ready()
        assert engine.readiness() == (True, [])


async def test_rest_refusals_carry_the_status_and_binances_words() -> None:
    sim = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=["BTCUSDT"])
    try:
        async with aiohttp.ClientSession() as session:
            await fault(session, sim.url, {"http_error": {"status": 451, "count": 1}})
            with pytest.raises(MarketDataError) as info:
                await BinanceRest(session, sim.url).klines("BTCUSDT", "1h", limit=5)
            assert info.value.status == 451 and info.value.refused
            assert str(info.value) == f"HTTP 451 from {sim.url.removeprefix('http://')}: {RESTRICTED_LOCATION_MSG}"
            await fault(session, sim.url, {"http_error": {"status": 400, "count": 1}})
            with pytest.raises(MarketDataError) as other:
                await BinanceRest(session, sim.url).klines("BTCUSDT", "1h", limit=5)
            assert other.value.status == 400 and not other.value.refused
            assert str(other.value).startswith("Binance API returned status 400: ")
    finally:
        await sim.close()


async def test_the_simulator_refuses_stream_handshakes_until_told_to_stop() -> None:
    sim = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=["BTCUSDT"])
    try:
        async with aiohttp.ClientSession() as session:
            await fault(session, sim.url, {"refuse_streams": {"status": 451}})
            for path in ("/stream?streams=btcusdt@kline_1m", "/ws/btcusdt@kline_1m", "/ws"):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(sim.ws_url + path)
                assert refused.value.status == 451
            async with session.get(sim.url + "/stream?streams=btcusdt@kline_1m") as resp:
                assert resp.status == 451 and await resp.json() == {"code": 0, "msg": RESTRICTED_LOCATION_MSG}
            async with session.post(f"{sim.url}/sim/v1/faults", json={"refuse_streams": {"status": "x"}}) as resp:
                assert resp.status == 400 and "refuse_streams" in (await resp.json())["error"]
            await fault(session, sim.url, {"refuse_streams": None})
            ws = await session.ws_connect(sim.ws_url + "/stream?streams=btcusdt@kline_1m")
            await ws.close()
    finally:
        await sim.close()


async def test_the_ccxt_feed_names_a_refused_handshake_and_waits_minutes() -> None:
    """ccxt's own binance class: its 451 error text is classified like ours, and the stream backs off for minutes."""
    sim = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=["BTCUSDT"])
    exchange = build_pro_exchange("binance", urls={"public": sim.url + "/api/v3", "ws": {"spot": sim.ws_url + "/ws"}})
    try:
        async with aiohttp.ClientSession() as session:
            await fault(session, sim.url, {"refuse_streams": {"status": 451}})
            markets = CcxtMarkets(exchange)
            streams = StreamSettings(stall_timeout_s=None, rotate_after_s=None, backoff_max_s=NORMAL_MAX_S)
            engine = LiveEngine(
                session=session,
                rest=CcxtKlineRest(exchange, markets),
                stream_url="",
                config=EngineConfig(window_bars=50, streams=streams),
                feed=lambda sink: CcxtStreamFeed(exchange, markets, sink, streams, rng=random.Random(2)),
            )
            engine.follow("BTCUSDT", "1m")
            async with engine.running():
                await until(lambda: engine.streams.stream_error("btcusdt@kline_1m") is not None, engine.status)
                error = engine.streams.stream_error("btcusdt@kline_1m")
                assert error is not None and error.status == 451 and error.refused
                assert error.retry_in_s is not None and error.retry_in_s > 100 * NORMAL_MAX_S
                (reason,) = engine.readiness()[1]
                assert reason.startswith("BTCUSDT 1m: stream: binance: NetworkError: 451")
                assert REFUSED_HINT in reason
    finally:
        await exchange.close()
        await sim.close()


def test_ccxt_errors_are_refusals_only_when_they_carry_451_or_403_as_the_status() -> None:
    body = '{"code":0,"msg":"Service unavailable from a restricted location"}'
    assert refusal_status(ccxt.ExchangeNotAvailable(f"binance GET https://x/api/v3/klines?limit=451 451 {body}")) == 451
    assert refusal_status(ccxt.NetworkError("403, message='Invalid response status', url='wss://x/ws'")) == 403
    assert refusal_status(ccxt.ExchangeNotAvailable("binance GET https://x/api/v3/klines?limit=451 503 ")) is None
    assert refusal_status(ccxt.BadRequest("binance 451 restricted")) is None
