"""Property: any sequence of orders and trades keeps the simulator's book, balances and reports consistent.

Hypothesis draws MARKET (by quantity or quoteOrderQty) and LIMIT (GTC/IOC/FOK) orders on both
sides with any STP mode, posted trades and clock moves; after every step the book is ordered,
positive and shows ``BOOK_LEVELS`` levels a side, what left the book equals what takers filled
from it (their fills less the self-trades with the account's own resting orders), each asset's
free + locked moved only by fills and fees, locked funds are exactly what the open orders hold,
and every order's executedQty is the sum of its TRADE reports' ``l``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.accounts import OrderError
from simulator.book import BOOK_LEVELS
from tests.simulator.matching_support import STEP, SYMBOL, TICK, Reports, exchange, last, place

SIDES = st.sampled_from(["BUY", "SELL"])
STP = st.sampled_from(["NONE", "EXPIRE_MAKER", "EXPIRE_TAKER", "EXPIRE_BOTH"])
DEEP = 400
"""Levels a side read to account for what takers took (deeper than any drawn walk goes)."""
QTY = st.integers(min_value=1, max_value=3_000_000).map(lambda n: STEP * n)  # up to 30 BTC
market = st.tuples(st.just("market"), SIDES, QTY, STP)
quote = st.tuples(st.just("quote"), SIDES, st.integers(min_value=10, max_value=2_000_000).map(Decimal), STP)
limit = st.tuples(
    st.just("limit"), SIDES, QTY, st.integers(min_value=-40, max_value=40), st.sampled_from(["GTC", "IOC", "FOK"]), STP
)
trade = st.tuples(st.just("trade"), st.integers(min_value=-60, max_value=60), st.sampled_from([0.001, 0.3, 5.0]))
advance = st.tuples(st.just("advance"), st.sampled_from([0.2, 1, 30]))
STEPS = st.lists(st.one_of(market, quote, limit, trade, advance), min_size=1, max_size=25)


def _totals(ex: Any) -> dict[str, Decimal]:
    return {a: ex.account.free[a] + ex.account.locked.get(a, Decimal(0)) for a in ("BTC", "USDT")}


def _check_book(ex: Any) -> None:
    book = ex.book(SYMBOL)
    assert len(book.bids) == len(book.asks) == BOOK_LEVELS  # a side never reads empty
    assert all(q > 0 for _, q in book.bids + book.asks)
    assert all(a[0] > b[0] for a, b in zip(book.bids, book.bids[1:], strict=False))
    assert all(a[0] < b[0] for a, b in zip(book.asks, book.asks[1:], strict=False))
    if book.bids and book.asks:
        assert book.best_bid[0] < book.best_ask[0]


def _lost(before: list[tuple[Decimal, Decimal]], after: list[tuple[Decimal, Decimal]]) -> Decimal:
    """What left the levels of ``before`` (deeper levels coming into view in ``after`` do not count)."""
    now = dict(after)
    return sum((q - now.get(p, Decimal(0)) for p, q in before), Decimal(0))


def _check_locks(ex: Any) -> None:
    want = {"BTC": Decimal(0), "USDT": Decimal(0)}
    for o in ex.account.orders.values():
        if o.status in ("NEW", "PARTIALLY_FILLED"):
            assert o.remaining > 0
            if o.side == "BUY":
                want["USDT"] += o.remaining * o.price
            else:
                want["BTC"] += o.remaining
    assert {a: ex.account.locked.get(a, Decimal(0)) for a in want} == want
    assert all(v >= 0 for v in ex.account.free.values())


def _apply(ex: Any, reports: Reports, step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "market":
        place(ex, step[1], qty=step[2], stp=step[3])
    elif kind == "quote":
        place(ex, step[1], quote=step[2], stp=step[3])
    elif kind == "limit":
        _, side, qty, ticks, tif, stp = step
        place(ex, side, "LIMIT", qty, price=last(ex) + ticks * TICK, tif=tif, stp=stp)
    elif kind == "trade":
        ex.trade(SYMBOL, float(last(ex) + step[1] * TICK), step[2])
    else:
        ex.advance(step[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_any_sequence_keeps_book_balances_and_reports_consistent(steps: list[tuple[Any, ...]]) -> None:
    ex, reports = exchange(usdt="100000000", btc="2000")
    totals = _totals(ex)
    update_id = ex.book(SYMBOL).last_update_id
    for step in steps:
        before = ex.account.books.book(SYMBOL, ex.now_ms(), DEEP)
        seen = len(reports.all)
        try:
            _apply(ex, reports, step)
        except OrderError:
            assert len(reports.all) == seen and _totals(ex) == totals  # a refusal changes nothing
        new = reports.all[seen:]
        after = ex.account.books.book(SYMBOL, ex.now_ms(), DEEP)
        taker = {"BUY": Decimal(0), "SELL": Decimal(0)}
        own_maker = {"BUY": Decimal(0), "SELL": Decimal(0)}
        for r in new:
            if r["x"] != "TRADE":
                continue
            qty, price, fee = Decimal(r["l"]), Decimal(r["L"]), Decimal(r["n"])
            if not r["m"]:
                taker[r["S"]] += qty
            elif step[0] in ("market", "quote", "limit"):
                own_maker[r["S"]] += qty  # an order's maker fill while an order is placed: a self-trade
            if r["S"] == "BUY":
                totals["BTC"] += qty - fee
                totals["USDT"] -= qty * price
            else:
                totals["BTC"] -= qty
                totals["USDT"] += qty * price - fee
        if step[0] in ("market", "quote", "limit"):  # the book's key did not move: it lost what takers took
            assert _lost(before.asks, after.asks) == taker["BUY"] - own_maker["SELL"]
            assert _lost(before.bids, after.bids) == taker["SELL"] - own_maker["BUY"]
            if taker["BUY"] - own_maker["SELL"] or taker["SELL"] - own_maker["BUY"]:
                assert after.last_update_id > before.last_update_id
        assert after.last_update_id >= update_id
        update_id = after.last_update_id
        assert _totals(ex) == totals
        _check_book(ex)
        _check_locks(ex)
    traded = reports.traded_by_order()
    for order in ex.account.orders.values():
        assert order.executed_qty == traded.get(order.order_id, Decimal(0))
        assert order.executed_qty <= order.orig_qty
        assert reports.kinds(order)[0] == "NEW"
        if order.status == "FILLED":
            assert order.executed_qty == order.orig_qty
