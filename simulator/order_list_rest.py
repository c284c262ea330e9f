"""Binance's signed order-list endpoints on the simulator's account.

``POST /api/v3/orderList/oco`` (aboveType/belowType…), ``POST /api/v3/orderList/oto``,
``POST /api/v3/orderList/otoco``, ``DELETE /api/v3/orderList``, ``GET /api/v3/orderList``,
``GET /api/v3/openOrderList`` and ``GET /api/v3/allOrderList``: parameters parsed and checked
here, the lists' rules kept by :mod:`simulator.order_lists`, answers in Binance's shapes.
A list counts as 2 (OCO, OTO) or 3 (OTOCO) placements against the order rate limits and its legs
against MAX_NUM_ORDERS, itself against MAX_NUM_ORDER_LISTS (count_filters.py), before it is placed.
"""

from __future__ import annotations

from decimal import Decimal

from aiohttp import web

from brokers import CONDITIONAL_TYPES
from simulator.accounts import OrderError
from simulator.exchange import SimExchange
from simulator.order_list_model import cancelled_list_view
from simulator.order_lists import Leg, SimOrderList, order_report
from simulator.order_rest import _decimal, _params, _symbol, stp_mode
from simulator.rest import ApiError, count_orders, json_response


def _delta(params: dict[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise ApiError(-1100, f"Illegal characters found in parameter '{name}'.")
    return int(raw)


def _side(params: dict[str, str], name: str) -> str:
    side = params.get(name, "").upper()
    if side not in ("BUY", "SELL"):
        raise ApiError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")
    return side


def _type(params: dict[str, str], name: str) -> str:
    otype = params.get(name, "").upper()
    if not otype:
        raise ApiError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")
    return otype


def _leg(ex: SimExchange, params: dict[str, str], prefix: str, side: str, qty: Decimal | None, n: int) -> Leg:
    """One leg from ``<prefix>Type``, ``<prefix>Price``, ``<prefix>StopPrice``… (prefix like ``above``)."""

    def key(name: str) -> str:
        return prefix + name[0].upper() + name[1:]

    tif = params.get(key("timeInForce"))
    return Leg(
        side=side,
        otype=_type(params, key("type")),
        qty=qty,
        price=_decimal(params, key("price")),
        stop=_decimal(params, key("stopPrice")),
        delta=_delta(params, key("trailingDelta")),
        tif=tif.upper() if tif else None,
        client_id=params.get(key("clientOrderId")) or f"sim-{ex.now_ms()}-{len(ex.account.orders) + n}",
        stp=stp_mode(params),  # one selfTradePreventionMode for every order of the list
    )


def _context(ex: SimExchange, symbol: str) -> tuple[Decimal, Decimal, Decimal, int]:
    now = ex.now_ms()
    last = Decimal(f"{ex.markets[symbol].last_price(now):.8f}")
    tick, step = ex.account.steps(dict(ex.start_prices())[symbol])
    return last, tick, step, now


def _answer(lst: SimOrderList, ex: SimExchange, resp_type: str, now: int) -> web.Response:
    body = lst.view()
    if resp_type != "ACK":
        body["orderReports"] = [order_report(ex.account.orders[i], now) for i in lst.order_ids]
    else:
        body["orderReports"] = [
            {
                k: order_report(ex.account.orders[i], now)[k]
                for k in ("symbol", "orderId", "orderListId", "clientOrderId", "transactTime")
            }
            for i in lst.order_ids
        ]
    return json_response(body)


def _check_counts(request: web.Request, ex: SimExchange, symbol: str, legs: list[Leg], algo: list[Leg]) -> None:
    """MAX_NUM_ORDERS for every leg, MAX_NUM_ALGO_ORDERS for ``algo`` legs, MAX_NUM_ORDER_LISTS for the list."""
    refusal = ex.count_filters.check(
        ex.account,
        ex.order_lists,
        symbol,
        orders=len(legs),
        algo=sum(1 for leg in algo if leg.otype in CONDITIONAL_TYPES),
        order_lists=1,
    )
    if refusal is not None:
        raise ApiError(refusal.code, refusal.msg)


def _list_client_id(ex: SimExchange, params: dict[str, str]) -> str:
    return params.get("listClientOrderId") or f"simlist-{ex.now_ms()}-{len(ex.order_lists.lists) + 1}"


async def post_oco(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    count_orders(request, 2)
    symbol = _symbol(ex, params) or ""
    side = _side(params, "side")
    qty = _decimal(params, "quantity")
    if qty is None:
        raise ApiError(-1102, "Mandatory parameter 'quantity' was not sent, was empty/null, or malformed.")
    above = _leg(ex, params, "above", side, qty, 1)
    below = _leg(ex, params, "below", side, qty, 2)
    _check_counts(request, ex, symbol, [above, below], [above, below])
    last, tick, step, now = _context(ex, symbol)
    try:
        lst, _ = ex.order_lists.place_oco(
            symbol, _list_client_id(ex, params), side, above, below, last, tick, step, now
        )
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    return _answer(lst, ex, params.get("newOrderRespType", "RESULT").upper(), now)


async def _post_oto(request: web.Request, *, otoco: bool) -> web.Response:
    ex, params = await _params(request)
    count_orders(request, 3 if otoco else 2)
    symbol = _symbol(ex, params) or ""
    working = _leg(ex, params, "working", _side(params, "workingSide"), _decimal(params, "workingQuantity"), 1)
    if working.qty is None:
        raise ApiError(-1102, "Mandatory parameter 'workingQuantity' was not sent, was empty/null, or malformed.")
    if working.price is None:
        raise ApiError(-1102, "Mandatory parameter 'workingPrice' was not sent, was empty/null, or malformed.")
    pending_side = _side(params, "pendingSide")
    pending_qty = _decimal(params, "pendingQuantity")
    if pending_qty is None:
        raise ApiError(-1102, "Mandatory parameter 'pendingQuantity' was not sent, was empty/null, or malformed.")
    if otoco:
        pending = [
            _leg(ex, params, "pendingAbove", pending_side, pending_qty, 2),
            _leg(ex, params, "pendingBelow", pending_side, pending_qty, 3),
        ]
    else:
        pending = [_leg(ex, params, "pending", pending_side, pending_qty, 2)]
    _check_counts(request, ex, symbol, [working, *pending], [working])
    last, tick, step, now = _context(ex, symbol)
    try:
        lst, _ = ex.order_lists.place_oto(symbol, _list_client_id(ex, params), working, pending, last, tick, step, now)
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    return _answer(lst, ex, params.get("newOrderRespType", "RESULT").upper(), now)


async def post_oto(request: web.Request) -> web.Response:
    return await _post_oto(request, otoco=False)


async def post_otoco(request: web.Request) -> web.Response:
    return await _post_oto(request, otoco=True)


def _list_id(params: dict[str, str]) -> int | None:
    raw = params.get("orderListId", "")
    return int(raw) if raw.lstrip("-").isdigit() else None


async def delete_order_list(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    _symbol(ex, params)
    list_id, client_id = _list_id(params), params.get("listClientOrderId")
    if list_id is None and not client_id:
        raise ApiError(-1102, "Param 'listClientOrderId' or 'orderListId' must be sent, but both were empty/null!")
    lst = ex.order_lists.find(list_id, client_id)
    if lst is None:
        raise ApiError(-2011, "Unknown order sent.")
    now = ex.now_ms()
    try:
        legs = ex.order_lists.cancel(lst, now)
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    return json_response(cancelled_list_view(lst, legs, now))


async def get_order_list(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    list_id, client_id = _list_id(params), params.get("origClientOrderId")
    if list_id is None and not client_id:
        raise ApiError(-1102, "Param 'origClientOrderId' or 'orderListId' must be sent, but both were empty/null!")
    lst = ex.order_lists.find(list_id, client_id)
    if lst is None:
        raise ApiError(-2013, "Order list does not exist.")
    return json_response(lst.view())


async def open_order_lists(request: web.Request) -> web.Response:
    ex, _ = await _params(request)
    return json_response([lst.view() for lst in ex.order_lists.lists.values() if not lst.done])


async def all_order_lists(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    from_id = int(params["fromId"]) if params.get("fromId", "").isdigit() else None
    limit = min(1000, int(params["limit"])) if params.get("limit", "").isdigit() else 500
    rows = [lst for lst in ex.order_lists.lists.values() if from_id is None or lst.list_id >= from_id]
    chosen = rows[:limit] if from_id is not None else rows[-limit:]
    return json_response([lst.view() for lst in reversed(chosen)])


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v3/orderList/oco", post_oco)
    app.router.add_post("/api/v3/orderList/oto", post_oto)
    app.router.add_post("/api/v3/orderList/otoco", post_otoco)
    app.router.add_delete("/api/v3/orderList", delete_order_list)
    app.router.add_get("/api/v3/orderList", get_order_list)
    app.router.add_get("/api/v3/openOrderList", open_order_lists)
    app.router.add_get("/api/v3/allOrderList", all_order_lists)
