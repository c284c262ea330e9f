"""The simulator's market is on the tick grid, has a spread, and serves Binance's book and trade endpoints.

Prices of the ticker, the 24 h ticker, klines, trades and fills are multiples of PRICE_FILTER's
tickSize; the book has bid < last ≤ ask at least one tick apart; /api/v3/depth, /trades,
/aggTrades, /avgPrice and /ticker/bookTicker answer with Binance's shapes, limits, errors and
weights; python-binance's AsyncClient reads them unchanged.  Offline, manual clock, loopback.
"""

from __future__ import annotations

import itertools
import time
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from binance import AsyncClient

from simulator.app import RunningSimulator, start_simulator
from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET
from tests.simulator.conftest import get_json, post_json

API = "/api/v3"
TRADE_KEYS = {"id", "price", "qty", "quoteQty", "time", "isBuyerMaker", "isBestMatch"}
AGG_KEYS = {"a", "p", "q", "f", "l", "T", "m", "M"}
BOOK_TICKER_KEYS = {"symbol", "bidPrice", "bidQty", "askPrice", "askQty"}


async def filters(http: aiohttp.ClientSession, url: str) -> dict[str, tuple[Decimal, Decimal]]:
    """(tickSize, stepSize) per symbol, from exchangeInfo."""
    _, _, info = await get_json(http, f"{url}{API}/exchangeInfo")
    out = {}
    for s in info["symbols"]:
        f = {x["filterType"]: x for x in s["filters"]}
        out[s["symbol"]] = (Decimal(f["PRICE_FILTER"]["tickSize"]), Decimal(f["LOT_SIZE"]["stepSize"]))
    return out


def on_grid(value: str, tick: Decimal) -> bool:
    return Decimal(value) % tick == 0 and Decimal(value) > 0


async def weight_of(http: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Any]:
    """The request weight one GET spent (difference of X-MBX-USED-WEIGHT-1M around it) and its body."""
    _, before, _ = await get_json(http, f"{url.rsplit('/api/', 1)[0]}{API}/ping")
    status, after, body = await get_json(http, url, **params)
    return int(after["X-MBX-USED-WEIGHT-1M"]) - int(before["X-MBX-USED-WEIGHT-1M"]), (status, body)


async def signed_client(sim: RunningSimulator) -> AsyncClient:
    """python-binance pointed at the simulator, its timestamps shifted to the simulator's clock."""
    client = AsyncClient(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET)
    client.API_URL = f"{sim.url}/api"
    resync(client, sim)
    return client


def resync(client: AsyncClient, sim: RunningSimulator) -> None:
    """Align python-binance's timestamps with the (manual, standing) simulator clock just before a signed call."""
    client.timestamp_offset = sim.exchange.server_time() - int(time.time() * 1000)


async def advance(http: aiohttp.ClientSession, sim: RunningSimulator, seconds: float) -> None:
    await post_json(http, f"{sim.url}/sim/v1/advance", {"seconds": seconds})


async def test_every_price_is_on_the_tick_grid(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """ticker, 24 h ticker, klines OHLC, trades, aggTrades, depth and avgPrice-free prices are multiples of tickSize."""
    grid = await filters(http, simx.url)
    await advance(http, simx, 7.25)  # off the whole second: the path is between lattice points
    await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "ETHUSDT", "price": "3201.23456789"})
    for symbol, (tick, _) in grid.items():
        _, _, price = await get_json(http, f"{simx.url}{API}/ticker/price", symbol=symbol)
        assert on_grid(price["price"], tick)
        _, _, t24 = await get_json(http, f"{simx.url}{API}/ticker/24hr", symbol=symbol)
        for key in ("lastPrice", "openPrice", "highPrice", "lowPrice", "prevClosePrice", "bidPrice", "askPrice"):
            assert on_grid(t24[key], tick), (symbol, key, t24[key])
        for interval in ("1s", "1m", "15m", "1h", "1d"):
            _, _, rows = await get_json(http, f"{simx.url}{API}/klines", symbol=symbol, interval=interval, limit=50)
            assert all(on_grid(v, tick) for r in rows for v in r[1:5]), (symbol, interval)
        _, _, trades = await get_json(http, f"{simx.url}{API}/trades", symbol=symbol, limit=1000)
        assert trades and all(on_grid(t["price"], tick) for t in trades)
        _, _, aggs = await get_json(http, f"{simx.url}{API}/aggTrades", symbol=symbol)
        assert aggs and all(on_grid(a["p"], tick) for a in aggs)
        _, _, depth = await get_json(http, f"{simx.url}{API}/depth", symbol=symbol)
        assert all(on_grid(p, tick) for p, _ in depth["bids"] + depth["asks"])
    _, _, eth = await get_json(http, f"{simx.url}{API}/ticker/price", symbol="ETHUSDT")
    assert eth["price"] == "3201.23500000"  # the posted price, snapped to the 0.001 tick


async def test_a_market_order_fills_on_the_grid_and_is_a_public_trade(simx: RunningSimulator) -> None:
    """A market buy (python-binance, signed) fills at a tick multiple; the fill is the tape's newest trade."""
    client = await signed_client(simx)
    try:
        simx.exchange.clock.advance(3.5)
        resync(client, simx)
        order = await client.order_market_buy(symbol="BTCUSDT", quantity="0.01")
        trades = await client.get_recent_trades(symbol="BTCUSDT", limit=3)
    finally:
        await client.close_connection()
    (fill,) = order["fills"]
    assert Decimal(fill["price"]) % Decimal("0.01") == 0
    newest = trades[-1]
    assert (newest["price"], newest["qty"], newest["isBuyerMaker"]) == (fill["price"], "0.01000000", False)
    assert newest["time"] == simx.exchange.now_ms() and newest["id"] == trades[-2]["id"] + 1


async def test_the_book_has_a_spread_of_at_least_one_tick(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """best bid < last ≤ best ask, ask − bid ≥ tick; levels ordered, quantities on the lot step; REST agrees."""
    grid = await filters(http, simx.url)
    for _ in range(6):
        for symbol, (tick, step) in grid.items():
            bid, ask = simx.exchange.best_bid_ask(symbol)
            assert isinstance(bid, Decimal) and isinstance(ask, Decimal)
            last = Decimal(f"{simx.exchange.markets[symbol].last_price(simx.exchange.now_ms()):.8f}")
            assert bid < last <= ask and ask - bid >= tick
            book = simx.exchange.book(symbol, 10)
            assert len(book.bids) == len(book.asks) == 10
            assert all(a[0] > b[0] for a, b in itertools.pairwise(book.bids))
            assert all(a[0] < b[0] for a, b in itertools.pairwise(book.asks))
            assert all(q > 0 and q % step == 0 for _, q in book.bids + book.asks)
            _, _, top = await get_json(http, f"{simx.url}{API}/ticker/bookTicker", symbol=symbol)
            _, _, t24 = await get_json(http, f"{simx.url}{API}/ticker/24hr", symbol=symbol)
            assert Decimal(top["bidPrice"]) == Decimal(t24["bidPrice"]) == bid
            assert Decimal(top["askPrice"]) == Decimal(t24["askPrice"]) == ask
            assert top["bidQty"] == t24["bidQty"] and top["askQty"] == t24["askQty"]
        await advance(http, simx, 61.3)


async def test_depth_shape_limits_errors_and_weights(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    url = f"{simx.url}{API}/depth"
    weight, (status, body) = await weight_of(http, url, symbol="BTCUSDT")
    assert status == 200 and weight == 5 and set(body) == {"lastUpdateId", "bids", "asks"}
    assert isinstance(body["lastUpdateId"], int) and 5 <= len(body["bids"]) <= 100
    assert all(isinstance(p, str) and isinstance(q, str) and len(lvl) == 2 for lvl in body["bids"] for p, q in [lvl])
    assert Decimal(body["bids"][0][0]) < Decimal(body["asks"][0][0])
    weight, (_, five) = await weight_of(http, url, symbol="BTCUSDT", limit=5)
    assert weight == 5 and len(five["bids"]) == len(five["asks"]) == 5 and five["bids"] == body["bids"][:5]
    assert (await weight_of(http, url, symbol="BTCUSDT", limit=500))[0] == 25
    assert (await weight_of(http, url, symbol="BTCUSDT", limit=1000))[0] == 50
    assert (await weight_of(http, url, symbol="BTCUSDT", limit=6000))[0] == 250  # answered, at most 5000 levels
    simx.exchange.clock.advance(1)
    _, _, later = await get_json(http, url, symbol="BTCUSDT")
    assert later["lastUpdateId"] > body["lastUpdateId"]
    for params, code in (
        ({}, -1102),
        ({"symbol": "NOPEUSDT"}, -1121),
        ({"symbol": "BTCUSDT", "limit": "0"}, -1130),
        ({"symbol": "BTCUSDT", "limit": "x"}, -1100),
        ({"symbol": "BTCUSDT", "symbolStatus": "HALT"}, -1220),
        ({"symbol": "BTCUSDT", "symbolStatus": "NOPE"}, -1122),
    ):
        status, _, err = await get_json(http, url, **params)
        assert status == 400 and err["code"] == code, (params, err)


async def test_recent_trades_shape_limit_and_ids(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """Default 500, at most 1000, oldest first with consecutive ids; control-API trades are on the tape."""
    url = f"{simx.url}{API}/trades"
    weight, (status, trades) = await weight_of(http, url, symbol="BTCUSDT")
    assert status == 200 and weight == 25 and len(trades) == 500
    assert all(set(t) == TRADE_KEYS for t in trades)
    assert all(b["id"] == a["id"] + 1 and b["time"] >= a["time"] for a, b in itertools.pairwise(trades))
    assert trades[-1]["time"] <= simx.exchange.now_ms()
    assert {t["isBuyerMaker"] for t in trades} == {True, False}
    t = trades[-1]
    assert Decimal(t["quoteQty"]) == Decimal(t["price"]) * Decimal(t["qty"])
    assert len((await get_json(http, url, symbol="BTCUSDT", limit=5000))[2]) == 1000
    await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "BTCUSDT", "price": "64000.005", "qty": "0.25"})
    _, _, after = await get_json(http, url, symbol="BTCUSDT", limit=2)
    assert after[-1]["price"] == "64000.01000000" and after[-1]["qty"] == "0.25000000"
    assert after[-1]["isBuyerMaker"] is True  # a down-tick: the seller took
    assert after[-1]["id"] == trades[-1]["id"] + 1
    assert (await get_json(http, url, symbol="BTCUSDT", limit=0))[2]["code"] == -1130


async def test_agg_trades_selections_and_errors(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    url = f"{simx.url}{API}/aggTrades"
    simx.exchange.clock.advance(3600)
    weight, (status, recent) = await weight_of(http, url, symbol="ETHUSDT", limit=10)
    assert status == 200 and weight == 4 and len(recent) == 10 and all(set(a) == AGG_KEYS for a in recent)
    assert all(a["f"] == a["l"] == a["a"] for a in recent)
    _, _, trades = await get_json(http, f"{simx.url}{API}/trades", symbol="ETHUSDT", limit=10)
    assert [(a["a"], a["p"], a["q"], a["T"], a["m"]) for a in recent] == [
        (t["id"], t["price"], t["qty"], t["time"], t["isBuyerMaker"]) for t in trades
    ]
    _, _, from_id = await get_json(http, url, symbol="ETHUSDT", fromId=recent[3]["a"], limit=4)
    assert from_id == recent[3:7]
    now = simx.exchange.now_ms()
    _, _, window = await get_json(http, url, symbol="ETHUSDT", startTime=now - 5000, endTime=now - 2000)
    assert [a["T"] for a in window] == [now - 5000, now - 4000, now - 3000, now - 2000]
    _, _, from_start = await get_json(http, url, symbol="ETHUSDT", startTime=now - 1800_000, limit=3)
    assert [a["T"] for a in from_start] == [now - 1800_000, now - 1799_000, now - 1798_000]
    _, _, to_end = await get_json(http, url, symbol="ETHUSDT", endTime=now - 60_000, limit=2)
    assert [a["T"] for a in to_end] == [now - 61_000, now - 60_000]
    for params, code in (
        ({"startTime": now - 7_200_000, "endTime": now}, -1127),
        ({"startTime": now, "endTime": now - 1}, -1023),
        ({"fromId": recent[0]["a"], "startTime": now - 1000}, -1128),
        ({"limit": "-3"}, -1130),
    ):
        status, _, err = await get_json(http, url, symbol="ETHUSDT", **params)
        assert status == 400 and err["code"] == code, (params, err)


async def test_avg_price_is_the_five_minute_volume_weighted_mean(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    simx.exchange.clock.advance(600)
    weight, (status, avg) = await weight_of(http, f"{simx.url}{API}/avgPrice", symbol="SOLUSDT")
    assert status == 200 and weight == 2 and set(avg) == {"mins", "price", "closeTime"} and avg["mins"] == 5
    _, _, trades = await get_json(http, f"{simx.url}{API}/trades", symbol="SOLUSDT", limit=300)
    value = sum(Decimal(t["price"]) * Decimal(t["qty"]) for t in trades)
    qty = sum(Decimal(t["qty"]) for t in trades)
    assert Decimal(avg["price"]) == (value / qty).quantize(Decimal("1e-8"))
    assert avg["closeTime"] == trades[-1]["time"] == simx.exchange.now_ms()
    assert len(avg["price"].split(".")[1]) == 8


async def test_book_ticker_single_many_and_all(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    url = f"{simx.url}{API}/ticker/bookTicker"
    weight, (_, one) = await weight_of(http, url, symbol="BNBUSDT")
    assert weight == 2 and set(one) == BOOK_TICKER_KEYS and one["symbol"] == "BNBUSDT"
    weight, (_, every) = await weight_of(http, url)
    assert weight == 4 and [r["symbol"] for r in every] == ["BTCUSDT", "ETHUSDT", "SOLUSDT", "BNBUSDT"]
    assert one in every
    _, _, two = await get_json(http, url, symbols='["ETHUSDT","BTCUSDT"]')
    assert [r["symbol"] for r in two] == ["ETHUSDT", "BTCUSDT"]
    for params, code in (
        ({"symbol": "BTCUSDT", "symbols": '["BTCUSDT"]'}, -1128),
        ({"symbols": '["BTCUSDT","BTCUSDT"]'}, -1151),
        ({"symbols": '["NOPEUSDT"]'}, -1121),
        ({"symbols": "BTCUSDT"}, -1100),
    ):
        status, _, err = await get_json(http, url, **params)
        assert status == 400 and err["code"] == code, (params, err)


async def test_ticker_24hr_trade_ids_and_symbols(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """firstId/lastId/count describe the tape's last 24 h; ``symbols`` selects; weights follow the symbol count."""
    weight, (_, t24) = await weight_of(http, f"{simx.url}{API}/ticker/24hr", symbol="BTCUSDT")
    _, _, trades = await get_json(http, f"{simx.url}{API}/trades", symbol="BTCUSDT", limit=1)
    assert weight == 2 and t24["lastId"] == trades[-1]["id"] and t24["lastQty"] == trades[-1]["qty"]
    assert t24["count"] == t24["lastId"] - t24["firstId"] + 1 == 86_401
    weight, (_, many) = await weight_of(http, f"{simx.url}{API}/ticker/24hr", symbols='["SOLUSDT","BTCUSDT"]')
    assert weight == 2 and [r["symbol"] for r in many] == ["SOLUSDT", "BTCUSDT"]
    assert (await weight_of(http, f"{simx.url}{API}/ticker/24hr"))[0] == 80


async def test_klines_agree_with_the_tape(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """A kline counts the tape trades inside it (one a second plus posted ones), all within its low and high."""
    simx.exchange.clock.advance(90)
    await post_json(http, f"{simx.url}/sim/v1/price", {"symbol": "BTCUSDT", "price": "65100"})
    _, _, rows = await get_json(http, f"{simx.url}{API}/klines", symbol="BTCUSDT", interval="1m", limit=2)
    for row in rows:
        end = min(row[6], simx.exchange.now_ms())
        _, _, tape = await get_json(
            http, f"{simx.url}{API}/aggTrades", symbol="BTCUSDT", startTime=row[0], endTime=end, limit=1000
        )
        assert row[8] == len(tape)
        assert all(Decimal(row[3]) <= Decimal(a["p"]) <= Decimal(row[2]) for a in tape)
    assert rows[-1][8] == 31 + 1  # 30 s of the open minute (0…30) plus the posted trade


@pytest.mark.parametrize("interval", ["1m", "15m", "1h"])
async def test_every_trade_lies_within_its_klines_range(simx: RunningSimulator, interval: str) -> None:
    """Up to 1h, a kline's high and low bound every trade of the tape inside it (the path's extremes are sampled)."""
    ex = simx.exchange
    ex.clock.advance(6 * 3600 + 7.5)
    market, tape = ex.markets["ETHUSDT"], ex.tapes["ETHUSDT"]
    for k in market.kline_window(interval, ex.now_ms(), start=None, end=None, limit=6):
        prices = [t.price for t in tape.between(k.open_time, min(k.close_time, ex.now_ms()), 10**6)]
        assert Decimal(f"{k.low:.8f}") <= min(prices) and max(prices) <= Decimal(f"{k.high:.8f}")


async def test_book_and_tape_are_deterministic_for_a_seed() -> None:
    """Same seed → identical depth, trades, aggTrades, avgPrice and bookTicker; another seed differs."""
    answers = []
    for seed in (11, 11, 12):
        async with await start_simulator(seed=seed) as sim, aiohttp.ClientSession() as http:
            sim.exchange.clock.advance(12.5)
            got = []
            for path, params in (
                ("depth", {"symbol": "BTCUSDT"}),
                ("trades", {"symbol": "BTCUSDT", "limit": 50}),
                ("aggTrades", {"symbol": "ETHUSDT", "limit": 50}),
                ("avgPrice", {"symbol": "BNBUSDT"}),
                ("ticker/bookTicker", {}),
            ):
                got.append((await get_json(http, f"{sim.url}{API}/{path}", **params))[2])
            answers.append(got)
    assert answers[0] == answers[1]
    assert all(a != b for a, b in zip(answers[0][:2], answers[2][:2], strict=True))


async def test_python_binance_reads_the_book_and_the_trades(simx: RunningSimulator) -> None:
    """AsyncClient's get_order_book, get_recent_trades, get_aggregate_trades, get_avg_price, get_orderbook_ticker."""
    client = AsyncClient(api_key="k", api_secret="s")
    client.API_URL = f"{simx.url}/api"
    try:
        book = await client.get_order_book(symbol="BTCUSDT", limit=10)
        recent = await client.get_recent_trades(symbol="BTCUSDT", limit=20)
        aggs = await client.get_aggregate_trades(symbol="BTCUSDT", limit=20)
        avg = await client.get_avg_price(symbol="BTCUSDT")
        top = await client.get_orderbook_ticker(symbol="BTCUSDT")
        tops = await client.get_orderbook_tickers()
    finally:
        await client.close_connection()
    assert len(book["bids"]) == len(book["asks"]) == 10
    assert [top["bidPrice"], top["bidQty"]] == book["bids"][0] and [top["askPrice"], top["askQty"]] == book["asks"][0]
    assert len(recent) == len(aggs) == 20 and [t["id"] for t in recent] == [a["a"] for a in aggs]
    assert avg["mins"] == 5 and Decimal(avg["price"]) > 0
    assert top in tops


@pytest.mark.parametrize("side", ["BUY", "SELL"])
async def test_a_resting_fill_is_a_trade_on_the_makers_side(simx: RunningSimulator, side: str) -> None:
    """A resting limit filled by a control-API trade shows on the tape at its limit, the maker's side."""
    ex = simx.exchange
    ex.account.free["BTC"] = Decimal("1")
    last = Decimal(f"{ex.markets['BTCUSDT'].last_price(ex.now_ms()):.8f}")
    limit = last - 100 if side == "BUY" else last + 100
    client = await signed_client(simx)
    try:
        order = await client.create_order(
            symbol="BTCUSDT", side=side, type="LIMIT", timeInForce="GTC", quantity="0.01", price=f"{limit:.2f}"
        )
        assert order["status"] == "NEW"
        ex.clock.advance(1)
        ex.trade("BTCUSDT", float(limit - 50 if side == "BUY" else limit + 50), 0.5)
        newest = await client.get_recent_trades(symbol="BTCUSDT", limit=2)
        resync(client, simx)
        filled = await client.get_order(symbol="BTCUSDT", orderId=order["orderId"])
    finally:
        await client.close_connection()
    assert filled["status"] == "FILLED"
    assert Decimal(newest[-1]["price"]) == limit and newest[-1]["qty"] == "0.01000000"
    assert newest[-1]["isBuyerMaker"] is (side == "BUY")
