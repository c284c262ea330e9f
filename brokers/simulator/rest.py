"""Binance's public REST endpoints, with request weights, counters and injected HTTP errors."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from brokers.simulator.exchange import SimExchange
from brokers.simulator.exchange_info import exchange_info
from brokers.simulator.market import INTERVAL_MS, kline_row
from brokers.simulator.weights import ENDPOINT_WEIGHTS, market_data_weight

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EXCHANGE_KEY: web.AppKey[SimExchange] = web.AppKey("exchange", SimExchange)


ARRIVED_NS = web.RequestKey("arrived_ns", int)
"""When an order request reached the simulator (``time.monotonic_ns``), for benchmarks."""


class ApiError(Exception):
    """A Binance error answer: HTTP status plus ``{"code","msg"}``."""

    def __init__(self, code: int, msg: str, status: int = 400) -> None:
        super().__init__(msg)
        self.code, self.msg, self.status = code, msg, status


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json", headers=headers)


def _weight_headers(ex: SimExchange) -> dict[str, str]:
    used = str(ex.weights.used())
    return {"X-MBX-USED-WEIGHT-1M": used, "X-MBX-USED-WEIGHT": used}


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
    weight = ENDPOINT_WEIGHTS.get(request.path, 1)
    if request.path == "/api/v3/exchangeInfo" and not ("symbol" in request.query or "symbols" in request.query):
        weight = 20
    elif request.path == "/api/v3/exchangeInfo":
        weight = 2
    weight = market_data_weight(request.path, request.query, weight)
    retry = ex.weights.try_spend(weight)
    if retry is not None:
        ex.requests[f"429 {request.path}"] += 1
        msg = f"Too much request weight used; current limit is {ex.weights.limit} request weight per 1 MINUTE."
        headers = {**_weight_headers(ex), "Retry-After": str(int(retry))}
        return json_response({"code": -1003, "msg": msg}, status=429, headers=headers)
    try:
        resp = await handler(request)
    except ApiError as exc:
        resp = json_response({"code": exc.code, "msg": exc.msg}, status=exc.status)
    except web.HTTPNotFound:
        resp = json_response({"code": -1000, "msg": f"Unknown endpoint {request.path}"}, status=404)
    resp.headers.update(_weight_headers(ex))
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
    return json_response(exchange_info(ex.server_time(), prices, ex.weights.limit))


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
    rows = ex.markets[sym or ""].kline_window(interval, ex.now_ms(), start=start, end=end, limit=limit)
    return json_response([kline_row(k) for k in rows])


def _ticker_24h(ex: SimExchange, sym: str) -> dict[str, Any]:
    now = ex.now_ms()
    market = ex.markets[sym]
    last = market.last_price(now)
    first = market.path.price_at(now - 86_400_000)
    hourly = market.kline_window("1h", now, start=None, end=None, limit=24)
    high = max(k.high for k in hourly)
    low = min(k.low for k in hourly)
    vol = sum(k.volume for k in hourly)
    top = ex.book(sym, 1)
    (bid, bid_qty), (ask, ask_qty) = top.best_bid, top.best_ask
    tape = ex.tapes[sym]
    first_trade, last_trade = tape.between(now - 86_400_000, now, 1)[0], tape.last_trade(now)
    return {
        "symbol": sym,
        "priceChange": f"{last - first:.8f}",
        "priceChangePercent": f"{(last - first) / first * 100:.3f}",
        "weightedAvgPrice": f"{(high + low) / 2:.8f}",
        "prevClosePrice": f"{first:.8f}",
        "lastPrice": f"{last:.8f}",
        "lastQty": f"{last_trade.qty:.8f}",
        "bidPrice": f"{bid:.8f}",
        "bidQty": f"{bid_qty:.8f}",
        "askPrice": f"{ask:.8f}",
        "askQty": f"{ask_qty:.8f}",
        "openPrice": f"{first:.8f}",
        "highPrice": f"{high:.8f}",
        "lowPrice": f"{low:.8f}",
        "volume": f"{vol:.8f}",
        "quoteVolume": f"{vol * last:.8f}",
        "openTime": now - 86_400_000,
        "closeTime": now,
        "firstId": first_trade.id,
        "lastId": last_trade.id,
        "count": last_trade.id - first_trade.id + 1,
    }


async def ticker_24hr(request: web.Request) -> web.Response:
    from brokers.simulator.market_rest import symbols_param  # market_rest imports this module

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


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v3/ping", ping)
    app.router.add_get("/api/v3/time", server_time)
    app.router.add_get("/api/v3/exchangeInfo", get_exchange_info)
    app.router.add_get("/api/v3/klines", klines)
    app.router.add_get("/api/v3/uiKlines", klines)
    app.router.add_get("/api/v3/ticker/24hr", ticker_24hr)
    app.router.add_get("/api/v3/ticker/price", ticker_price)
