"""The control API (design.md §4): move prices and the clock, inject faults, read the state."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
from aiohttp import web

from simulator.count_filters import CountFilters
from simulator.faults import HttpErrorFault, OrderFault, StreamRefusal
from simulator.rest import EXCHANGE_KEY, json_response


def _bad(message: str) -> web.Response:
    return json_response({"ok": False, "error": message}, status=400)


async def _body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def _positive(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


async def post_price(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    body = await _body(request)
    if body is None:
        return _bad('expected a JSON object like {"symbol":"BTCUSDT","price":"65000.5"}')
    symbol = str(body.get("symbol", "")).upper()
    if symbol not in ex.markets:
        return _bad(f"unknown symbol {symbol!r}; simulated: {', '.join(sorted(ex.markets))}")
    price = _positive(body.get("price"))
    if price is None:
        return _bad("price must be a positive number (string or number)")
    qty = _positive(body.get("qty", "0.001")) or 0.001
    price = ex.trade(symbol, price, qty)  # on the tick grid
    return json_response({"ok": True, "symbol": symbol, "price": f"{price:.8f}", "time": ex.now_ms()})


async def post_advance(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    body = await _body(request)
    seconds = None if body is None else body.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 10 * 365 * 86400:
        return _bad('expected {"seconds": N} with 0 ≤ N ≤ 10 years')
    return json_response(ex.advance(float(seconds)))


COUNT_FILTER_KNOBS = ("max_num_orders", "max_num_algo_orders", "max_num_order_lists")


def _order_rate(request: web.Request, spec: Any) -> str | None:
    """``{"per_10s": 5, "per_day": 100}`` (either may be left out), or null for Binance's limits."""
    rate = request.app[EXCHANGE_KEY].order_rate
    if spec is None:
        rate.reset_limits()
        return None
    hint = 'order_rate needs {"per_10s": 5, "per_day": 100} (whole numbers ≥ 1), or null for Binance\'s limits'
    if not isinstance(spec, dict) or not spec.keys() <= {"per_10s", "per_day"}:
        return hint
    per_10s, per_day = (w.limit for w in rate.windows)
    per_10s, per_day = spec.get("per_10s", per_10s), spec.get("per_day", per_day)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (per_10s, per_day)):
        return hint
    rate.set_limits(per_10s, per_day)
    return None


async def post_faults(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    body = await _body(request)
    if not body:
        return _bad("expected a JSON object naming a fault")
    done: dict[str, Any] = {}
    if body.get("reset"):
        ex.faults.reset()
        ex.weights.reset()
        ex.hub.max_age_s = ex.config.max_connection_age_s
        ex.order_rate.reset_limits()
        ex.count_filters.reset()
        done["reset"] = True
    if "order_rate" in body:
        problem = _order_rate(request, body["order_rate"])
        if problem is not None:
            return _bad(problem)
        done["order_rate"] = ex.order_rate.rate_limits()
    for name in COUNT_FILTER_KNOBS:
        if name in body:
            value = body[name]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                return _bad(f"{name} must be a whole number ≥ 1, or null for Binance's value")
            filters = ex.count_filters
            setattr(filters, name, getattr(CountFilters(), name) if value is None else value)
            done[name] = getattr(filters, name)
    if "http_error" in body:
        spec = body["http_error"]
        try:
            fault = HttpErrorFault(
                status=int(spec["status"]),
                retry_after=int(spec.get("retry_after", 1)),
                count=int(spec.get("count", 1)),
                path=spec.get("path"),
            )
        except (KeyError, TypeError, ValueError):
            return _bad('http_error needs {"status":429,"retry_after":2,"count":3}')
        ex.faults.http_errors.append(fault)
        done["http_error"] = spec
    if "refuse_streams" in body:
        spec = body["refuse_streams"]
        if spec is None or spec is False:
            ex.faults.refuse_streams = None
        else:
            status = spec.get("status", 451) if isinstance(spec, dict) else None
            if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
                return _bad('refuse_streams needs {"status":451} (a 4xx/5xx status), or null to stop refusing')
            ex.faults.refuse_streams = StreamRefusal(status)
        done["refuse_streams"] = spec
    if "stall_streams_s" in body:
        seconds = _positive(body["stall_streams_s"]) or 0.0
        ex.faults.stall(seconds)
        done["stall_streams_s"] = seconds
    if "clock_skew_ms" in body:
        ex.faults.clock_skew_ms = int(body["clock_skew_ms"])
        done["clock_skew_ms"] = ex.faults.clock_skew_ms
    if "max_connection_age_s" in body:
        age = _positive(body["max_connection_age_s"])
        if age is None:
            return _bad("max_connection_age_s must be a positive number")
        ex.hub.max_age_s = age
        for conn in ex.hub.connections:
            conn.queue.put_nowait(b"")  # wake writers so the new limit applies now
        done["max_connection_age_s"] = age
    if "order_fault" in body:
        spec = body["order_fault"]
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if kind not in ("timeout", "error_after_accept"):
            return _bad('order_fault needs {"kind":"timeout"|"error_after_accept","count":1,"status":503,"delay_s":30}')
        ex.faults.order_faults.append(
            OrderFault(
                kind=kind,
                count=int(spec.get("count", 1)),
                status=int(spec.get("status", 503)),
                delay_s=float(spec.get("delay_s", 30.0)),
            )
        )
        done["order_fault"] = spec
    if body.get("drop_ws_api"):
        done["ws_api_dropped"] = ex.ws_api.drop_all()
    if body.get("user_stream_terminated"):
        done["user_streams_terminated"] = ex.ws_api.terminate_all(ex.now_ms(), ex.account)
    if body.get("drop_streams"):
        done["dropped"] = ex.hub.drop_all()
    if body.get("server_shutdown"):
        done["shutdown"] = ex.hub.shutdown_all(ex.now_ms())
    if not done:
        return _bad(f"unknown fault in {sorted(body)}; see design.md §4")
    return json_response({"ok": True, **done})


async def post_commission(request: web.Request) -> web.Response:
    """The account's commission rates: ``{"maker": "0.0002", "taker": "0.0004"}`` (fractions, 0 ≤ r < 0.1;
    either may be left out)."""
    ex = request.app[EXCHANGE_KEY]
    body = await _body(request)
    if body is None or not body.keys() & {"maker", "taker"} or body.keys() - {"maker", "taker"}:
        return _bad('expected {"maker": "0.0002", "taker": "0.0004"} (fractions of the traded value)')
    rates = {}
    for name in ("maker", "taker"):
        if name not in body:
            continue
        try:
            rate = Decimal(str(body[name]))
        except InvalidOperation:
            rate = Decimal(-1)
        if not rate.is_finite() or not Decimal(0) <= rate < Decimal("0.1"):
            return _bad(f"{name} must be a fraction from 0 up to 0.1 (0.001 is 0.1 %), not {body[name]!r}")
        rates[name] = rate
    account = ex.account
    account.maker_fee = rates.get("maker", account.maker_fee)
    account.taker_fee = rates.get("taker", account.taker_fee)
    return json_response({"ok": True, "maker": str(account.maker_fee), "taker": str(account.taker_fee)})


async def get_state(request: web.Request) -> web.Response:
    return json_response(request.app[EXCHANGE_KEY].state())


def add_routes(app: web.Application) -> None:
    app.router.add_post("/sim/v1/price", post_price)
    app.router.add_post("/sim/v1/advance", post_advance)
    app.router.add_post("/sim/v1/faults", post_faults)
    app.router.add_post("/sim/v1/commission", post_commission)
    app.router.add_get("/sim/v1/state", get_state)
