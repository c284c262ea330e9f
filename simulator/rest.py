"""Binance's public REST endpoints and the middleware every ``/api`` request passes.

The middleware counts, weighs (weights.py) and fault-injects each request, adds the
``X-MBX-USED-WEIGHT-1M`` header and, on order answers, ``X-MBX-ORDER-COUNT-10S``/``-1D``
(order_rate.py), and turns every error into Binance's JSON ``{"code","msg"}``: an unknown
``/api`` path answers 404 and a known path asked with the wrong method 405, both with JSON
bodies (Binance's own answer there is not documented; the codes and texts are errors.md's).
The rolling-window ticker ``GET /api/v3/ticker`` is tickers.py's :func:`window_stats`, the
computation the ticker streams use.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from simulator.exchange import SimExchange
from simulator.exchange_info import exchange_info
from simulator.market import INTERVAL_MS
from simulator.tickers import rest_ticker_24h, window_stats
from simulator.weights import request_weight

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EXCHANGE_KEY: web.AppKey[SimExchange] = web.AppKey("exchange", SimExchange)


ARRIVED_NS = web.RequestKey("arrived_ns", int)
"""When an order request reached the simulator (``time.monotonic_ns``), for benchmarks."""
ORDERS_COUNTED = web.RequestKey("orders_counted", bool)
"""The request placed orders: its answer carries the ``X-MBX-ORDER-COUNT-*`` headers."""


class ApiError(Exception):
    """A Binance error answer: HTTP status plus ``{"code","msg"}`` (and ``data`` for a cancel-replace)."""

    def __init__(
        self,
        code: int,
        msg: str,
        status: int = 400,
        *,
        headers: dict[str, str] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(msg)
        self.code, self.msg, self.status = code, msg, status
        self.headers = headers or {}
        self.data = data

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "msg": self.msg}
        if self.data is not None:
            out["data"] = self.data
        return out


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json", headers=headers)


def _weight_headers(ex: SimExchange) -> dict[str, str]:
    used = str(ex.weights.used())
    return {"X-MBX-USED-WEIGHT-1M": used, "X-MBX-USED-WEIGHT": used}


def count_orders(request: web.Request, n: int) -> None:
    """Count ``n`` order placements of this request (order_rate.py); past a limit, 429 with -1015."""
    refusal = request.app[EXCHANGE_KEY].order_rate.take(n)
    if refusal is not None:
        raise ApiError(refusal.code, refusal.msg, 429, headers={"Retry-After": str(refusal.retry_after)})
    request[ORDERS_COUNTED] = True


@web.middleware
async def binance_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count, weigh, fault-inject and translate errors for every /api request."""
    if not request.path.startswith("/api/"):
        return await handler(request)
    ex = request.app[EXCHANGE_KEY]
    ex.requests[f"{request.method} {request.path}"] += 1
    if request.method == "POST" and request.path == "/api/v3/order":
        request[ARRIVED_NS] = arrived = time.monotonic_ns()
        ex.order_posts_ns.append(arrived)
    fault = ex.faults.take_http_error(request.path)
    if fault is not None:
        headers = {**_weight_headers(ex), "Retry-After": str(fault.retry_after)}
        return json_response(fault.body(), status=fault.status, headers=headers)
    retry = ex.weights.try_spend(request_weight(request.method, request.path, request.query))
    if retry is not None:
        ex.requests[f"429 {request.path}"] += 1
        msg = f"Too much request weight used; current limit is {ex.weights.limit} request weight per 1 MINUTE."
        headers = {**_weight_headers(ex), "Retry-After": str(int(retry))}
        return json_response({"code": -1003, "msg": msg}, status=429, headers=headers)
    try:
        resp = await handler(request)
    except ApiError as exc:
        resp = json_response(exc.body(), status=exc.status, headers=exc.headers)
    except web.HTTPMethodNotAllowed:
        resp = json_response({"code": -1020, "msg": "This operation is not supported."}, status=405)
    except web.HTTPNotFound:
        resp = json_response({"code": -1000, "msg": "An unknown error occurred while processing the request."}, 404)
    resp.headers.update(_weight_headers(ex))
    if request.get(ORDERS_COUNTED):
        resp.headers.update(ex.order_rate.headers())
    return resp


def _symbol(ex: SimExchange, request: web.Request, *, required: bool = True) -> str | None:
    raw = request.query.get("symbol")
    if raw is None or raw == "":
        if required:
            raise ApiError(-1102, "Mandatory parameter 'symbol' was not sent, was empty/null, or malformed.")
        return None
    sym = raw.upper()
    if sym not in ex.markets:
        raise ApiError(-1121, "Invalid symbol.")
    return sym


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ApiError(
            -1100, f"Illegal characters found in parameter '{name}'; legal range is '^[0-9]{{1,20}}$'."
        ) from exc


def symbols_param(ex: SimExchange, request: web.Request) -> list[str] | None:
    """``symbol`` or ``symbols`` (a JSON array), never both; None when neither was sent."""
    if "symbols" not in request.query:
        sym = _symbol(ex, request, required=False)
        return None if sym is None else [sym]
    if "symbol" in request.query:
        raise ApiError(-1128, "Combination of optional parameters invalid.")
    try:
        names = orjson.loads(request.query["symbols"])
    except orjson.JSONDecodeError as exc:
        raise ApiError(-1100, "Illegal characters found in parameter 'symbols'.") from exc
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ApiError(-1100, "Illegal characters found in parameter 'symbols'.")
    wanted = [n.upper() for n in names]
    if len(set(wanted)) != len(wanted):
        raise ApiError(-1151, "Symbol is present multiple times in the list.")
    if any(n not in ex.markets for n in wanted):
        raise ApiError(-1121, "Invalid symbol.")
    return wanted


async def ping(request: web.Request) -> web.Response:
    return json_response({})


async def server_time(request: web.Request) -> web.Response:
    return json_response({"serverTime": request.app[EXCHANGE_KEY].server_time()})


async def get_exchange_info(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    wanted: list[str] | None = None
    if "symbol" in request.query:
        wanted = [_symbol(ex, request) or ""]
    elif "symbols" in request.query:
        try:
            names = orjson.loads(request.query["symbols"])
        except orjson.JSONDecodeError as exc:
            raise ApiError(-1100, "Illegal characters found in parameter 'symbols'.") from exc
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ApiError(-1100, "Illegal characters found in parameter 'symbols'.")
        wanted = [n.upper() for n in names]
        if any(n not in ex.markets for n in wanted):
            raise ApiError(-1121, "Invalid symbol.")
    prices = [(s, p) for s, p in ex.start_prices() if wanted is None or s in wanted]
    rates = ex.order_rate.rate_limits()
    filters = ex.count_filters.exchange_filters()
    return json_response(exchange_info(ex.server_time(), prices, ex.weights.limit, rates, filters))


async def klines(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request)
    interval = request.query.get("interval")
    if not interval:
        raise ApiError(-1102, "Mandatory parameter 'interval' was not sent, was empty/null, or malformed.")
    if interval not in INTERVAL_MS:
        raise ApiError(-1120, "Invalid interval.")
    limit = _int_param(request, "limit")
    limit = 500 if limit is None else limit
    if not 1 <= limit <= 1000:
        raise ApiError(-1130, "Invalid data sent for a parameter.")
    start, end = _int_param(request, "startTime"), _int_param(request, "endTime")
    if start is not None and end is not None and start > end:
        raise ApiError(-1023, "Start time is greater than end time.")
    body = ex.markets[sym or ""].klines_body(interval, ex.now_ms(), start=start, end=end, limit=limit)
    return web.Response(body=body, content_type="application/json")  # json_response's answer, written in one pass


def _ticker_24h(ex: SimExchange, sym: str) -> dict[str, Any]:
    return rest_ticker_24h(ex, sym)  # one computation with the ticker streams (tickers.py)


async def ticker_24hr(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    wanted = symbols_param(ex, request)
    if wanted is not None and "symbols" not in request.query:
        return json_response(_ticker_24h(ex, wanted[0]))
    return json_response([_ticker_24h(ex, s) for s in (wanted or ex.markets)])


async def ticker_price(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE_KEY]
    sym = _symbol(ex, request, required=False)
    now = ex.now_ms()
    if sym is not None:
        return json_response({"symbol": sym, "price": f"{ex.markets[sym].last_price(now):.8f}"})
    return json_response([{"symbol": s, "price": f"{m.last_price(now):.8f}"} for s, m in ex.markets.items()])


_WINDOW = re.compile(r"([1-9][0-9]?)([mhd])")
_WINDOW_MAX = {"m": 59, "h": 23, "d": 7}
_WINDOW_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}


def window_size_ms(raw: str | None) -> int:
    """``windowSize``: ``1m``…``59m``, ``1h``…``23h``, ``1d``…``7d`` (default ``1d``), in milliseconds."""
    match = _WINDOW.fullmatch(raw if raw is not None else "1d")
    if match is None or int(match[1]) > _WINDOW_MAX[match[2]]:
        raise ApiError(-1100, "Illegal characters found in parameter 'windowSize'.")
    return int(match[1]) * _WINDOW_UNIT_MS[match[2]]


def _ticker_window(ex: SimExchange, sym: str, window_ms: int, *, full: bool) -> dict[str, Any]:
    """One symbol's ``GET /api/v3/ticker`` row: tickers.py's rolling window (as the streams compute it)."""
    c = window_stats(ex, sym, window_ms).common()
    keys: tuple[str, ...] = ("openPrice", "highPrice", "lowPrice", "lastPrice", "volume", "quoteVolume")
    keys += ("openTime", "closeTime", "firstId", "lastId", "count")
    if full:
        keys = ("priceChange", "priceChangePercent", "weightedAvgPrice", *keys)
    return {"symbol": sym} | {k: c[k] for k in keys}


async def ticker_window(request: web.Request) -> web.Response:
    """``GET /api/v3/ticker``: rolling-window statistics for ``symbol`` or ``symbols`` (FULL or MINI)."""
    ex = request.app[EXCHANGE_KEY]
    wanted = symbols_param(ex, request)
    if wanted is None:
        raise ApiError(-1102, "Param 'symbol' or 'symbols' must be sent, but both were empty/null!")
    window_ms = window_size_ms(request.query.get("windowSize"))
    kind = request.query.get("type", "FULL")
    if kind not in ("FULL", "MINI"):
        raise ApiError(-1139, "Invalid ticker type.")
    status = request.query.get("symbolStatus")
    if status is not None and status not in ("TRADING", "HALT", "BREAK"):
        raise ApiError(-1122, "Invalid symbolStatus.")
    if status not in (None, "TRADING"):  # every simulated symbol is TRADING
        if "symbols" not in request.query:
            raise ApiError(-1220, "The symbol's status does not match the requested symbolStatus.")
        wanted = []
    rows = [_ticker_window(ex, s, window_ms, full=kind == "FULL") for s in wanted]
    return json_response(rows if "symbols" in request.query else rows[0])


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v3/ping", ping)
    app.router.add_get("/api/v3/time", server_time)
    app.router.add_get("/api/v3/exchangeInfo", get_exchange_info)
    app.router.add_get("/api/v3/klines", klines)
    app.router.add_get("/api/v3/uiKlines", klines)
    app.router.add_get("/api/v3/ticker/24hr", ticker_24hr)
    app.router.add_get("/api/v3/ticker/price", ticker_price)
    app.router.add_get("/api/v3/ticker", ticker_window)
