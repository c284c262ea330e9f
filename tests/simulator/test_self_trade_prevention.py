"""Self-trade prevention (issue 41): a taker's walk meets the account's own resting orders.

rest-api.md ``selfTradePreventionMode`` and the prevented-match fields of order answers,
enums.md's STP modes, EXPIRED_IN_MATCH and TRADE_PREVENTION, user-data-stream.md's ``v``, ``A``,
``B``, ``u``, ``U``, ``Cs``, ``pl``, ``pL``, ``pY`` and ``GET /api/v3/myPreventedMatches``.  The
matching tests drive the exchange in process; the REST tests go through a signed client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal

import aiohttp
import pytest

from simulator.accounts import OrderError, SimOrder
from simulator.app import start_simulator
from simulator.exchange import SimExchange
from tests.simulator.matching_support import STEP, SYMBOL, TICK, book_total, exchange, place
from tests.simulator.signed import SignedClient

STP_FIELDS = {"v", "A", "B", "u", "U", "Cs", "pl", "pL", "pY"}


def resting_sell_at_third_ask(ex: SimExchange, qty: str = "0.5") -> tuple[SimOrder, list[tuple[Decimal, Decimal]]]:
    """An own SELL LIMIT resting at the third ask's price (behind that level: it is newer than the book)."""
    asks = ex.book(SYMBOL).asks
    maker = place(ex, "SELL", "LIMIT", qty, price=asks[2][0], tif="GTC")
    assert maker.status == "NEW" and ex.account.locked["BTC"] == Decimal(qty)
    return maker, asks


def walk_past_third_ask(ex: SimExchange, asks: list[tuple[Decimal, Decimal]], stp: str | None) -> SimOrder:
    """A MARKET BUY for the first three ask levels and half the fourth."""
    qty = book_total(asks[:3]) + asks[3][1] / 2
    return place(ex, "BUY", qty=qty - qty % STEP, stp=stp)


def test_expire_maker_is_the_default_the_resting_order_expires_and_the_walk_goes_on() -> None:
    ex, reports = exchange()
    maker, asks = resting_sell_at_third_ask(ex)
    taker = walk_past_third_ask(ex, asks, None)
    assert taker.stp_mode == "EXPIRE_MAKER" and taker.status == "FILLED"
    assert [Decimal(f["price"]) for f in taker.fills] == [p for p, _ in asks[:4]]  # the book's levels only
    assert maker.status == "EXPIRED_IN_MATCH" and maker.executed_qty == 0
    assert ex.account.locked["BTC"] == 0  # the expired order's lock went back
    expired = reports.of(maker)[-1]
    assert (expired["x"], expired["X"]) == ("TRADE_PREVENTION", "EXPIRED_IN_MATCH")
    assert {k: expired[k] for k in STP_FIELDS} == {
        "v": 1, "A": "0.50000000", "B": "0.50000000", "u": -1, "U": taker.order_id, "Cs": SYMBOL,
        "pl": "0.50000000", "pL": f"{asks[2][0]:.8f}", "pY": f"{asks[2][0] * Decimal('0.5'):.8f}",
    }  # fmt: skip
    assert not STP_FIELDS & set(reports.of(taker)[-1])  # the taker did not expire: no prevented-match fields
    view = maker.rest_view()
    assert (view["status"], view["preventedMatchId"], view["preventedQuantity"]) == (
        "EXPIRED_IN_MATCH", 1, "0.50000000",
    )  # fmt: skip
    assert ex.account.prevented == [
        {
            "symbol": SYMBOL, "preventedMatchId": 1, "takerOrderId": taker.order_id, "makerSymbol": SYMBOL,
            "makerOrderId": maker.order_id, "tradeGroupId": -1, "selfTradePreventionMode": "EXPIRE_MAKER",
            "price": f"{asks[2][0]:.8f}", "makerPreventedQuantity": "0.50000000", "transactTime": ex.now_ms(),
        }
    ]  # fmt: skip


def test_expire_taker_expires_the_takers_rest_where_it_meets_its_own_order() -> None:
    ex, reports = exchange()
    maker, asks = resting_sell_at_third_ask(ex)
    taker = walk_past_third_ask(ex, asks, "EXPIRE_TAKER")
    assert taker.status == "EXPIRED_IN_MATCH"
    assert [Decimal(f["price"]) for f in taker.fills] == [p for p, _ in asks[:3]]  # the level ahead of it, then stop
    assert reports.kinds(taker)[-1] == "TRADE_PREVENTION"
    expired = reports.of(taker)[-1]
    assert (
        expired["A"] == expired["B"] == f"{taker.orig_qty - taker.executed_qty:.8f}" and expired["U"] == maker.order_id
    )
    assert maker.status == "NEW" and ex.account.locked["BTC"] == Decimal("0.5")  # untouched, still locked
    assert ex.account.prevented[0]["takerPreventedQuantity"] == expired["A"]
    assert "makerPreventedQuantity" not in ex.account.prevented[0]


def test_expire_both_expires_both_orders_in_one_prevented_match() -> None:
    ex, reports = exchange()
    maker, asks = resting_sell_at_third_ask(ex)
    taker = walk_past_third_ask(ex, asks, "EXPIRE_BOTH")
    assert taker.status == maker.status == "EXPIRED_IN_MATCH"
    assert reports.of(taker)[-1]["v"] == reports.of(maker)[-1]["v"] == 1
    assert reports.of(taker)[-1]["U"] == maker.order_id and reports.of(maker)[-1]["U"] == taker.order_id
    assert ex.account.locked["BTC"] == 0
    assert {"takerPreventedQuantity", "makerPreventedQuantity"} <= set(ex.account.prevented[0])


def test_none_trades_with_the_own_order_which_fills_as_maker_in_price_time_priority() -> None:
    ex, reports = exchange()
    maker, asks = resting_sell_at_third_ask(ex)
    book_before = ex.book(SYMBOL).asks
    taker = walk_past_third_ask(ex, asks, "NONE")
    prices = [Decimal(f["price"]) for f in taker.fills]
    # the third level first (older than the own order), then the own order at that price, then the fourth level
    assert prices == [asks[0][0], asks[1][0], asks[2][0], asks[2][0], asks[3][0]]
    assert taker.fills[3]["qty"] == "0.50000000" and not taker.fills[3]["isMaker"]
    assert maker.status == "FILLED" and maker.fills[0]["isMaker"] is True
    assert [r["m"] for r in reports.of(maker) if r["x"] == "TRADE"] == [True]
    assert ex.account.locked["BTC"] == 0 and ex.account.prevented == []
    # the book gave only what the taker did not get from its own order
    lost = book_total(book_before[:4]) - book_total([lvl for lvl in ex.book(SYMBOL).asks if lvl[0] <= asks[3][0]])
    assert lost == taker.executed_qty - Decimal("0.5")


def test_an_own_order_at_a_better_price_than_the_next_level_is_met_first() -> None:
    ex, _ = exchange()
    asks = ex.book(SYMBOL).asks
    k = next(i for i in range(1, 10) if asks[i][0] - asks[i - 1][0] >= 2 * TICK)  # a gap of two ticks or more
    maker = place(ex, "SELL", "LIMIT", "0.3", price=asks[k][0] - TICK, tif="GTC")
    taker = place(ex, "BUY", qty=book_total(asks[:k]) + Decimal("0.3"), stp="NONE")
    assert [Decimal(f["price"]) for f in taker.fills] == [p for p, _ in asks[:k]] + [asks[k][0] - TICK]
    assert maker.status == "FILLED"


def test_a_limit_maker_that_would_meet_an_own_order_is_rejected() -> None:
    ex, _ = exchange()
    for _ in range(60):  # a second whose spread leaves a price inside it (the spread is 1-3 ticks)
        bid, ask = ex.best_bid_ask(SYMBOL)
        if ask - bid >= 2 * TICK:
            break
        ex.advance(1)
    assert ask - bid >= 2 * TICK
    inside = ask - TICK
    place(ex, "SELL", "LIMIT", "0.3", price=inside, tif="GTC")  # rests inside the spread
    assert place(ex, "BUY", "LIMIT_MAKER", "0.3", price=inside - TICK).status == "NEW"  # meets nothing: rests
    with pytest.raises(OrderError) as refused:
        place(ex, "BUY", "LIMIT_MAKER", "0.3", price=inside)  # the book's best ask is above it; the own order is not
    assert (refused.value.code, refused.value.msg) == (-2010, "Order would immediately match and take.")


def test_an_unknown_mode_is_refused_by_the_account() -> None:
    ex, _ = exchange()
    with pytest.raises(OrderError) as refused:
        place(ex, "BUY", qty="0.001", stp="DECREMENT")
    assert refused.value.code == -1130 and ex.account.orders == {}


# --- over REST ------------------------------------------------------------------------------
@pytest.fixture
async def api() -> AsyncIterator[SignedClient]:
    balances = {"USDT": Decimal("100000000"), "BTC": Decimal("10")}
    async with (
        await start_simulator(clock="manual", symbols=["BTCUSDT"], balances=balances) as sim,
        aiohttp.ClientSession() as http,
    ):
        yield SignedClient(sim, http)


@pytest.mark.parametrize("mode", ["DECREMENT", "TRANSFER", "expire_maker", "BOGUS"])
async def test_rest_refuses_a_mode_the_symbol_does_not_allow(api: SignedClient, mode: str) -> None:
    status, _, body = await api.call(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity="0.001",
        selfTradePreventionMode=mode,
    )  # fmt: skip
    assert status == 400
    assert body == {"code": -1130, "msg": "Data sent for parameter 'selfTradePreventionMode' is not valid."}
    assert api.sim.exchange.account.orders == {}


async def test_rest_answers_carry_the_mode_sent_and_the_prevented_match(api: SignedClient) -> None:
    ex = api.sim.exchange
    asks = ex.book("BTCUSDT").asks
    maker = await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="SELL", type="LIMIT", timeInForce="GTC", quantity="0.5",
        price=f"{asks[1][0]}", selfTradePreventionMode="NONE",
    )  # fmt: skip
    assert maker["selfTradePreventionMode"] == "NONE"
    qty = asks[0][1] + asks[1][1] + Decimal("0.1")
    taker = await api.ok(
        "POST", "/api/v3/order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity=f"{qty}",
        selfTradePreventionMode="EXPIRE_TAKER",
    )  # fmt: skip
    assert taker["selfTradePreventionMode"] == "EXPIRE_TAKER"  # the taker's mode decides, not the maker's NONE
    assert taker["status"] == "EXPIRED_IN_MATCH" and taker["preventedMatchId"] == 1
    assert taker["preventedQuantity"] == "0.10000000"  # its rest when it met its own order behind the second level
    got = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", orderId=taker["orderId"])
    assert (got["status"], got["preventedMatchId"], got["preventedQuantity"]) == (
        "EXPIRED_IN_MATCH", 1, taker["preventedQuantity"],
    )  # fmt: skip
    by_order = await api.ok("GET", "/api/v3/myPreventedMatches", symbol="BTCUSDT", orderId=maker["orderId"])
    status, _, by_id = await api.call("GET", "/api/v3/myPreventedMatches", symbol="BTCUSDT", preventedMatchId=1)
    assert status == 200 and by_order == by_id and len(by_id) == 1
    assert by_id[0]["takerOrderId"] == taker["orderId"] and by_id[0]["makerOrderId"] == maker["orderId"]
    assert by_id[0]["selfTradePreventionMode"] == "EXPIRE_TAKER"
    status, _, body = await api.call("GET", "/api/v3/myPreventedMatches", symbol="BTCUSDT")
    assert status == 400 and body["code"] == -1128


async def test_an_order_lists_mode_goes_to_every_leg(api: SignedClient) -> None:
    last = api.sim.exchange.markets["BTCUSDT"].last_price(api.sim.exchange.now_ms())
    oco = await api.ok(
        "POST", "/api/v3/orderList/oco", symbol="BTCUSDT", side="SELL", quantity="0.01", aboveType="LIMIT_MAKER",
        abovePrice=f"{last * 1.05:.2f}", belowType="STOP_LOSS", belowStopPrice=f"{last * 0.95:.2f}",
        selfTradePreventionMode="EXPIRE_BOTH",
    )  # fmt: skip
    assert {r["selfTradePreventionMode"] for r in oco["orderReports"]} == {"EXPIRE_BOTH"}
    for leg in oco["orders"]:
        got = await api.ok("GET", "/api/v3/order", symbol="BTCUSDT", orderId=leg["orderId"])
        assert got["selfTradePreventionMode"] == "EXPIRE_BOTH"
