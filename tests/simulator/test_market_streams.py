"""The public market streams besides klines: what they push agrees with the REST answers at the same moment."""

from __future__ import annotations

import asyncio
import itertools
from decimal import Decimal
from typing import Any

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.app import RunningSimulator, start_simulator
from tests.simulator.conftest import get_json
from tests.simulator.matching_support import TICK, last, place
from tests.simulator.signed import SignedClient

_ids = itertools.count(1_000)
RICH = {"USDT": Decimal("1000000000"), "BTC": Decimal("10000")}


async def drain(ws: aiohttp.ClientWebSocketResponse) -> list[Any]:
    """Every frame queued so far: the answer to a LIST_SUBSCRIPTIONS sent now comes after them (one FIFO)."""
    req = next(_ids)
    await ws.send_json({"method": "LIST_SUBSCRIPTIONS", "id": req})
    frames: list[Any] = []
    while True:
        msg = await ws.receive(timeout=5)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        data = msg.json()
        if isinstance(data, dict) and data.get("id") == req and "result" in data:
            return frames
        frames.append(data)


def by_stream(frames: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for f in frames:
        out.setdefault(f["stream"], []).append(f["data"])
    return out


def rebuild(snapshot: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, dict[Decimal, Decimal]]:
    """web-socket-streams.md's local order book procedure, asserting its id rules on the way."""
    last = snapshot["lastUpdateId"]
    book = {side: {Decimal(p): Decimal(q) for p, q in snapshot[side]} for side in ("bids", "asks")}
    prev_u = None
    for e in events:
        if e["u"] <= last:
            continue  # older than the snapshot
        if prev_u is None:
            assert e["U"] <= last + 1 <= e["u"], (last, e["U"], e["u"])
        else:
            assert e["U"] == prev_u + 1, (prev_u, e["U"])
        for side, key in (("bids", "b"), ("asks", "a")):
            for p, q in e[key]:
                if Decimal(q) == 0:
                    book[side].pop(Decimal(p), None)
                else:
                    book[side][Decimal(p)] = Decimal(q)
        prev_u = e["u"]
    return book


def as_book(depth: dict[str, Any]) -> dict[str, dict[Decimal, Decimal]]:
    return {side: {Decimal(p): Decimal(q) for p, q in depth[side]} for side in ("bids", "asks")}


Op = tuple[Any, ...]
SIDES = st.sampled_from(["BUY", "SELL"])
ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("trade"), st.floats(min_value=-0.004, max_value=0.004)),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.05, 0.4, 1.0, 3.0, 60.0])),
        st.tuples(st.just("market"), SIDES, st.sampled_from(["0.001", "0.5", "8", "40"])),
        st.tuples(st.just("limit"), SIDES, st.integers(-30, 30), st.sampled_from(["0.01", "6", "25"])),
    ),
    min_size=1,
    max_size=10,
)


def apply_op(ex: Any, op: Op) -> None:
    """A posted trade, a clock move, or an order placed as order_rest.py places it (no clock move after it)."""
    if op[0] == "trade":
        ex.trade("BTCUSDT", ex.markets["BTCUSDT"].last_price(ex.now_ms()) * (1 + op[1]), 0.01)
    elif op[0] == "advance":
        ex.advance(op[1])
    else:
        side, price, tif = op[1], None, None
        if op[0] == "limit":
            price, tif = last(ex) + op[2] * TICK, "GTC"  # either side of the book: it takes, rests or both
        place(ex, side, "LIMIT" if price is not None else "MARKET", op[-1], price=price, tif=tif)


async def rebuild_scenario(ops: list[Op], snapshot_at: int, stream: str) -> None:
    async with (
        await start_simulator(clock="manual", seed=11, symbols=["BTCUSDT"], balances=RICH) as sim,
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{sim.ws_url}/ws/{stream}") as ws,
    ):
        ex = sim.exchange
        depth_url = f"{sim.url}/api/v3/depth"
        buffered: list[Any] = []
        snapshot: dict[str, Any] | None = None
        for i in range(len(ops) + 1):
            if i == min(snapshot_at, len(ops)):
                buffered += await drain(ws)
                _, _, snapshot = await get_json(http, depth_url, symbol="BTCUSDT", limit=5000)
            if i < len(ops):
                apply_op(ex, ops[i])
        buffered += await drain(ws)
        assert snapshot is not None
        assert all(e["e"] == "depthUpdate" and e["s"] == "BTCUSDT" for e in buffered)
        _, _, final = await get_json(http, depth_url, symbol="BTCUSDT", limit=5000)
        _, _, default = await get_json(http, depth_url, symbol="BTCUSDT")
    assert rebuild(snapshot, buffered) == as_book(final)
    assert as_book(default) == as_book(final)  # the whole simulated book is within the default limit


@settings(max_examples=40, deadline=None)
@given(
    ops=ops_strategy, snapshot_at=st.integers(0, 10), stream=st.sampled_from(["btcusdt@depth", "btcusdt@depth@100ms"])
)
def test_a_client_following_binances_procedure_rebuilds_exactly_the_rest_book(
    ops: list[Op], snapshot_at: int, stream: str
) -> None:
    """Whatever trades, orders (market and limit, both sides) and clock moves happen, and whenever the snapshot is
    taken (between two orders at one instant too), diff events rebuild GET depth."""
    asyncio.run(rebuild_scenario(ops, snapshot_at, stream))


async def test_an_order_pushes_its_trades_depth_and_book_ticker_before_its_answer(http: aiohttp.ClientSession) -> None:
    """No clock move, no timer: the frames of a REST MARKET order's fills are queued by the time it is answered."""
    streams = "btcusdt@trade/btcusdt@depth/btcusdt@bookTicker"
    async with (
        await start_simulator(clock="manual", symbols=["BTCUSDT"], balances=RICH) as sim,
        http.ws_connect(f"{sim.ws_url}/stream?streams={streams}") as ws,
    ):
        ex = sim.exchange
        asks = ex.book("BTCUSDT").asks
        order = await SignedClient(sim, http).ok(
            "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity=f"{asks[0][1]}"
        )
        got = by_stream(await drain(ws))
        top_id = ex.book("BTCUSDT", 5000).last_update_id
    assert [(t["p"], t["q"]) for t in got["btcusdt@trade"]] == [(f["price"], f["qty"]) for f in order["fills"]]
    (diff,) = got["btcusdt@depth"]
    assert [f"{asks[0][0]:.8f}", "0.00000000"] in diff["a"] and diff["u"] == top_id
    assert got["btcusdt@bookTicker"][-1]["a"] == f"{asks[1][0]:.8f}"


async def test_diff_depth_sends_nothing_when_the_book_did_not_change(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """A zero-second advance changes nothing: no depthUpdate; a trade does: one, starting right after the baseline."""
    ex = simx.exchange
    async with http.ws_connect(f"{simx.ws_url}/ws/ethusdt@depth") as ws:
        baseline = ex.book("ETHUSDT", 5000).last_update_id
        ex.advance(0)
        assert await drain(ws) == []
        ex.trade("ETHUSDT", 3333.0, 0.5)
        (event,) = await drain(ws)
    assert event["U"] == baseline + 1 and event["u"] == ex.book("ETHUSDT", 5000).last_update_id
    assert event["b"] or event["a"]


async def test_trade_streams_push_every_tape_trade_once_in_id_order(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """Synthetic and posted trades arrive once each, consecutive ids, equal to REST's rows of the same trades."""
    ex = simx.exchange
    async with http.ws_connect(f"{simx.ws_url}/stream?streams=solusdt@trade/solusdt@aggTrade") as ws:
        first = ex.tapes["SOLUSDT"].last_trade(ex.now_ms()).id + 1
        for i in range(5):
            ex.trade("SOLUSDT", 150.0 + i, 0.3)
            ex.advance(2.5)
        ex.trade("SOLUSDT", 149.0, 0.1)
        got = by_stream(await drain(ws))
    trades, aggs = got["solusdt@trade"], got["solusdt@aggTrade"]
    ids = [t["t"] for t in trades]
    assert ids == list(range(first, first + len(ids))) and len(ids) >= 5 + 12
    assert [a["a"] for a in aggs] == ids
    _, _, rows = await get_json(http, f"{simx.url}/api/v3/historicalTrades", symbol="SOLUSDT", fromId=first)
    assert [(r["id"], r["price"], r["qty"], r["time"], r["isBuyerMaker"]) for r in rows] == [
        (t["t"], t["p"], t["q"], t["T"], t["m"]) for t in trades
    ]
    assert all(t["E"] == ex.now_ms() or t["E"] >= t["T"] for t in trades)


async def test_book_ticker_and_partial_depth_match_rest_after_each_change(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """The last bookTicker and depth5 frames are what REST bookTicker and depth?limit=5 answer now."""
    ex = simx.exchange
    streams = "btcusdt@bookTicker/btcusdt@depth5/btcusdt@depth10@100ms"
    async with http.ws_connect(f"{simx.ws_url}/stream?streams={streams}") as ws:
        for price in (65010.0, 64990.0):
            ex.trade("BTCUSDT", price, 0.02)
            ex.advance(1)
            got = by_stream(await drain(ws))
            _, _, top = await get_json(http, f"{simx.url}/api/v3/ticker/bookTicker", symbol="BTCUSDT")
            _, _, depth5 = await get_json(http, f"{simx.url}/api/v3/depth", symbol="BTCUSDT", limit=5)
            _, _, depth10 = await get_json(http, f"{simx.url}/api/v3/depth", symbol="BTCUSDT", limit=10)
            bt = got["btcusdt@bookTicker"][-1]
            assert (bt["b"], bt["B"], bt["a"], bt["A"]) == (
                top["bidPrice"],
                top["bidQty"],
                top["askPrice"],
                top["askQty"],
            )
            assert bt["u"] == depth5["lastUpdateId"] and bt["s"] == "BTCUSDT"
            assert got["btcusdt@depth5"][-1] == depth5
            assert got["btcusdt@depth10@100ms"][-1] == depth10


async def test_tickers_carry_the_rest_statistics_of_the_same_moment(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """@ticker is GET ticker/24hr, @ticker_1h is GET ticker?windowSize=1h, @avgPrice is GET avgPrice."""
    ex = simx.exchange
    streams = "bnbusdt@ticker/bnbusdt@miniTicker/bnbusdt@ticker_1h/bnbusdt@avgPrice"
    async with http.ws_connect(f"{simx.ws_url}/stream?streams={streams}") as ws:
        ex.advance(90)
        ex.trade("BNBUSDT", 612.0, 3)
        got = by_stream(await drain(ws))
    _, _, day = await get_json(http, f"{simx.url}/api/v3/ticker/24hr", symbol="BNBUSDT")
    _, _, hour = await get_json(http, f"{simx.url}/api/v3/ticker", symbol="BNBUSDT", windowSize="1h")
    _, _, avg = await get_json(http, f"{simx.url}/api/v3/avgPrice", symbol="BNBUSDT")
    t, m, w, a = (got[f"bnbusdt@{k}"][-1] for k in ("ticker", "miniTicker", "ticker_1h", "avgPrice"))
    pairs = {"p": "priceChange", "P": "priceChangePercent", "w": "weightedAvgPrice", "x": "prevClosePrice"}
    pairs |= {"c": "lastPrice", "Q": "lastQty", "b": "bidPrice", "B": "bidQty", "a": "askPrice", "A": "askQty"}
    pairs |= {"o": "openPrice", "h": "highPrice", "l": "lowPrice", "v": "volume", "q": "quoteVolume"}
    pairs |= {"O": "openTime", "C": "closeTime", "F": "firstId", "L": "lastId", "n": "count"}
    assert {k: t[k] for k in pairs} == {k: day[v] for k, v in pairs.items()}
    assert t["E"] == ex.now_ms() and t["c"] == "612.00000000"
    assert {k: m[k] for k in "cohlvq"} == {k: t[k] for k in "cohlvq"}
    window = {k: v for k, v in pairs.items() if k not in ("x", "Q", "b", "B", "a", "A")}
    assert {k: w[k] for k in window} == {k: hour[v] for k, v in window.items()}
    assert w["e"] == "1hTicker" and w["O"] % 60_000 == 0
    assert (a["w"], a["T"], a["i"]) == (avg["price"], avg["closeTime"], "5m")


async def test_all_market_tickers_hold_only_the_markets_that_changed(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """After a trade in one market, !miniTicker@arr and !ticker_4h@arr carry that market alone."""
    ex = simx.exchange
    async with http.ws_connect(f"{simx.ws_url}/stream?streams=!miniTicker@arr/!ticker_4h@arr") as ws:
        ex.advance(5)
        first = by_stream(await drain(ws))
        ex.trade("ETHUSDT", 3210.0, 1)
        second = by_stream(await drain(ws))
    assert {t["s"] for t in first["!miniTicker@arr"][-1]} == set(ex.markets)
    assert [[t["s"] for t in arr] for arr in second["!miniTicker@arr"]] == [["ETHUSDT"]]
    assert [[t["s"] for t in arr] for arr in second["!ticker_4h@arr"]] == [["ETHUSDT"]]


async def test_stream_names_are_validated_as_binance_does(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """Upper-case symbols, unknown symbols, unknown kinds and undocumented names: 400 at the handshake, error 2 live."""
    for bad in ("BTCUSDT@trade", "dogeusdt@trade", "btcusdt@depth7", "btcusdt@ticker_2h", "!ticker@arr", "!bookTicker"):
        async with http.get(f"{simx.url}/ws/{bad}") as r:
            assert r.status == 400, bad
            assert await r.json() == {"code": -1121, "msg": f"Invalid stream: {bad}"}
    async with http.ws_connect(f"{simx.ws_url}/ws") as ws:
        await ws.send_json({"method": "SUBSCRIBE", "params": ["btcusdt@depth@100ms", "btcusdt@Trade"], "id": 7})
        answer = (await ws.receive(timeout=5)).json()
        assert answer["id"] == 7 and answer["error"]["code"] == 2
        await ws.send_json({"method": "SUBSCRIBE", "params": ["btcusdt@depth20@100ms", "!ticker_1d@arr"], "id": 8})
        assert (await ws.receive(timeout=5)).json() == {"result": None, "id": 8}
        await ws.send_json({"method": "UNSUBSCRIBE", "params": ["!ticker_1d@arr"], "id": 9})
        assert (await ws.receive(timeout=5)).json() == {"result": None, "id": 9}
        simx.exchange.advance(1)
        frames = await drain(ws)
    assert frames and all("lastUpdateId" in f for f in frames)  # nothing of the unsubscribed stream


async def test_with_the_real_clock_streams_are_pushed_by_the_timer() -> None:
    """No trade is posted: the 100 ms depth, the trade tape and the 1 s ticker still arrive."""
    wanted = {"btcusdt@depth@100ms", "btcusdt@trade", "btcusdt@ticker", "btcusdt@depth5@100ms"}
    async with (
        await start_simulator(clock="real", symbols=["BTCUSDT"]) as sim,
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{sim.ws_url}/stream?streams={'/'.join(sorted(wanted))}") as ws,
    ):
        seen: set[str] = set()
        async with asyncio.timeout(5):
            while seen != wanted:
                seen.add((await ws.receive_json())["stream"])
