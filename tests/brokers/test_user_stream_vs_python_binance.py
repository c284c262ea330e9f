"""Why brokers/binance/user_stream.py is ours: python-binance 1.0.37 loses the subscription on a reconnect.

The same WS-API drop (the simulator closes every connection) is given to python-binance's
``BinanceSocketManager.user_socket()`` and to our :class:`UserStream`.  python-binance's
WS-API connection comes back by itself but nothing subscribes again: the exchange holds no
subscription, so no execution report can ever arrive, while the socket has reported nothing
but two ``{"e": "error"}`` messages and keeps waiting.  Ours ends (UserStreamEnded), the
supervisor runs it again and the exchange holds a subscription.  If a python-binance upgrade
makes the first assertion fail, re-measure with ``python -m bench.python_binance_gaps`` and
reconsider the library.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import pytest
from binance import AsyncClient, BinanceSocketManager
from binance.ws.constants import WSListenerState
from binance.ws.websocket_api import WebsocketAPI

from brokers.binance.user_stream import UserStream, UserStreamEnded
from brokers.models import ExchangeOrder
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator


def subscriptions(sim: RunningSimulator) -> int:
    return sum(len(c.subscriptions) for c in sim.exchange.ws_api.connections)


async def test_python_binance_reconnects_the_ws_api_without_resubscribing(sim: RunningSimulator) -> None:
    client = AsyncClient(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET)
    client.API_URL = f"{sim.url}/api"
    client.ws_api = WebsocketAPI(url=f"{sim.ws_url}/ws-api/v3")
    server = await client.get_server_time()
    client.timestamp_offset = server["serverTime"] - int(time.time() * 1000)
    socket = BinanceSocketManager(client).user_socket()
    errors: list[dict[str, Any]] = []
    two_errors = asyncio.Event()

    async def read() -> None:
        while True:
            msg = await socket.recv()
            if msg.get("e") == "error":
                errors.append(msg)
                if len(errors) == 2:
                    two_errors.set()

    try:
        async with asyncio.timeout(30):
            async with socket:
                assert subscriptions(sim) == 1
                reader = asyncio.create_task(read())
                sim.exchange.ws_api.drop_all()
                await two_errors.wait()  # the second one is sent once its read loop decided to reconnect
                await client.ws_api._wait_for_reconnect()
                await client._ws_api_request("ping", False, {})  # answered: the new connection is registered
                assert len(sim.exchange.ws_api.connections) == 1
                assert subscriptions(sim) == 0  # nothing will ever be delivered to this socket
                assert [e["type"] for e in errors] == ["ConnectionClosedOK", "BinanceWebsocketClosed"]
                assert not reader.done()  # and it does not end: recv() keeps waiting
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
    finally:
        # its read loop notices a close only when recv() times out (10 s): end it at once
        client.ws_api.ws_state = WSListenerState.EXITING
        if client.ws_api.ws is not None:
            await client.ws_api.ws.close()
        with contextlib.suppress(Exception):
            await client.close_connection()


async def test_our_user_stream_ends_on_the_same_drop_and_subscribes_again(sim: RunningSimulator) -> None:
    subscribed = asyncio.Event()

    async def on_order(update: ExchangeOrder) -> None:
        pass

    async def on_resubscribed() -> None:
        subscribed.set()

    async with aiohttp.ClientSession() as session:
        stream = UserStream(
            session,
            f"{sim.ws_url}/ws-api/v3",
            api_key=DEFAULT_API_KEY,
            api_secret=DEFAULT_API_SECRET,
            on_order=on_order,
            on_resubscribed=on_resubscribed,
        )
        async with asyncio.timeout(30):
            first = asyncio.create_task(stream.run())
            await subscribed.wait()
            assert subscriptions(sim) == 1
            subscribed.clear()
            sim.exchange.ws_api.drop_all()
            with pytest.raises(UserStreamEnded):
                await first
            second = asyncio.create_task(stream.run())  # what the daemon's supervisor does
            await subscribed.wait()
            assert subscriptions(sim) == 1 and stream.subscriptions == 2
            second.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await second
