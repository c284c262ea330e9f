"""python-binance's BinanceSocketManager public sockets against the simulator, payloads checked against Binance's docs.

Every spot market socket of python-binance 1.0.37 is opened on a manual-clock simulator
(``STREAM_URL`` pointed at it) while a background task trades and moves the clock, and its
first message is compared key by key, with each value's JSON type, to the payload example
of Binance's web-socket-streams.md (kept verbatim in tests/brokers/data/binance_stream_examples.json,
extracted from the document's payload blocks, not retyped).  python-binance
has no socket for the rolling-window tickers or the average price: those go through
``multiplex_socket``.  Three of its sockets ask for names Binance no longer documents
(``!ticker@arr``, ``!bookTicker``, ``!miniTicker@arr@1000ms``); the simulator refuses them as
it refuses any unknown stream, which is what those tests pin.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import websockets
from binance import AsyncClient, BinanceSocketManager

from simulator import RunningSimulator, start_simulator

EXAMPLES = Path(__file__).parent / "data" / "binance_stream_examples.json"
"""Each section's payload example of Binance's web-socket-streams.md, by section title."""
PACE_S = 0.02
"""Wall time between two market steps: paces the load generator; no test waits on it."""


@cache
def documented(section: str) -> Any:
    """The JSON payload example under ``## <section>`` of web-socket-streams.md."""
    examples: dict[str, Any] = json.loads(EXAMPLES.read_text())
    return examples[section]


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return type(value).__name__


def assert_same_shape(got: Any, example: Any, where: str = "$") -> None:
    """Same keys and value types as ``example`` (lists: every element like the example's first)."""
    assert json_type(got) == json_type(example), f"{where}: {got!r} is not like {example!r}"
    if isinstance(example, dict):
        assert list(got) == list(example), f"{where}: keys {list(got)} != documented {list(example)}"
        for key, value in example.items():
            assert_same_shape(got[key], value, f"{where}.{key}")
    elif isinstance(example, list) and example:
        assert got, f"{where}: empty list"
        for i, item in enumerate(got):
            assert_same_shape(item, example[0], f"{where}[{i}]")


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    running = await start_simulator(clock="manual", seed=7)
    ex = running.exchange

    async def activity() -> None:
        while True:
            for symbol, market in ex.markets.items():
                ex.trade(symbol, market.last_price(ex.now_ms()) * 0.9999, 0.02)
            ex.advance(1.0)
            await asyncio.sleep(PACE_S)

    driver = asyncio.create_task(activity(), name="python-binance-market-activity")
    try:
        yield running
    finally:
        driver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await driver
        await running.close()


@pytest.fixture
async def bsm(sim: RunningSimulator) -> AsyncIterator[BinanceSocketManager]:
    client = AsyncClient(api_key="k", api_secret="s")
    manager = BinanceSocketManager(client)
    manager.STREAM_URL = f"{sim.ws_url}/"
    try:
        yield manager
    finally:
        await client.close_connection()


async def first_message(socket: Any) -> Any:
    async with asyncio.timeout(10), socket as s:
        msg = await s.recv()
    assert not (isinstance(msg, dict) and msg.get("e") == "error"), msg
    return msg


SOCKETS: list[tuple[str, Callable[[BinanceSocketManager], Any], str]] = [
    ("trade", lambda m: m.trade_socket("BTCUSDT"), "Trade Streams"),
    ("aggtrade", lambda m: m.aggtrade_socket("BTCUSDT"), "Aggregate Trade Streams"),
    ("depth diff", lambda m: m.depth_socket("BTCUSDT"), "Diff. Depth Stream"),
    ("depth diff 100ms", lambda m: m.depth_socket("BTCUSDT", interval=100), "Diff. Depth Stream"),
    ("depth partial", lambda m: m.depth_socket("BTCUSDT", depth="5"), "Partial Book Depth Streams"),
    (
        "depth partial 100ms",
        lambda m: m.depth_socket("ETHUSDT", depth="20", interval=100),
        "Partial Book Depth Streams",
    ),
    ("symbol book ticker", lambda m: m.symbol_book_ticker_socket("BTCUSDT"), "Individual Symbol Book Ticker Streams"),
    ("symbol ticker", lambda m: m.symbol_ticker_socket("BTCUSDT"), "Individual Symbol Ticker Streams"),
    ("symbol miniticker", lambda m: m.symbol_miniticker_socket("SOLUSDT"), "Individual Symbol Mini Ticker Stream"),
    ("kline", lambda m: m.kline_socket("BTCUSDT", "1m"), "Kline/Candlestick Streams for UTC"),
]


@pytest.mark.parametrize(("label", "open_socket", "section"), SOCKETS, ids=[s[0] for s in SOCKETS])
async def test_socket_first_message_is_shaped_like_binances_example(
    bsm: BinanceSocketManager, label: str, open_socket: Callable[[BinanceSocketManager], Any], section: str
) -> None:
    msg = await first_message(open_socket(bsm))
    assert_same_shape(msg, documented(section))


MULTIPLEXED = {
    "btcusdt@ticker_1h": "Individual Symbol Rolling Window Statistics Streams",
    "ethusdt@ticker_4h": "Individual Symbol Rolling Window Statistics Streams",
    "solusdt@ticker_1d": "Individual Symbol Rolling Window Statistics Streams",
    "btcusdt@avgPrice": "Average Price",
    "btcusdt@trade": "Trade Streams",
    "ethusdt@kline_1h": "Kline/Candlestick Streams for UTC",
}
ARRAYS = {
    "!miniTicker@arr": "Individual Symbol Mini Ticker Stream",
    "!ticker_1h@arr": "Individual Symbol Rolling Window Statistics Streams",
    "!ticker_4h@arr": "Individual Symbol Rolling Window Statistics Streams",
    "!ticker_1d@arr": "Individual Symbol Rolling Window Statistics Streams",
}


async def test_multiplex_socket_wraps_every_stream_and_each_is_shaped_like_the_docs(
    bsm: BinanceSocketManager, sim: RunningSimulator
) -> None:
    """Rolling windows, avgPrice and the all-market arrays (no socket of their own) over the combined stream."""
    wanted = {**MULTIPLEXED, **ARRAYS}
    seen: dict[str, Any] = {}
    async with asyncio.timeout(20), bsm.multiplex_socket(list(wanted)) as s:
        while len(seen) < len(wanted):
            msg = await s.recv()
            assert set(msg) == {"stream", "data"}, msg
            seen.setdefault(msg["stream"], msg["data"])
    for name, section in MULTIPLEXED.items():
        assert_same_shape(seen[name], documented(section), name)
    for name, section in ARRAYS.items():
        assert isinstance(seen[name], list) and seen[name], name
        for item in seen[name]:
            assert_same_shape(item, documented(section), name)
        assert {t["s"] for t in seen[name]} <= set(sim.exchange.markets)
    assert {w["e"] for n, w in seen.items() if "ticker_" in n and not n.startswith("!")} == {
        "1hTicker",
        "4hTicker",
        "1dTicker",
    }


@pytest.mark.parametrize(
    "open_socket",
    [
        lambda m: m.ticker_socket(),  # !ticker@arr: removed from Binance's documentation
        lambda m: m.book_ticker_socket(),  # !bookTicker: removed from Binance's documentation
        lambda m: m.miniticker_socket(),  # !miniTicker@arr@1000ms: never documented
    ],
    ids=["ticker !ticker@arr", "book ticker !bookTicker", "miniticker !miniTicker@arr@1000ms"],
)
async def test_undocumented_all_market_sockets_are_refused_like_any_unknown_stream(
    bsm: BinanceSocketManager, open_socket: Callable[[BinanceSocketManager], Any]
) -> None:
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        async with asyncio.timeout(10), open_socket(bsm):
            pass
    assert refused.value.response.status_code == 400
    assert json.loads(refused.value.response.body)["code"] == -1121
