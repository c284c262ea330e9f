"""Binance's signed account and order endpoints on the simulator's one account.

``POST/GET/DELETE /api/v3/order``, ``POST /api/v3/order/test``, ``GET/DELETE /api/v3/openOrders``,
``GET /api/v3/allOrders``, ``GET /api/v3/account``, ``GET /api/v3/myTrades``,
``GET /api/v3/myPreventedMatches`` and ``GET /api/v3/rateLimit/order``.  Each checks the API
key, the HMAC signature and the recvWindow (with the clock-skew fault applied to the server's
time), and answers with Binance's shapes and error codes.  A placement is counted against the
order rate limits (order_rate.py) and checked against the count filters (count_filters.py)
before it reaches the account; its ``selfTradePreventionMode`` is checked here (-1130) and
passed to the account.  Order faults from the control API make an accepted order's answer slow
or a 5xx, as a real outage would.

A cancel's answer keeps the order's own ``clientOrderId`` (Binance puts the cancel's
``newClientOrderId`` there): our brokers read the order's id from it.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal, InvalidOperation
from typing import Any

from aiohttp import web

from brokers import CONDITIONAL_TYPES, percent_price_by_side
from simulator.accounts import DEFAULT_STP, STP_MODES, OrderError, SimOrder
from simulator.conditional import ALL_TYPES, PERCENT_PRICE, TIF_REQUIRED
from simulator.exchange import SimExchange
from simulator.order_list_model import cancelled_list_view
from simulator.rest import (
    ARRIVED_NS,
    EXCHANGE_KEY,
    ApiError,
    count_orders,
    json_response,
)
from simulator.signing import signed_params

OPEN_STATUSES = ("NEW", "PARTIALLY_FILLED", "PENDING_NEW")


async def _params(request: web.Request) -> tuple[SimExchange, dict[str, str]]:
    ex = request.app[EXCHANGE_KEY]
    try:
        params = await signed_params(
            request, api_key=ex.config.api_key, api_secret=ex.config.api_secret, server_ms=ex.server_time()
        )
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    return ex, params


def _symbol(ex: SimExchange, params: dict[str, str], *, required: bool = True) -> str | None:
    raw = params.get("symbol", "").upper()
    if not raw:
        if required:
            raise ApiError(-1102, "Mandatory parameter 'symbol' was not sent, was empty/null, or malformed.")
        return None
    if raw not in ex.markets:
        raise ApiError(-1121, "Invalid symbol.")
    return raw


def _decimal(params: dict[str, str], name: str) -> Decimal | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ApiError(-1100, f"Illegal characters found in parameter '{name}'.") from None
    if not value.is_finite() or value <= 0:
        raise ApiError(-1100, f"Illegal characters found in parameter '{name}'.")
    return value


RESULT_KEYS = (
    "price", "origQty", "executedQty", "origQuoteOrderQty", "cummulativeQuoteQty", "status", "timeInForce", "type",
    "side",
)  # fmt: skip
"""The fields of a RESULT answer between ``transactTime`` and ``workingTime`` (rest-api.md, New order)."""


def _conditional(order: SimOrder, view: dict[str, Any]) -> dict[str, Any]:
    """rest-api.md's "Conditional fields in Order Responses" that apply to ``order``."""
    out: dict[str, Any] = {}
    if order.stop_price is not None:
        out["stopPrice"] = view["stopPrice"]
    if order.trailing_delta is not None:
        out["trailingDelta"] = order.trailing_delta
        out["trailingTime"] = order.trailing_time
    for k in ("expiryReason", "preventedMatchId", "preventedQuantity"):
        if k in view:
            out[k] = view[k]
    return out


def cancel_view(order: SimOrder, now: int) -> dict[str, Any]:
    """A cancelled order as ``DELETE /api/v3/order`` (and openOrders, cancelReplace) answers it."""
    view = order.rest_view()
    out = {
        "symbol": order.symbol,
        "origClientOrderId": order.client_order_id,
        "orderId": order.order_id,
        "orderListId": order.order_list_id,
        "clientOrderId": order.client_order_id,
        "transactTime": now,
    }
    out |= {k: view[k] for k in RESULT_KEYS}
    out |= _conditional(order, view)
    out["selfTradePreventionMode"] = view["selfTradePreventionMode"]
    return out


def _view(order: SimOrder, resp_type: str) -> dict[str, Any]:
    out = {
        "symbol": order.symbol,
        "orderId": order.order_id,
        "orderListId": order.order_list_id,
        "clientOrderId": order.client_order_id,
        "transactTime": order.update_ms,
    }
    if resp_type == "ACK":
        return out
    view = order.rest_view()
    out |= {k: view[k] for k in RESULT_KEYS}
    out |= _conditional(order, view)
    out["workingTime"] = order.working
    out["selfTradePreventionMode"] = view["selfTradePreventionMode"]
    if resp_type == "FULL":
        out["fills"] = [
            {k: f[k] for k in ("price", "qty", "commission", "commissionAsset", "tradeId")} for f in order.fills
        ]
    return out


def stp_mode(params: dict[str, str]) -> str:
    """``selfTradePreventionMode``: one of the symbol's ``allowedSelfTradePreventionModes`` (default EXPIRE_MAKER).

    Another value (DECREMENT and TRANSFER included, which the simulated symbols do not allow)
    is refused with errors.md's -1130.
    """
    raw = params.get("selfTradePreventionMode")
    if raw is None or raw == "":
        return DEFAULT_STP
    if raw not in STP_MODES:
        raise ApiError(-1130, "Data sent for parameter 'selfTradePreventionMode' is not valid.")
    return raw


def default_resp_type(otype: str) -> str:
    """``newOrderRespType`` when not sent: FULL for MARKET and LIMIT orders, ACK for the others."""
    return "FULL" if otype in ("MARKET", "LIMIT") else "ACK"


def place_order(request: web.Request, ex: SimExchange, params: dict[str, str], *, test: bool) -> SimOrder:
    """Check ``params`` as ``POST /api/v3/order`` does and place the order (not with ``test``)."""
    symbol = _symbol(ex, params) or ""
    side = params.get("side", "").upper()
    if side not in ("BUY", "SELL"):
        raise ApiError(-1102, "Mandatory parameter 'side' was not sent, was empty/null, or malformed.")
    otype = params.get("type", "").upper()
    if otype not in ALL_TYPES:
        raise ApiError(-1116, "Invalid orderType.")
    tif = params.get("timeInForce")
    if otype in TIF_REQUIRED and tif not in ("GTC", "IOC", "FOK"):
        raise ApiError(-1102, "Mandatory parameter 'timeInForce' was not sent, was empty/null, or malformed.")
    client_id = params.get("newClientOrderId") or f"sim-{ex.now_ms()}-{len(ex.account.orders) + 1}"
    if ARRIVED_NS in request and not test:
        ex.order_arrivals.setdefault(client_id, request[ARRIVED_NS])
    now = ex.now_ms()
    last = Decimal(f"{ex.markets[symbol].last_price(now):.8f}")
    tick, step = ex.account.steps(dict(ex.start_prices())[symbol])
    stop, delta = _decimal(params, "stopPrice"), _trailing_delta(params)
    stp = stp_mode(params)
    if not test:
        refusal = ex.count_filters.check(
            ex.account, ex.order_lists, symbol, orders=1, algo=int(otype in CONDITIONAL_TYPES)
        )
        if refusal is not None:
            raise ApiError(refusal.code, refusal.msg)
    if otype in CONDITIONAL_TYPES:
        try:
            return ex.conditional.place(
                symbol=symbol, side=side, otype=otype, qty=_decimal(params, "quantity"),
                price=_decimal(params, "price"), stop=stop, delta=delta, tif=tif, client_id=client_id, last=last,
                tick=tick, step=step, now=now, test=test, stp=stp,
            )  # fmt: skip
        except OrderError as exc:
            raise ApiError(exc.code, exc.msg, exc.status) from None
    if stop is not None or delta is not None:
        raise ApiError(
            -1106, f"Parameter '{'stopPrice' if stop is not None else 'trailingDelta'}' sent when not required."
        )
    price = _decimal(params, "price")
    if price is not None and otype != "MARKET":
        refusal = percent_price_by_side(side, price, last, PERCENT_PRICE)
        if refusal is not None:
            raise ApiError(refusal.code, refusal.msg)
    try:
        return ex.account.place(
            symbol=symbol,
            side=side,
            otype=otype,
            qty=_decimal(params, "quantity"),
            quote_qty=_decimal(params, "quoteOrderQty"),
            price=price,
            tif=tif,
            client_id=client_id,
            last=last,
            tick=tick,
            step=step,
            now=now,
            test=test,
            stp=stp,
        )
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None


def order_answer(order: SimOrder, params: dict[str, str]) -> dict[str, Any]:
    """The answer to a placed order in the ``newOrderRespType`` asked for (or the type's default)."""
    resp_type = params.get("newOrderRespType", "").upper() or default_resp_type(order.type)
    return _view(order, resp_type)


def _trailing_delta(params: dict[str, str]) -> int | None:
    raw = params.get("trailingDelta")
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise ApiError(-1100, "Illegal characters found in parameter 'trailingDelta'.")
    return int(raw)


async def _answer(ex: SimExchange, order: SimOrder, params: dict[str, str]) -> web.Response:
    """The answer to an accepted order, with the order faults of the control API applied."""
    fault = ex.faults.take_order_fault()
    if fault is not None:
        if fault.kind == "timeout":
            await asyncio.sleep(fault.delay_s)  # the order is placed; its answer is what gets lost
        else:
            return json_response(
                {"code": -1000, "msg": "An unknown error occurred while processing the request."}, status=fault.status
            )
    return json_response(order_answer(order, params))


async def post_order(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    count_orders(request, 1)
    return await _answer(ex, place_order(request, ex, params, test=False), params)


async def post_order_test(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    place_order(request, ex, params, test=True)
    return json_response({})


def _find(ex: SimExchange, params: dict[str, str], symbol: str) -> SimOrder | None:
    raw_id = params.get("orderId")
    order_id = int(raw_id) if raw_id and raw_id.isdigit() else None
    client_id = params.get("origClientOrderId")
    if order_id is None and not client_id:
        raise ApiError(-1102, "Param 'origClientOrderId' or 'orderId' must be sent, but both were empty/null!")
    return ex.account.find(symbol, order_id, client_id)


async def get_order(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    order = _find(ex, params, symbol)
    if order is None:
        raise ApiError(-2013, "Order does not exist.")
    return json_response(order.rest_view())


def cancel_order(ex: SimExchange, order: SimOrder, restriction: str | None = None) -> None:
    """Cancel ``order`` (its whole list when it is a list's leg), as ``DELETE /api/v3/order`` does."""
    if restriction is not None and order.status in ("NEW", "PARTIALLY_FILLED") and order.status != restriction[5:]:
        raise ApiError(-2011, "Order was not canceled due to cancel restrictions.")
    try:
        lst = ex.order_lists.lists.get(order.order_list_id)
        if lst is not None:
            ex.order_lists.cancel(lst, ex.now_ms())  # a leg's cancel cancels its whole list
        else:
            ex.account.cancel(order, ex.now_ms())
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None


def cancel_restriction(params: dict[str, str], name: str = "cancelRestrictions") -> str | None:
    """``cancelRestrictions``: ONLY_NEW or ONLY_PARTIALLY_FILLED (-1145 otherwise), or None."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in ("ONLY_NEW", "ONLY_PARTIALLY_FILLED"):
        raise ApiError(-1145, "Invalid cancelRestrictions")
    return raw


async def delete_order(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    restriction = cancel_restriction(params)
    order = _find(ex, params, symbol)
    if order is None:
        raise ApiError(-2011, "Unknown order sent.")
    cancel_order(ex, order, restriction)
    return json_response(cancel_view(order, order.update_ms))


async def delete_open_orders(request: web.Request) -> web.Response:
    """``DELETE /api/v3/openOrders``: every open order and order list of ``symbol``, cancelled.

    Standalone orders answer as a cancel does, each list once as ``DELETE /api/v3/orderList`` does;
    with nothing open the answer is -2011 "Unknown order sent.".
    """
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    now = ex.now_ms()
    open_now = [o for o in ex.account.orders.values() if o.symbol == symbol and o.status in OPEN_STATUSES]
    if not open_now:
        raise ApiError(-2011, "Unknown order sent.")
    answers: list[dict[str, Any]] = []
    lists_done: set[int] = set()
    for order in open_now:
        lst = ex.order_lists.lists.get(order.order_list_id)
        if lst is None:
            if order.status in OPEN_STATUSES:
                cancel_order(ex, order)
                answers.append(cancel_view(order, now))
        elif lst.list_id not in lists_done:
            lists_done.add(lst.list_id)
            if not lst.done:
                try:
                    legs = ex.order_lists.cancel(lst, now)
                except OrderError as exc:
                    raise ApiError(exc.code, exc.msg, exc.status) from None
                answers.append(cancelled_list_view(lst, legs, now))
    return json_response(answers)


async def rate_limit_order(request: web.Request) -> web.Response:
    """``GET /api/v3/rateLimit/order``: the account's order count in each ``ORDERS`` interval."""
    await _params(request)
    return json_response(request.app[EXCHANGE_KEY].order_rate.counts())


async def open_orders(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params, required=False)
    rows = [
        o.rest_view()
        for o in ex.account.orders.values()
        if o.status in OPEN_STATUSES and (symbol is None or o.symbol == symbol)
    ]
    return json_response(rows)


async def all_orders(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    return json_response([o.rest_view() for o in ex.account.orders.values() if o.symbol == symbol])


ACCOUNT_UID = 354937868
"""The account's ``uid`` (rest-api.md's example; the simulator has one account)."""


def _balances(ex: SimExchange, params: dict[str, str]) -> list[dict[str, str]]:
    rows = ex.account.balances_view()
    if params.get("omitZeroBalances", "").lower() == "true":
        rows = [b for b in rows if Decimal(b["free"]) or Decimal(b["locked"])]
    return rows


async def account(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    return json_response(
        {
            "makerCommission": int(ex.account.maker_fee * 10_000),
            "takerCommission": int(ex.account.taker_fee * 10_000),
            "buyerCommission": 0,
            "sellerCommission": 0,
            "commissionRates": ex.account.commission_view("")["standardCommission"],
            "canTrade": True,
            "canWithdraw": True,
            "canDeposit": True,
            "brokered": False,
            "requireSelfTradePrevention": False,
            "preventSor": False,
            "updateTime": ex.now_ms(),
            "accountType": "SPOT",
            "balances": _balances(ex, params),
            "permissions": ["SPOT"],
            "uid": ACCOUNT_UID,
        }
    )


async def account_commission(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    return json_response(ex.account.commission_view(symbol))


async def my_trades(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    from_id = int(params["fromId"]) if params.get("fromId", "").isdigit() else None
    limit = int(params["limit"]) if params.get("limit", "").isdigit() else 500
    rows = [t for t in ex.account.trades if t["symbol"] == symbol and (from_id is None or t["id"] >= from_id)]
    return json_response(rows[:limit] if from_id is not None else rows[-limit:])


async def my_prevented_matches(request: web.Request) -> web.Response:
    """``GET /api/v3/myPreventedMatches``: one by ``preventedMatchId``, or an order's (``fromPreventedMatchId``…)."""
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""

    def number(name: str) -> int | None:
        raw = params.get(name)
        if raw is None or raw == "":
            return None
        if not raw.isdigit():
            raise ApiError(-1100, f"Illegal characters found in parameter '{name}'.")
        return int(raw)

    match_id, order_id = number("preventedMatchId"), number("orderId")
    from_id, limit = number("fromPreventedMatchId"), number("limit")
    if (match_id is None) == (order_id is None) or (match_id is not None and (from_id, limit) != (None, None)):
        raise ApiError(-1128, "Combination of optional parameters invalid.")
    if limit is not None and not 1 <= limit <= 1000:
        raise ApiError(-1130, "Data sent for parameter 'limit' is not valid.")
    rows = ex.account.prevented_matches(
        symbol, match_id=match_id, order_id=order_id, from_id=from_id, limit=500 if limit is None else limit
    )
    return json_response(rows)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v3/order", post_order)
    app.router.add_post("/api/v3/order/test", post_order_test)
    app.router.add_get("/api/v3/order", get_order)
    app.router.add_delete("/api/v3/order", delete_order)
    app.router.add_get("/api/v3/openOrders", open_orders)
    app.router.add_delete("/api/v3/openOrders", delete_open_orders)
    app.router.add_get("/api/v3/rateLimit/order", rate_limit_order)
    app.router.add_get("/api/v3/allOrders", all_orders)
    app.router.add_get("/api/v3/account", account)
    app.router.add_get("/api/v3/account/commission", account_commission)
    app.router.add_get("/api/v3/myTrades", my_trades)
    app.router.add_get("/api/v3/myPreventedMatches", my_prevented_matches)
