"""The simulator matches from its book (issue 41): walks, partial fills, time in force, reports.

Each test names the point of Binance's spot semantics it checks (market_orders_faq.md,
rest-api.md, user-data-stream.md); the exchange runs in process with a manual clock.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from simulator.accounts import OrderError, SimOrder
from simulator.book import BOOK_LEVELS
from simulator.exchange import SimExchange
from simulator.order_lists import Leg, SimOrderList
from tests.simulator.matching_support import STEP, SYMBOL, TICK, book_total, exchange, last, place

# user-data-stream.md's executionReport payload (``v`` and the other STP fields only on STP expiry)
REPORT_FIELDS = set("e E s c S o f q p P F g C x X r i l z L n N T t I w m M O Z Y Q W V".split())


# --- 1. a book with state ----------------------------------------------------------------
def test_a_fill_takes_its_quantity_out_of_the_book_until_the_next_second() -> None:
    ex, _ = exchange()
    before = ex.book(SYMBOL)
    top_price, top_qty = before.best_ask
    order = place(ex, "BUY", qty=top_qty / 2 - (top_qty / 2) % STEP)
    after = ex.book(SYMBOL)
    assert after.best_ask == (top_price, top_qty - order.executed_qty)
    assert after.bids == before.bids and after.asks[1:] == before.asks[1:]
    assert after.last_update_id > before.last_update_id
    assert ex.book(SYMBOL).last_update_id == after.last_update_id  # no change, same id
    ex.advance(1)
    fresh = ex.book(SYMBOL)
    assert fresh.last_update_id > after.last_update_id
    assert book_total(fresh.asks) > book_total(after.asks) - top_qty  # makers refilled a derived book


def test_depth_limit_and_the_best_bid_ask_read_the_same_state() -> None:
    ex, _ = exchange()
    assert len(ex.book(SYMBOL, 5).asks) == 5 and len(ex.book(SYMBOL, 500).asks) == BOOK_LEVELS
    before = ex.book(SYMBOL).bids
    place(ex, "SELL", qty=book_total(before[:2]))  # the two best bids, exactly
    bid, ask = ex.best_bid_ask(SYMBOL)
    assert (bid, ask) == (ex.book(SYMBOL).best_bid[0], ex.book(SYMBOL).best_ask[0]) and bid < ask
    after = ex.book(SYMBOL).bids
    assert len(after) == BOOK_LEVELS and after[: BOOK_LEVELS - 2] == before[2:]  # deeper levels came into view
    assert after[-1][0] < before[-1][0]


def test_a_side_taken_past_its_visible_levels_still_shows_them_all() -> None:
    """Binance never shows an empty side: takers bring deeper levels of the derived book into view."""
    ex, _ = exchange()
    bids = ex.book(SYMBOL).bids
    left = book_total(bids)  # every visible level, in orders MARKET_LOT_SIZE allows
    while left > 0:
        left -= place(ex, "SELL", qty=min(left, Decimal(100))).executed_qty
    book = ex.book(SYMBOL)
    assert len(book.bids) == BOOK_LEVELS and book.best_bid[0] < bids[-1][0] and book.best_bid[1] > 0
    assert ex.best_bid_ask(SYMBOL)[0] == book.best_bid[0] > 0


# --- 2. MARKET orders walk the levels ---------------------------------------------------
def test_a_market_buy_walks_the_asks_one_fill_per_level() -> None:
    ex, reports = exchange()
    asks = ex.book(SYMBOL).asks
    qty = asks[0][1] + asks[1][1] + asks[2][1] / 2
    qty -= qty % STEP
    order = place(ex, "BUY", qty=qty)
    assert order.status == "FILLED" and order.executed_qty == qty
    expected = [asks[0], asks[1], (asks[2][0], qty - asks[0][1] - asks[1][1])]
    assert [(Decimal(f["price"]), Decimal(f["qty"])) for f in order.fills] == expected
    assert order.cumulative_quote == sum(p * q for p, q in expected)
    assert reports.kinds(order) == ["NEW", "TRADE", "TRADE", "TRADE"]
    assert [r["X"] for r in reports.of(order)] == ["NEW", "PARTIALLY_FILLED", "PARTIALLY_FILLED", "FILLED"]
    assert last(ex) == asks[2][0]  # the last price moved to the last level traded
    assert ex.book(SYMBOL).best_ask == (asks[2][0], asks[2][1] - expected[2][1])


def test_a_quote_order_spends_its_quote_level_by_level() -> None:
    ex, reports = exchange()
    asks = ex.book(SYMBOL).asks
    quote = (asks[0][0] * asks[0][1] + asks[1][0] * asks[1][1] / 3).quantize(Decimal("0.01"))
    order = place(ex, "BUY", quote=quote)
    assert order.status == "FILLED" and order.orig_qty == order.executed_qty
    assert [Decimal(f["price"]) for f in order.fills] == [asks[0][0], asks[1][0]]
    assert all(Decimal(f["qty"]) % STEP == 0 for f in order.fills)
    assert order.cumulative_quote <= quote < order.cumulative_quote + asks[1][0] * STEP  # floored to the step
    assert order.rest_view()["origQuoteOrderQty"] == f"{quote:.8f}"
    assert {r["Q"] for r in reports.of(order)} == {f"{quote:.8f}"}
    plain = place(ex, "BUY", qty="0.001")
    assert plain.rest_view()["origQuoteOrderQty"] == "0.00000000"


def test_a_market_order_past_the_walk_depth_fills_what_it_reached_and_expires() -> None:
    """book.py's maximum depth (MAX_WALK_LEVELS levels, narrowed here to 3): the rest beyond it expires."""
    ex, reports = exchange()
    ex.account.books.max_walk_levels = 3
    bids = ex.book(SYMBOL).bids
    reached = book_total(bids[:3])
    order = place(ex, "SELL", qty=reached + bids[3][1])
    assert order.status == "EXPIRED" and order.executed_qty == reached
    assert [Decimal(f["price"]) for f in order.fills] == [p for p, _ in bids[:3]]
    assert order.rest_view()["expiryReason"] == "INSUFFICIENT_LIQUIDITY"
    assert reports.kinds(order) == ["NEW", "TRADE", "TRADE", "TRADE", "EXPIRED"]
    expired = reports.of(order)[-1]
    assert (expired["X"], expired["eR"], expired["l"], expired["z"]) == (
        "EXPIRED", "INSUFFICIENT_LIQUIDITY", "0.00000000", f"{reached:.8f}",
    )  # fmt: skip
    assert ex.book(SYMBOL).bids[:3] == bids[3:6]  # the next levels: the side is not empty
    nxt = place(ex, "SELL", qty=bids[3][1])  # a new walk starts from the book as it is now
    assert nxt.status == "FILLED" and nxt.fills[0]["price"] == f"{bids[3][0]:.8f}"


def test_a_market_buy_is_refused_when_its_walk_costs_more_than_the_free_quote() -> None:
    ex, _ = exchange(usdt="1000")
    ask = ex.book(SYMBOL).best_ask[0]
    with pytest.raises(OrderError) as refused:
        place(ex, "BUY", qty=(Decimal(1000) / ask).quantize(STEP) + STEP)
    assert refused.value.code == -2010
    assert ex.account.free["USDT"] == 1000 and ex.account.orders == {}


# --- 3. LIMIT orders fill partially --------------------------------------------------------
def test_a_marketable_gtc_limit_walks_to_its_price_and_rests_the_rest() -> None:
    ex, reports = exchange()
    asks = ex.book(SYMBOL).asks
    qty = asks[0][1] + asks[1][1] + Decimal(1)
    order = place(ex, "BUY", "LIMIT", qty, price=asks[1][0], tif="GTC")
    assert order.status == "PARTIALLY_FILLED" and order.executed_qty == asks[0][1] + asks[1][1]
    assert reports.kinds(order) == ["NEW", "TRADE", "TRADE"]
    assert ex.account.locked["USDT"] == Decimal(1) * asks[1][0]  # the rest, at its price
    assert ex.book(SYMBOL).best_ask == asks[2]
    view = order.rest_view()
    assert view["status"] == "PARTIALLY_FILLED" and view["isWorking"] is True


def test_an_ioc_limit_takes_what_it_can_and_expires_the_rest() -> None:
    ex, reports = exchange()
    bids = ex.book(SYMBOL).bids
    order = place(ex, "SELL", "LIMIT", bids[0][1] + 1, price=bids[0][0], tif="IOC")
    assert order.status == "EXPIRED" and order.executed_qty == bids[0][1]
    assert reports.kinds(order) == ["NEW", "TRADE", "EXPIRED"]
    assert reports.of(order)[-1]["eR"] == "UNFILLED_IOC_QUANTITY_EXPIRED"
    assert ex.account.locked["BTC"] == 0


def test_a_fok_limit_fills_whole_or_expires_untouched() -> None:
    ex, reports = exchange()
    asks = ex.book(SYMBOL).asks
    before = ex.book(SYMBOL)
    refused = place(ex, "BUY", "LIMIT", asks[0][1] + asks[1][1] + STEP, price=asks[1][0], tif="FOK")
    assert refused.status == "EXPIRED" and refused.executed_qty == 0
    assert reports.kinds(refused) == ["NEW", "EXPIRED"]
    assert reports.of(refused)[-1]["eR"] == "UNFILLED_FOK_ORDER_EXPIRED"
    assert ex.book(SYMBOL) == before
    filled = place(ex, "BUY", "LIMIT", asks[0][1] + asks[1][1], price=asks[1][0], tif="FOK")
    assert filled.status == "FILLED" and reports.kinds(filled) == ["NEW", "TRADE", "TRADE"]


def test_a_resting_limit_fills_whole_when_a_trade_goes_through_it() -> None:
    ex, reports = exchange()
    price = last(ex) - 50
    order = place(ex, "BUY", "LIMIT", "0.5", price=price, tif="GTC")
    assert order.status == "NEW" and reports.kinds(order) == ["NEW"]
    ex.trade(SYMBOL, float(price - TICK), 0.001)  # strictly beyond: the book ahead of it was taken
    assert order.status == "FILLED" and order.executed_qty == Decimal("0.5")
    trade = reports.of(order)[-1]
    assert (trade["L"], trade["m"]) == (f"{price:.8f}", True) and ex.account.locked["USDT"] == 0


def test_a_trade_exactly_at_the_limit_fills_only_the_traded_quantity() -> None:
    ex, reports = exchange()
    price = last(ex) + 40
    order = place(ex, "SELL", "LIMIT", "0.5", price=price, tif="GTC")
    assert ex.account.locked["BTC"] == Decimal("0.5")
    ex.trade(SYMBOL, float(price), 0.2)
    assert order.status == "PARTIALLY_FILLED" and order.executed_qty == Decimal("0.2")
    part = reports.of(order)[-1]
    assert (part["x"], part["X"], part["l"], part["z"], part["L"]) == (
        "TRADE", "PARTIALLY_FILLED", "0.20000000", "0.20000000", f"{price:.8f}",
    )  # fmt: skip
    assert part["t"] > 0 and part["N"] == "USDT" and Decimal(part["n"]) == Decimal("0.2") * price * Decimal("0.001")
    assert part["Z"] == f"{Decimal('0.2') * price:.8f}"
    assert ex.account.locked["BTC"] == Decimal("0.3")
    ex.trade(SYMBOL, float(price), 1.0)
    assert order.status == "FILLED" and order.executed_qty == Decimal("0.5")
    assert ex.account.locked["BTC"] == 0


def test_two_orders_at_one_price_share_the_traded_quantity_oldest_first() -> None:
    ex, _ = exchange()
    price = last(ex) - 30
    first = place(ex, "BUY", "LIMIT", "0.3", price=price, tif="GTC")
    second = place(ex, "BUY", "LIMIT", "0.3", price=price, tif="GTC")
    ex.trade(SYMBOL, float(price), 0.4)
    assert (first.status, first.executed_qty) == ("FILLED", Decimal("0.3"))
    assert (second.status, second.executed_qty) == ("PARTIALLY_FILLED", Decimal("0.1"))


# --- 4. IOC/FOK inside OTO / OTOCO ------------------------------------------------------------
def _oto(ex: SimExchange, tif: str, price: Decimal, qty: str = "0.1") -> tuple[SimOrderList, list[SimOrder]]:
    working = Leg("BUY", "LIMIT", Decimal(qty), price, None, None, tif, "w")
    pending = [Leg("SELL", "LIMIT_MAKER", Decimal(qty), price + 500, None, None, None, "p")]
    return ex.order_lists.place_oto(SYMBOL, "oto", working, pending, last(ex), TICK, STEP, ex.now_ms())


def test_an_ioc_working_order_that_cannot_fill_expires_the_list() -> None:
    for tif in ("IOC", "FOK"):
        ex, reports = exchange()
        lst, (work, leg) = _oto(ex, tif, last(ex) - 100)
        assert work.status == "EXPIRED" and work.executed_qty == 0 and work.expiry_reason
        assert leg.status == "EXPIRED" and leg.expiry_reason == "OTO_PHASE_ONE_EXPIRED"
        assert lst.done and reports.lists[-1]["l"] == "ALL_DONE"
        assert ex.account.locked["USDT"] == 0 and ex.account.free["USDT"] == Decimal("1000000000")


def test_a_marketable_ioc_working_order_fills_and_puts_its_pending_leg_to_work() -> None:
    ex, _ = exchange()
    ask = ex.book(SYMBOL).best_ask[0]
    lst, (work, leg) = _oto(ex, "IOC", ask, qty="0.1")
    assert work.status == "FILLED" and leg.status == "NEW" and leg.working_time != -1
    assert not lst.done and ex.account.locked["BTC"] == Decimal("0.1")


def test_a_partly_filled_ioc_working_order_expires_its_pending_leg() -> None:
    ex, _ = exchange()
    ask, qty = ex.book(SYMBOL).best_ask
    lst, (work, leg) = _oto(ex, "IOC", ask, qty=str(qty + 1))
    assert work.status == "EXPIRED" and work.executed_qty == qty
    assert leg.status == "EXPIRED" and lst.done


# --- 5. reports in Binance's order, with Binance's fields -----------------------------------
def test_every_report_has_the_documented_fields_and_a_rising_execution_id() -> None:
    ex, reports = exchange()
    asks = ex.book(SYMBOL).asks
    place(ex, "BUY", qty=asks[0][1] + asks[1][1])
    place(ex, "SELL", "LIMIT", "0.1", price=last(ex) + 100, tif="GTC")
    place(ex, "BUY", "LIMIT", "0.1", price=last(ex) - 100, tif="IOC")
    for r in reports.all:
        missing = REPORT_FIELDS - set(r)
        assert not missing, (r["x"], missing)
        assert r["M"] is (r["x"] == "TRADE")
    ids = [r["I"] for r in reports.all]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


# --- 6. OCO: a partial fill of a leg expires the other ------------------------------------------
def test_a_partial_fill_of_an_oco_leg_expires_the_other_leg() -> None:
    ex, reports = exchange()
    p = last(ex)
    tp = Leg("SELL", "LIMIT_MAKER", Decimal("1"), p + 200, None, None, None, "tp")
    sl = Leg("SELL", "STOP_LOSS_LIMIT", Decimal("1"), p - 210, p - 200, None, "GTC", "sl")
    lst, (tp_order, sl_order) = ex.order_lists.place_oco(SYMBOL, "oco", "SELL", tp, sl, p, TICK, STEP, ex.now_ms())
    ex.trade(SYMBOL, float(p + 200), 0.25)
    assert (tp_order.status, tp_order.executed_qty) == ("PARTIALLY_FILLED", Decimal("0.25"))
    assert sl_order.status == "EXPIRED" and sl_order.expiry_reason == "OCO_TRIGGER"
    assert reports.kinds(sl_order)[-1] == "EXPIRED" and reports.of(sl_order)[-1]["eR"] == "OCO_TRIGGER"
    assert ex.account.locked["BTC"] == Decimal("0.75")  # only the rest of the take-profit leg
    ex.trade(SYMBOL, float(p + 201), 0.01)
    assert tp_order.status == "FILLED" and lst.done and ex.account.locked["BTC"] == 0
