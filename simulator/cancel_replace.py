"""``POST /api/v3/order/cancelReplace``: cancel an order and place a new one on the same symbol.

rest-api.md's rules: the placement counts 1 against the order rate limits even when the new order
is not attempted; ``cancelReplaceMode`` STOP_ON_FAILURE places nothing when the cancel fails
(400, -2022), ALLOW_FAILURE places anyway; one half failing answers 409 with -2021 "Order
cancel-replace partially failed.", both failing 400 with -2022 "Order cancel-replace failed.",
each with the ``data`` object of both halves' results.  Past the order rate limit,
``orderRateLimitExceededMode`` DO_NOTHING (the default) answers 429/-1015 and cancels nothing,
CANCEL_ONLY still cancels and reports the new order's -1015 (HTTP 429 with STOP_ON_FAILURE).

Where it is simpler than Binance: the new order's filters are checked after the cancel, not
before it, so a new order refused by a filter is a 409 "partially failed" with the cancel done.
Its mandatory ``side`` and ``type`` are checked before anything happens.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from simulator.exchange import SimExchange
from simulator.order_rest import (
    _params,
    _symbol,
    cancel_order,
    cancel_restriction,
    cancel_view,
    order_answer,
    place_order,
)
from simulator.rest import ORDERS_COUNTED, ApiError, json_response

MODES = ("STOP_ON_FAILURE", "ALLOW_FAILURE")
RATE_MODES = ("DO_NOTHING", "CANCEL_ONLY")
PARTIAL = (-2021, "Order cancel-replace partially failed.")
FAILED = (-2022, "Order cancel-replace failed.")


def _enum(params: dict[str, str], name: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    raw = params.get(name) or default
    if raw is None:
        raise ApiError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")
    if raw not in allowed:
        raise ApiError(-1100, f"Illegal characters found in parameter '{name}'; legal range is '{', '.join(allowed)}'.")
    return raw


def _cancel(ex: SimExchange, params: dict[str, str], symbol: str, restriction: str | None) -> dict[str, Any]:
    """The cancel half: the cancelled order's answer, or its error as ``{"code","msg"}``."""
    raw_id = params.get("cancelOrderId", "")
    order_id = int(raw_id) if raw_id.isdigit() else None
    client_id = params.get("cancelOrigClientOrderId") or None
    order = ex.account.find(symbol, order_id, client_id)
    if order is not None and order_id is not None and client_id and order.client_order_id != client_id:
        order = None
    try:
        if order is None:
            raise ApiError(-2011, "Unknown order sent.")
        cancel_order(ex, order, restriction)
    except ApiError as exc:
        return {"code": exc.code, "msg": exc.msg}
    return cancel_view(order, order.update_ms)


async def post_cancel_replace(request: web.Request) -> web.Response:
    ex, params = await _params(request)
    symbol = _symbol(ex, params) or ""
    mode = _enum(params, "cancelReplaceMode", MODES)
    rate_mode = _enum(params, "orderRateLimitExceededMode", RATE_MODES, "DO_NOTHING")
    restriction = cancel_restriction(params)
    for name in ("side", "type"):
        if not params.get(name):
            raise ApiError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")
    if not params.get("cancelOrderId") and not params.get("cancelOrigClientOrderId"):
        raise ApiError(
            -1102, "Param 'cancelOrigClientOrderId' or 'cancelOrderId' must be sent, but both were empty/null!"
        )
    refusal = ex.order_rate.take(1)
    if refusal is not None and rate_mode == "DO_NOTHING":
        raise ApiError(refusal.code, refusal.msg, 429, headers={"Retry-After": str(refusal.retry_after)})
    if refusal is None:
        request[ORDERS_COUNTED] = True
    cancel = _cancel(ex, params, symbol, restriction)
    cancelled = "code" not in cancel
    new: dict[str, Any] | None
    if refusal is not None:
        new = {"code": refusal.code, "msg": refusal.msg} if cancelled or mode == "ALLOW_FAILURE" else None
    elif not cancelled and mode == "STOP_ON_FAILURE":
        new = None
    else:
        try:
            new = order_answer(place_order(request, ex, params, test=False), params)
        except ApiError as exc:
            new = {"code": exc.code, "msg": exc.msg}
    placed = new is not None and "code" not in new
    data = {
        "cancelResult": "SUCCESS" if cancelled else "FAILURE",
        "newOrderResult": "NOT_ATTEMPTED" if new is None else "SUCCESS" if placed else "FAILURE",
        "cancelResponse": cancel,
        "newOrderResponse": new,
    }
    if cancelled and placed:
        return json_response(data)
    code, msg = PARTIAL if cancelled or placed else FAILED
    status = 409 if cancelled or placed else 400
    headers = {}
    if refusal is not None:
        headers["Retry-After"] = str(refusal.retry_after)
        if mode == "STOP_ON_FAILURE":
            status = 429
    raise ApiError(code, msg, status, headers=headers, data=data)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v3/order/cancelReplace", post_cancel_replace)
