"""ccxt.pro's own WebSocket tests, as shipped inside the installed ccxt package, run against the simulator.

Each test imports one function from ``ccxt.pro.test.Exchange`` (the checks ccxt's maintainers
run against the real exchanges: ``test_watch_ticker``, ``test_watch_order_book`` …) and awaits
it with ``ccxt.pro.binance`` pointed at a manual-clock simulator; nothing of ccxt's test code
is copied here.  A background task (``market_activity``) keeps the market moving while a test
runs: it posts a trade in every market and advances the clock one second, over and over, so
every ``watch_*`` call gets its next update; the shipped tests loop until
``exchange.milliseconds()`` (the simulator's clock) has moved 15 s, so they end by simulated
time, not by wall time.  Options, and why:

* ``urls["api"]["ws"]["spot"] = <sim>/ws`` and ``["ws-api"]["spot"] = <sim>/ws-api/v3``: the
  simulator's market-stream and WebSocket-API endpoints.  ccxt opens ``/ws/<n>`` and sends
  SUBSCRIBE, as it does on binance.com.
* ``urls["api"]["public"|"private"] = <sim>/api/v3``, ``options.fetchMarkets = {"types":
  ["spot"]}``, ``fetchCurrencies = False``, ``fetchMargins = False`` and ``has["swap"|"future"|
  "option"] = False``: as in test_ccxt_shipped_tests.py, a spot-only venue serving
  ``/api/v3`` only (watchOrderBook fetches its snapshot from ``GET /api/v3/depth``).
* ``exchange.milliseconds`` is the simulator's clock: the shipped tests compare timestamps
  with it ("not ahead of now") and time their loops with it.  ccxt's websocket client keeps
  its own wall clock for keep-alives (``Exchange.milliseconds`` on the class), unaffected.
* ``skipped_properties``: the per-method dict ccxt's runner reads from its repository's
  ``skip-tests.json`` (not shipped); ``timestamp``/``datetime`` of the order books are skipped
  for the reason test_ccxt_shipped_tests.py gives (Binance's spot depth has no time, so ccxt
  leaves them None exactly as against binance.com).  Nothing else is skipped.

The private watches (watchBalance, watchOrders, watchMyTrades) take the flow Binance
recommends today with no option set: for a spot account ccxt.pro 4.5.90's ``authenticate()``
sends ``userDataStream.subscribe.signature`` (HMAC-signed) on the WS-API connection and reads
the wrapped ``{"subscriptionId", "event"}`` events there; its listenKey branch (``POST
/api/v3/userDataStream``) is never taken for spot, and Binance removed spot listenKeys on
2026-02-20.  While they run, ``trading_account`` trades through signed REST in every market
step (a MARKET BUY, then a LIMIT SELL that rests open until the next step's trade fills it), so
every watch call gets its next ``executionReport`` / ``outboundAccountPosition``; each test
also checks that ccxt subscribed once, that way.

Not run here: the futures-only watch tests (positions, liquidations).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import ROUND_UP, Decimal
from typing import Any

import aiohttp
import ccxt.pro
import pytest

from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator, start_simulator
from tests.simulator.signed import SignedClient

SYMBOL = "BTC/USDT"
SYMBOLS = ["BTC/USDT", "ETH/USDT"]
_NO_TIME = "Binance's spot depth (REST and stream) has no time field, only update ids"
NO_BOOK_TIMESTAMP = {"timestamp": _NO_TIME, "datetime": _NO_TIME}
STEP_S = 1.0
PACE_S = 0.02
"""Wall time between two market steps: paces the load, so ccxt reads each step; no test waits on it."""
BALANCES = {"USDT": Decimal("100000"), "BTC": Decimal("1")}
ORDER_QTY = "0.001"
AccountStep = Callable[[int], Awaitable[None]]
"""One step of account activity (its argument: the step's number), awaited inside the market step."""


def shipped(name: str) -> Callable[..., Any]:
    """ccxt.pro's test function ``name`` from ccxt/pro/test/Exchange/<name>.py."""
    return getattr(importlib.import_module(f"ccxt.pro.test.Exchange.{name}"), name)


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", seed=42, balances=BALANCES)
    try:
        yield running
    finally:
        await running.close()


async def market_activity(sim: RunningSimulator, account_step: AccountStep | None = None) -> None:
    """Every step: a trade near the last price in every market, the account's step if any, one second of clock."""
    ex = sim.exchange
    step = 0
    while True:
        for symbol, market in ex.markets.items():
            ex.trade(symbol, market.last_price(ex.now_ms()) * 1.0001, 0.01)
        if account_step is not None:
            await account_step(step)
        ex.advance(STEP_S)
        step += 1
        await asyncio.sleep(PACE_S)


def trading_account(sim: RunningSimulator, rest: SignedClient) -> AccountStep:
    """Account activity through signed REST, in turn: a MARKET BUY (a taker, filled at once), then a
    LIMIT SELL just above the last price (it rests, open, until the next step's trade fills it as a maker)."""

    async def one_order(step: int) -> None:
        if step % 2 == 0:
            await rest.ok("POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity=ORDER_QTY)
            return
        last = Decimal(repr(sim.exchange.markets["BTCUSDT"].last_price(sim.exchange.now_ms())))
        price = (last * Decimal("1.00005")).quantize(Decimal("0.01"), ROUND_UP)
        await rest.ok("POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="LIMIT", timeInForce="GTC",
                      quantity=ORDER_QTY, price=str(price))  # fmt: skip

    return one_order


@contextlib.asynccontextmanager
async def binance_on(sim: RunningSimulator, account_step: AccountStep | None = None) -> AsyncIterator[Any]:
    """``ccxt.pro.binance`` pointed at ``sim`` (markets loaded), with the market (and account) moving."""
    api = f"{sim.url}/api/v3"
    ex = ccxt.pro.binance(
        {
            "apiKey": DEFAULT_API_KEY,
            "secret": DEFAULT_API_SECRET,
            "options": {"fetchMarkets": {"types": ["spot"]}, "fetchCurrencies": False, "fetchMargins": False},
        }
    )
    ws = ex.urls["api"]["ws"]
    ex.urls["api"] = {
        **ex.urls["api"],
        "public": api,
        "private": api,
        "ws": {**ws, "spot": f"{sim.ws_url}/ws", "ws-api": {**ws["ws-api"], "spot": f"{sim.ws_url}/ws-api/v3"}},
    }
    ex.milliseconds = sim.exchange.now_ms  # the exchange's clock is "now" (see the module docstring)
    ex.has = {**ex.has, "swap": False, "future": False, "option": False}  # a spot-only venue
    driver: asyncio.Task[None] | None = None
    try:
        await ex.load_markets()
        driver = asyncio.create_task(market_activity(sim, account_step), name="ccxt-pro-market-activity")
        yield ex
    finally:
        if driver is not None:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
        await ex.close()


@pytest.fixture
async def exchange(sim: RunningSimulator) -> AsyncIterator[Any]:
    async with binance_on(sim) as ex:
        yield ex


@pytest.fixture
async def trading_exchange(sim: RunningSimulator) -> AsyncIterator[Any]:
    """As ``exchange``, and the account trades every step (``trading_account``)."""
    async with aiohttp.ClientSession() as http, binance_on(sim, trading_account(sim, SignedClient(sim, http))) as ex:
        yield ex


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        ("test_watch_ticker", {}),
        ("test_watch_tickers", {}),
        ("test_watch_bids_asks", {}),
        ("test_watch_order_book", NO_BOOK_TIMESTAMP),
        ("test_watch_trades", {}),
        ("test_watch_ohlcv", {}),
    ],
)
async def test_public_stream_for_one_symbol(exchange: Any, name: str, skipped: dict[str, Any]) -> None:
    async with asyncio.timeout(60):
        assert await shipped(name)(exchange, skipped, SYMBOL) in (True, None)


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        ("test_watch_order_book_for_symbols", NO_BOOK_TIMESTAMP),
        ("test_watch_trades_for_symbols", {}),
    ],
)
async def test_public_stream_for_many_symbols(exchange: Any, name: str, skipped: dict[str, Any]) -> None:
    async with asyncio.timeout(60):
        assert await shipped(name)(exchange, skipped, SYMBOLS) in (True, None)


def subscribed_once_over_the_ws_api(sim: RunningSimulator) -> bool:
    """ccxt subscribed the account once, by signature on the WS-API, and holds that subscription."""
    ex = sim.exchange
    return ex.requests["WS userDataStream.subscribe.signature"] == 1 and ex.ws_api.state()["subscriptions"] == 1


async def test_watch_balance(sim: RunningSimulator, trading_exchange: Any) -> None:
    async with asyncio.timeout(60):
        assert await shipped("test_watch_balance")(trading_exchange, {}, "USDT") is None  # it returns nothing
    assert subscribed_once_over_the_ws_api(sim)


@pytest.mark.parametrize("name", ["test_watch_orders", "test_watch_my_trades"])
async def test_private_stream_for_one_symbol(sim: RunningSimulator, trading_exchange: Any, name: str) -> None:
    async with asyncio.timeout(60):
        assert await shipped(name)(trading_exchange, {}, SYMBOL) is True
    assert subscribed_once_over_the_ws_api(sim)
