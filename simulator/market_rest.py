"""Binance's order-book and trade market-data endpoints, served from book.py and tape.py.

``GET /api/v3/depth``, ``/api/v3/trades``, ``/api/v3/historicalTrades``, ``/api/v3/aggTrades``,
``/api/v3/avgPrice`` and ``/api/v3/ticker/bookTicker``, with the parameters, limits, error codes
and answer shapes of rest-api.md (their request weights are in weights.py).  The 24 h ticker's
bid/ask come from ``book_top`` here so they always agree with the book.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from simulator.exchange import SimExchange
from simulator.rest import EXCHANGE_KEY, ApiError, _int_param, _symbol, json_response, symbols_param

DEPTH_DEFAULT, DEPTH_MAX = 100, 5000
TRADES_DEFAULT, TRADES_MAX = 500, 1000
AGG_WINDOW_MS = 3_600_000
AVG_PRICE_MINS = 5
SYMBOL_STATUSES = ("TRADING", "HALT", "BREAK")


def _limit(request: web.Request, default: int, maximum: int) -> int:
    """``limit``: the default when absent, at most ``maximum`` (Binance answers with its maximum)."""
    limit = _int_param(request, "limit")
    if limit is None:
        return default
    if limit < 1:
        raise ApiError(-1130, "Invalid data sent for a parameter.")
    return min(limit, maximum)


def _check_status(request: web.Request) -> None:
    """``symbolStatus``: every simulated symbol is TRADING."""
    status = request.query.get("symbolStatus")
    if status is None:
        return
    if status not in SYMBOL_STATUSES:
        raise ApiError(-1122, "Invalid symbolStatus.")
    if status != "TRADING":
        raise ApiError(-1220, "The symbol's status does not match the requested symbolStatus.")


def book_top(ex: SimExchange, symbol: str) -> dict[str, str]:
    """bidPrice/bidQty/askPrice/askQty of the book's best levels."""
    book = ex.book(symbol, 1)
    (bid, bid_qty), (ask, ask_qty) = book.best_bid, book.best_ask
    return {
        "bidPrice": f"{bid:.8f}",
        "bidQty": f"{bid_qty:.8f}",
        "askPrice": f"{ask:.8f}",
        "askQty": f"{ask_qty:.8f}",
    }


async def depth(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request) or ""
    limit = _limit(request, DEPTH_DEFAULT, DEPTH_MAX)
    _check_status(request)
    return json_response(ex.book(sym, limit).rest_view(limit))


async def recent_trades(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request) or ""
    limit = _limit(request, TRADES_DEFAULT, TRADES_MAX)
    return json_response([t.rest_row() for t in ex.tapes[sym].recent(ex.now_ms(), limit)])


async def historical_trades(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request) or ""
    limit = _limit(request, TRADES_DEFAULT, TRADES_MAX)
    from_id = _int_param(request, "fromId")
    tape, now = ex.tapes[sym], ex.now_ms()
    rows = tape.recent(now, limit) if from_id is None else tape.from_id(from_id, now, limit)
    return json_response([t.rest_row() for t in rows])


async def agg_trades(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request) or ""
    limit = _limit(request, TRADES_DEFAULT, TRADES_MAX)
    from_id = _int_param(request, "fromId")
    start, end = _int_param(request, "startTime"), _int_param(request, "endTime")
    tape, now = ex.tapes[sym], ex.now_ms()
    if from_id is not None and (start is not None or end is not None):
        raise ApiError(-1128, "Combination of optional parameters invalid.")
    if start is not None and end is not None:
        if start > end:
            raise ApiError(-1023, "Start time is greater than end time.")
        if end - start > AGG_WINDOW_MS:
            raise ApiError(-1127, "More than 1 hours between startTime and endTime.")
    if from_id is not None:
        rows = tape.from_id(from_id, now, limit)
    elif start is not None:
        rows = tape.between(start, min(now, end if end is not None else start + AGG_WINDOW_MS), limit)
    elif end is not None:
        window = tape.between(max(0, end - AGG_WINDOW_MS), min(now, end), AGG_WINDOW_MS)
        rows = window[-limit:]
    else:
        rows = tape.recent(now, limit)
    return json_response([t.agg_row() for t in rows])


async def avg_price(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request) or ""
    price, close_time = ex.tapes[sym].average(ex.now_ms(), AVG_PRICE_MINS)
    return json_response({"mins": AVG_PRICE_MINS, "price": f"{price:.8f}", "closeTime": close_time})


async def book_ticker(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    single = "symbol" in request.query and "symbols" not in request.query
    wanted = symbols_param(ex, request)
    rows: list[dict[str, Any]] = [{"symbol": s, **book_top(ex, s)} for s in (wanted or list(ex.markets))]
    return json_response(rows[0] if single else rows)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v3/depth", depth)
    app.router.add_get("/api/v3/trades", recent_trades)
    app.router.add_get("/api/v3/historicalTrades", historical_trades)
    app.router.add_get("/api/v3/aggTrades", agg_trades)
    app.router.add_get("/api/v3/avgPrice", avg_price)
    app.router.add_get("/api/v3/ticker/bookTicker", book_ticker)
