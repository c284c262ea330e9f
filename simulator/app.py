"""Starting and stopping the simulator: the aiohttp app, its periodic stream updates, its URL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from aiohttp import web

from simulator import (
    cancel_replace,
    control,
    market_rest,
    order_list_rest,
    order_rest,
    rest,
    ws_api,
    ws_handlers,
)
from simulator.clock import ClockMode
from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET, DEFAULT_SYMBOLS, SimConfig, SimExchange

UPDATE_PERIOD_S = 0.1  # the fastest documented update speed (100 ms); klines are pushed every 2 s


def build_app(exchange: SimExchange) -> web.Application:
    app = web.Application(middlewares=[rest.binance_middleware], client_max_size=1 << 20)
    app[rest.EXCHANGE_KEY] = exchange
    rest.add_routes(app)
    market_rest.add_routes(app)
    order_rest.add_routes(app)
    cancel_replace.add_routes(app)
    order_list_rest.add_routes(app)
    ws_handlers.add_routes(app)
    ws_api.add_routes(app)
    control.add_routes(app)
    return app


async def _periodic_updates(exchange: SimExchange) -> None:
    ticks = 0
    while True:
        await asyncio.sleep(UPDATE_PERIOD_S)
        ticks += 1
        exchange.push_updates(elapsed_ms=ticks * round(UPDATE_PERIOD_S * 1000))


class RunningSimulator:
    """A simulator serving on loopback; ``url`` is its REST/stream origin."""

    def __init__(self, exchange: SimExchange, runner: web.AppRunner, url: str, ticker: asyncio.Task[None]) -> None:
        self.exchange = exchange
        self.state = exchange
        self._runner = runner
        self.url = url
        self._ticker = ticker

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1)

    async def close(self) -> None:
        self.exchange.ws_api.drop_all()
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        await self.exchange.hub.close()
        await self._runner.cleanup()

    async def __aenter__(self) -> RunningSimulator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    seed: int = 42,
    symbols: Iterable[str] = DEFAULT_SYMBOLS,
    clock: ClockMode = "manual",
    speed: float = 1.0,
    start_ms: int | None = None,
    weight_limit: int = 6000,
    ping_interval_s: float = 20.0,
    max_connection_age_s: float = 86_400.0,
    api_key: str = DEFAULT_API_KEY,
    api_secret: str = DEFAULT_API_SECRET,
    balances: dict[str, Decimal] | None = None,
    **extra: Any,
) -> RunningSimulator:
    """Start a simulator on ``host:port`` (0 picks a free port) and return it running."""
    if extra:
        raise TypeError(f"unknown simulator option(s): {', '.join(sorted(extra))}")
    config = SimConfig(
        seed=seed,
        symbols=tuple(s.upper() for s in symbols),
        clock=clock,
        speed=speed,
        start_ms=start_ms,
        weight_limit=weight_limit,
        ping_interval_s=ping_interval_s,
        max_connection_age_s=max_connection_age_s,
        api_key=api_key,
        api_secret=api_secret,
    )
    if balances is not None:
        config.balances = dict(balances)
    exchange = SimExchange(config)
    runner = web.AppRunner(build_app(exchange), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    ticker = asyncio.create_task(_periodic_updates(exchange), name="sim-kline-updates")
    return RunningSimulator(exchange, runner, f"http://{shown}:{bound[1]}", ticker)
