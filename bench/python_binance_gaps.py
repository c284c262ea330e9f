"""Reproducer: where python-binance 1.0.37 falls short of our Binance clients, measured on the simulator.

    python -m bench.python_binance_gaps

Decides two "use the library or keep ours" questions (issue 12 §5); the module docstrings of
brokers/binance/user_stream.py and engine/market_data/binance_rest.py quote its output.

User data stream (``userDataStream.subscribe.signature`` over the WS-API), three drops of
every WS-API connection (the simulator's ``drop_all``), one limit order placed after each:

- **ours**: :class:`brokers.binance.user_stream.UserStream` under a restart loop (what the
  daemon's supervisor does): seconds from the drop to the next subscription, and the
  execution reports of the order placed after it;
- **python-binance, as shipped**: ``BinanceSocketManager.user_socket()``; after the drop its
  WS-API connection comes back but nothing re-subscribes: subscriptions the exchange holds,
  and the events received for the order placed afterwards (waiting 3 s);
- **python-binance, supervised**: the same socket rebuilt by a restart loop whenever it
  reports ``{"e": "error"}`` (the best wrapper we could write around it): seconds from the
  drop to the next subscription, and the events for the order placed after it.

Market-data REST (klines), ours (:class:`engine.market_data.binance_rest.BinanceRest`) vs
``AsyncClient.get_klines``:

- a 429 with ``Retry-After: 2`` on the first request, then the same call five times: the
  requests that reached the exchange during the 2-s ban (Binance answers those with 418 and
  an IP ban that grows from 2 minutes to 3 days) and how many calls failed;
- 200 ``klines limit=500`` calls each, alternating ours and the library's: p50 latency (the
  simulator and the client share the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from binance import AsyncClient, BinanceSocketManager
from binance.exceptions import BinanceAPIException
from binance.ws.constants import WSListenerState
from binance.ws.websocket_api import WebsocketAPI

from brokers import ExchangeOrder, UserStream, UserStreamEnded
from engine import BinanceRest, MarketDataError
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, HttpErrorFault, RunningSimulator, start_simulator

DROPS = 3
EVENT_WAIT_S = 3.0
RESUBSCRIBE_WAIT_S = 30.0


def _sim_subscriptions(sim: RunningSimulator) -> int:
    return sum(len(c.subscriptions) for c in sim.exchange.ws_api.connections)


async def _pb_client(sim: RunningSimulator) -> AsyncClient:
    client = AsyncClient(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET)
    client.API_URL = f"{sim.url}/api"
    client.ws_api = WebsocketAPI(url=f"{sim.ws_url}/ws-api/v3")
    server = await client.get_server_time()
    client.timestamp_offset = server["serverTime"] - int(time.time() * 1000)
    return client


async def _close_fast(client: AsyncClient) -> None:
    """Close without waiting for its read loop's 10-s recv() timeout to notice."""
    client.ws_api.ws_state = WSListenerState.EXITING
    if client.ws_api.ws is not None:
        with contextlib.suppress(Exception):
            await client.ws_api.ws.close()
    with contextlib.suppress(Exception):
        await client.close_connection()


async def _limit_order(client: AsyncClient, price: int) -> None:
    await client.create_order(
        symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.001", price=str(price)
    )


async def _wait(event: asyncio.Event, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return None
    return round(time.monotonic() - t0, 2)


async def _drops(
    sim: RunningSimulator, client: AsyncClient, subscribed: asyncio.Event, reports: list[Any]
) -> dict[str, Any]:
    """Drop the WS-API DROPS times; after each, time the resubscription and count the next order's reports."""
    resubscribe_s: list[float | None] = []
    delivered: list[int] = []
    for i in range(DROPS):
        subscribed.clear()
        sim.exchange.ws_api.drop_all()
        resubscribe_s.append(await _wait(subscribed, RESUBSCRIBE_WAIT_S))
        before = len(reports)
        await _limit_order(client, 60000 - i)
        deadline = time.monotonic() + EVENT_WAIT_S
        while len(reports) == before and time.monotonic() < deadline:  # noqa: ASYNC110 - a bench may poll
            await asyncio.sleep(0.02)
        delivered.append(len(reports) - before)
    return {"resubscribe_s": resubscribe_s, "reports_after_each_drop": delivered}


async def user_stream_ours(sim: RunningSimulator) -> dict[str, Any]:
    client = await _pb_client(sim)  # only to place the orders
    subscribed = asyncio.Event()
    reports: list[ExchangeOrder] = []

    async def on_order(update: ExchangeOrder) -> None:
        reports.append(update)

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
            time_offset_ms=lambda: int(client.timestamp_offset),
        )

        async def supervised() -> None:
            while True:
                with contextlib.suppress(UserStreamEnded):
                    await stream.run()
                await asyncio.sleep(0.1)

        task = asyncio.create_task(supervised())
        try:
            await _wait(subscribed, RESUBSCRIBE_WAIT_S)
            return await _drops(sim, client, subscribed, reports)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close_connection()


async def user_stream_python_binance(sim: RunningSimulator) -> dict[str, Any]:
    client = await _pb_client(sim)
    socket = BinanceSocketManager(client).user_socket()
    received: list[dict[str, Any]] = []
    two_errors = asyncio.Event()

    async def read() -> None:
        while True:
            received.append(await socket.recv())
            if sum(1 for m in received if m.get("e") == "error") == 2:
                two_errors.set()

    try:
        async with socket:
            reader = asyncio.create_task(read())
            sim.exchange.ws_api.drop_all()
            await two_errors.wait()  # its read loop has decided to reconnect
            t0 = time.monotonic()
            await client.ws_api._wait_for_reconnect()
            reconnect_s = round(time.monotonic() - t0, 2)
            await client._ws_api_request("ping", False, {})  # answered: the new connection is registered
            before = len(received)
            await _limit_order(client, 60000)
            await asyncio.sleep(EVENT_WAIT_S)
            reader.cancel()
            return {
                "ws_api_reconnected_after_s": reconnect_s,
                "ws_api_connections_after_drop": len(sim.exchange.ws_api.connections),
                "subscriptions_at_exchange_after_drop": _sim_subscriptions(sim),
                "error_messages": sum(1 for m in received if m.get("e") == "error"),
                "reports_after_drop": sum(1 for m in received[before:] if m.get("e") == "executionReport"),
            }
    finally:
        await _close_fast(client)


async def user_stream_python_binance_supervised(sim: RunningSimulator) -> dict[str, Any]:
    client = await _pb_client(sim)
    subscribed = asyncio.Event()
    reports: list[dict[str, Any]] = []
    failures: list[str] = []

    async def once() -> None:
        async with BinanceSocketManager(client).user_socket() as socket:  # a fresh manager: no cached socket
            subscribed.set()
            while True:
                msg = await socket.recv()
                if msg.get("e") == "error":
                    raise ConnectionError(msg.get("m"))
                if msg.get("e") == "executionReport":
                    reports.append(msg)

    async def supervised() -> None:
        while True:
            try:
                await once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the library's failure modes, recorded
                failures.append(f"{type(exc).__name__}: {exc}"[:100])
            await asyncio.sleep(0.1)

    task = asyncio.create_task(supervised())
    try:
        await _wait(subscribed, RESUBSCRIBE_WAIT_S)
        out = await _drops(sim, client, subscribed, reports)
        out["failures"] = sorted(set(failures))
        return out
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await _close_fast(client)


async def _ban_case(
    sim: RunningSimulator, call: Callable[[], Awaitable[Any]], failure: type[Exception]
) -> dict[str, Any]:
    sim.exchange.faults.http_errors.append(HttpErrorFault(status=429, retry_after=2, count=1, path="/api/v3/klines"))
    sent = sim.exchange.requests
    key = next((k for k in sent if k.endswith("/api/v3/klines")), "GET /api/v3/klines")
    start = sent[key]
    t0 = time.monotonic()
    failed = 0
    during_ban = 0
    for _ in range(6):  # the first meets the 429, five more follow at once
        try:
            await call()
        except failure:
            failed += 1
        if time.monotonic() - t0 < 2.0:
            during_ban = sent[key] - start - 1  # requests after the one answered 429
    return {"requests_sent_during_ban": during_ban, "calls_failed": failed, "requests_total": sent[key] - start}


async def _interleaved_p50_ms(
    first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]], n: int = 200
) -> tuple[float, float]:
    """p50 of each call, alternating them so both see the same machine and simulator state."""
    a: list[float] = []
    b: list[float] = []
    for i in range(2 * n + 20):
        call, samples = (first, a) if i % 2 == 0 else (second, b)
        t0 = time.perf_counter()
        await call()
        if i >= 20:  # warm-up
            samples.append(time.perf_counter() - t0)
    return round(statistics.median(a) * 1000, 3), round(statistics.median(b) * 1000, 3)


async def rest_klines(sim: RunningSimulator) -> dict[str, Any]:
    client = await _pb_client(sim)
    try:
        async with aiohttp.ClientSession() as session:
            ours = BinanceRest(session, sim.url)

            async def ours_call() -> Any:
                return await ours.klines("BTCUSDT", "1m", limit=500)

            async def pb_call() -> Any:
                return await client.get_klines(symbol="BTCUSDT", interval="1m", limit=500)

            out = {
                "ours_429": await _ban_case(sim, ours_call, MarketDataError),
                "python_binance_429": await _ban_case(sim, pb_call, BinanceAPIException),
            }
            out["ours_p50_ms"], out["python_binance_p50_ms"] = await _interleaved_p50_ms(ours_call, pb_call)
            return out
    finally:
        await client.close_connection()


async def run_all() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, case in (
        ("user_stream_ours", user_stream_ours),
        ("user_stream_python_binance", user_stream_python_binance),
        ("user_stream_python_binance_supervised", user_stream_python_binance_supervised),
        ("rest_klines", rest_klines),
    ):
        sim = await start_simulator(clock="real", symbols=["BTCUSDT"])
        sim.exchange.trade("BTCUSDT", 65000.0, 0.01)
        try:
            out[name] = await case(sim)
        finally:
            await sim.close()
    return out


def main() -> None:
    import logging

    logging.getLogger("binance").setLevel(logging.CRITICAL)  # its read loop logs every drop as an error
    from bench.__main__ import machine

    print(f"machine: {machine()}; python-binance {__import__('binance').__version__}")
    for name, result in asyncio.run(run_all()).items():
        print(f"{name}: {result}")


if __name__ == "__main__":
    main()
