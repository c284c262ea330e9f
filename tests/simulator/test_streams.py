"""Market streams: trades and clock advances reach subscribers; faults behave like Binance's."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from simulator.app import RunningSimulator, start_simulator
from tests.simulator.conftest import get_json, post_json

M = 60_000


async def recv(ws: aiohttp.ClientWebSocketResponse) -> Any:
    msg = await ws.receive(timeout=5)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return msg.json()


async def test_a_posted_trade_updates_the_open_kline_of_every_interval(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """/sim/v1/price pushes the new close to the 1m and 1h streams at once (combined wrapper)."""
    async with http.ws_connect(f"{simx.ws_url}/stream?streams=btcusdt@kline_1m/btcusdt@kline_1h") as ws:
        await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "BTCUSDT", "price": "70123.5"})
        got = {}
        for _ in range(2):
            frame = await recv(ws)
            got[frame["stream"]] = frame["data"]
        assert set(got) == {"btcusdt@kline_1m", "btcusdt@kline_1h"}
        for data in got.values():
            assert data["e"] == "kline" and data["k"]["c"] == "70123.50000000" and data["k"]["x"] is False


async def test_advancing_closes_klines_and_rest_matches_what_the_stream_sent(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """Three minutes later the stream has sent three x=true klines equal to REST's rows."""
    async with http.ws_connect(f"{simx.ws_url}/ws/ethusdt@kline_1m") as ws:
        await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "ETHUSDT", "price": "3300"})
        await recv(ws)
        await post_json(http, f"{simx.url}/sim/v1/advance", {"seconds": 180})
        closed = []
        while len(closed) < 3:
            k = (await recv(ws))["k"]
            if k["x"]:
                closed.append(k)
        _, _, rows = await get_json(http, f"{simx.url}/api/v3/klines", symbol="ETHUSDT", interval="1m", limit=4)
    for k, row in zip(closed, rows[:3], strict=True):
        assert [k["t"], k["o"], k["h"], k["l"], k["c"], k["v"]] == row[:6]
    assert closed[0]["o"] == "3300.00000000"


async def test_subscribe_list_and_unsubscribe_are_acknowledged(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """The live methods answer with Binance's result/id frames."""
    async with http.ws_connect(f"{simx.ws_url}/ws") as ws:
        await ws.send_json({"method": "SUBSCRIBE", "params": ["btcusdt@kline_1m", "solusdt@kline_4h"], "id": 1})
        assert await recv(ws) == {"result": None, "id": 1}
        await ws.send_json({"method": "UNSUBSCRIBE", "params": ["btcusdt@kline_1m"], "id": 2})
        assert await recv(ws) == {"result": None, "id": 2}
        await ws.send_json({"method": "LIST_SUBSCRIPTIONS", "id": 3})
        assert await recv(ws) == {"result": ["solusdt@kline_4h"], "id": 3}
        await ws.send_json({"method": "SUBSCRIBE", "params": ["nope@kline_1m"], "id": 4})
        assert "error" in await recv(ws)


async def test_server_shutdown_event_precedes_the_close(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """serverShutdown is sent on the stream, then the server closes it."""
    async with http.ws_connect(f"{simx.ws_url}/ws/btcusdt@kline_1m") as ws:
        await post_json(http, f"{simx.url}/sim/v1/faults", {"server_shutdown": True})
        assert (await recv(ws))["e"] == "serverShutdown"
        assert (await ws.receive(timeout=5)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_dropped_streams_end_abruptly(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """drop_streams cuts every connection."""
    async with http.ws_connect(f"{simx.ws_url}/ws/btcusdt@kline_1m") as ws:
        body = await post_json(http, f"{simx.url}/sim/v1/faults", {"drop_streams": True})
        assert body["dropped"] == 1
        msg = await ws.receive(timeout=5)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)


async def test_a_stalled_stream_delivers_nothing_until_reset(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """During a stall trades are not delivered; after reset they are again."""
    async with http.ws_connect(f"{simx.ws_url}/ws/btcusdt@kline_1m") as ws:
        await post_json(http, f"{simx.url}/sim/v1/faults", {"stall_streams_s": 600})
        await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "BTCUSDT", "price": "60000"})
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=0.3)
        await post_json(http, f"{simx.url}/sim/v1/faults", {"reset": True})
        await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "BTCUSDT", "price": "60001"})
        assert (await recv(ws))["k"]["c"] == "60001.00000000"


async def test_connections_are_closed_at_the_maximum_age(http: aiohttp.ClientSession) -> None:
    """With a tiny age limit, the server closes the connection by itself."""
    async with await start_simulator(max_connection_age_s=0.2) as sim:
        async with http.ws_connect(f"{sim.ws_url}/ws/btcusdt@kline_1m") as ws:
            msg = await ws.receive(timeout=5)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_state_reports_requests_streams_and_clock(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """GET /sim/v1/state counts requests by endpoint and lists subscriptions."""
    async with http.ws_connect(f"{simx.ws_url}/ws/btcusdt@kline_1m"):
        await get_json(http, f"{simx.url}/api/v3/time")
        _, _, state = await get_json(http, f"{simx.url}/sim/v1/state")
    assert state["requests"]["GET /api/v3/time"] == 1
    assert state["streams"]["subscriptions"] == ["btcusdt@kline_1m"]
    assert state["clock_ms"] == simx.exchange.now_ms() and state["orders"] == []
