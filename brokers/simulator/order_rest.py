"""Binance's signed account and order endpoints on the simulator's one account.

``POST/GET/DELETE /api/v3/order``, ``POST /api/v3/order/test``, ``GET /api/v3/openOrders``,
``GET /api/v3/allOrders``, ``GET /api/v3/account``, ``GET /api/v3/myTrades``.  Each checks
the API key, the HMAC signature and the recvWindow (with the clock-skew fault applied to
the server's time), and answers with Binance's shapes and error codes.  Order faults from
the control API make an accepted order's answer slow or a 5xx, as a real outage would.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal, InvalidOperation
from typing import Any

from aiohttp import web

from brokers.simulator.accounts import OrderError, SimOrder
from brokers.simulator.conditional import ALL_TYPES, PERCENT_PRICE, TIF_REQUIRED
from brokers.simulator.exchange import SimExchange
from brokers.simulator.rest import ARRIVED_NS, EXCHANGE_KEY, ApiError, json_response
from brokers.simulator.signing import signed_params
from brokers.trigger_rules import CONDITIONAL_TYPES, percent_price_by_side


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
    out |= {
        k: view[k]
        for k in ("price", "origQty", "executedQty", "cummulativeQuoteQty", "status", "timeInForce", "type", "side")
    }
    if order.stop_price is not None:
        out["stopPrice"] = view["stopPrice"]
    if order.trailing_delta is not None:
        out["trailingDelta"] = order.trailing_delta
        out["trailingTime"] = order.trailing_time
    out["workingTime"] = order.working
    out["selfTradePreventionMode"] = "EXPIRE_MAKER"
    if resp_type == "FULL":
        out["fills"] = [
            {k: f[k] for k in ("price", "qty", "commission", "commissionAsset", "tradeId")} for f in order.fills
        ]
    return out


async def _place(request: web.Request, *, test: bool) -> web.Response:
    ex, params = await _params(request)
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
    if otype in CONDITIONAL_TYPES:
        try:
            order = ex.conditional.place(
                symbol=symbol, side=side, otype=otype, qty=_decimal(params, "quantity"),
                price=_decimal(params, "price"), stop=stop, delta=delta, tif=tif, client_id=client_id, last=last,
                tick=tick, step=step, now=now, test=test,
            )  # fmt: skip
        except OrderError as exc:
            raise ApiError(exc.code, exc.msg, exc.status) from None
        return await _answer(ex, order, params, "ACK", test=test)
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
        order = ex.account.place(
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
        )
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    return await _answer(ex, order, params, "FULL" if otype == "MARKET" else "RESULT", test=test)


def _trailing_delta(params: dict[str, str]) -> int | None:
    raw = params.get("trailingDelta")
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise ApiError(-1100, "Illegal characters found in parameter 'trailingDelta'.")
    return int(raw)


async def _answer(
    ex: SimExchange, order: SimOrder, params: dict[str, str], default_resp: str, *, test: bool
) -> web.Response:
    """The answer to an accepted order, with the order faults of the control API applied."""
    if test:
        return json_response({})
    fault = ex.faults.take_order_fault()
    if fault is not None:
        if fault.kind == "timeout":
            await asyncio.sleep(fault.delay_s)  # the order is placed; its answer is what gets lost
        else:
            return json_response(
                {"code": -1000, "msg": "An unknown error occurred while processing the request."}, status=fault.status
            )
    return json_response(_view(order, params.get("newOrderRespType", default_resp).upper()))


async def post_order(request: web.Request) -> web.Response:
    return await _place(request, test=False)


async def post_order_test(request: web.Request) -> web.Response:
    return await _place(request, test=True)


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


async def delete_order(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    order = _find(ex, params, symbol)
    if order is None:
        raise ApiError(-2011, "Unknown order sent.")
    try:
        lst = ex.order_lists.lists.get(order.order_list_id)
        if lst is not None:
            ex.order_lists.cancel(lst, ex.now_ms())  # a leg's cancel cancels its whole list
        else:
            ex.account.cancel(order, ex.now_ms())
    except OrderError as exc:
        raise ApiError(exc.code, exc.msg, exc.status) from None
    view = order.rest_view()
    view["origClientOrderId"] = order.client_order_id
    view["transactTime"] = order.update_ms
    return json_response(view)


async def open_orders(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params, required=False)
    rows = [
        o.rest_view()
        for o in ex.account.orders.values()
        if o.status in ("NEW", "PARTIALLY_FILLED", "PENDING_NEW") and (symbol is None or o.symbol == symbol)
    ]
    return json_response(rows)


async def all_orders(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    return json_response([o.rest_view() for o in ex.account.orders.values() if o.symbol == symbol])


async def account(request: web.Request) -> web.Response:
    ex, _ = await _params(request)
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
            "updateTime": ex.now_ms(),
            "accountType": "SPOT",
            "balances": ex.account.balances_view(),
            "permissions": ["SPOT"],
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


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v3/order", post_order)
    app.router.add_post("/api/v3/order/test", post_order_test)
    app.router.add_get("/api/v3/order", get_order)
    app.router.add_delete("/api/v3/order", delete_order)
    app.router.add_get("/api/v3/openOrders", open_orders)
    app.router.add_get("/api/v3/allOrders", all_orders)
    app.router.add_get("/api/v3/account", account)
    app.router.add_get("/api/v3/account/commission", account_commission)
    app.router.add_get("/api/v3/myTrades", my_trades)
