"""Wiring of the daemon's parts: simulator, HTTP session, engine, market data, render pool.

Only ``daemon`` builds concrete objects (design.md §1); everything else receives them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from brokers import (
    OrderService,
    ScheduleService,
    ScheduleStore,
    SuspensionService,
    SuspensionStore,
    cancel_principal_open,
)
from config import Settings
from daemon.database import open_database
from daemon.parts.alerts import running_alerts
from daemon.parts.engine import running_engine, schedule_stream_rotation
from daemon.parts.halt import running_halt
from daemon.parts.orders import running_orders
from daemon.parts.prompt_data import DaemonPromptData
from daemon.scheduler import DaemonScheduler
from daemon.supervisor import Supervisor
from daemon.trades_log import TradesLog
from engine import (
    BarsSource,
    BinanceRest,
    ChartRenderer,
    ChartService,
    EngineFirstBars,
    ExternalSources,
    InlineRenderer,
    LiveEngine,
    MarketData,
    ProcessPoolRenderer,
    SymbolDirectory,
)
from mcp_bridge import AgentSettings, JournalLimits, JournalStore, Services, TokenStore, current_principal
from storage import Database


@contextlib.asynccontextmanager
async def simulated_exchange(settings: Settings, enabled: bool) -> AsyncIterator[Settings]:
    """With ``--sim``, start the exchange simulator on loopback and point the Binance (and ccxt broker) URLs at it."""
    if not enabled:
        yield settings
        return
    from simulator import start_simulator

    sim = await start_simulator(host="127.0.0.1", port=0, clock=settings.sim_clock, symbols=_sim_symbols(settings))
    try:
        ws = sim.url.replace("http://", "ws://")
        update: dict[str, Any] = {
            "binance_rest_url": sim.url,
            "binance_stream_url": ws,
            "binance_ws_api_url": f"{ws}/ws-api/v3",
        }
        if settings.binance_keys() is None:
            from pydantic import SecretStr

            from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET

            update |= {
                "binance_api_key": SecretStr(DEFAULT_API_KEY),
                "binance_api_secret": SecretStr(DEFAULT_API_SECRET),
            }
        if settings.broker == "ccxt" and settings.ccxt_api_url is None:
            from pydantic import SecretStr

            from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET

            update["ccxt_api_url"] = f"{sim.url}/api/v3"
            if settings.ccxt_keys() is None:
                update |= {"ccxt_api_key": SecretStr(DEFAULT_API_KEY), "ccxt_api_secret": SecretStr(DEFAULT_API_SECRET)}
        yield settings.model_copy(update=update)
    finally:
        await sim.close()


TESTNET = {
    "binance_rest_url": "https://testnet.binance.vision",
    "binance_stream_url": "wss://stream.testnet.binance.vision",
    "binance_ws_api_url": "wss://ws-api.testnet.binance.vision/ws-api/v3",
}


def testnet_endpoints(settings: Settings) -> Settings:
    """With ``--testnet``, Binance endpoints left at their mainnet defaults move to the spot testnet."""
    if not settings.testnet:
        return settings
    defaults = Settings.model_fields
    update = {k: v for k, v in TESTNET.items() if getattr(settings, k) == defaults[k].default}
    return settings.model_copy(update=update)


def _sim_symbols(settings: Settings) -> list[str]:
    from simulator import DEFAULT_SYMBOLS

    return list(dict.fromkeys([*DEFAULT_SYMBOLS, *settings.symbols]))


@contextlib.asynccontextmanager
async def chart_service(
    settings: Settings,
    *,
    render_in_pool: bool = True,
    session: aiohttp.ClientSession | None = None,
    engine: LiveEngine | None = None,
) -> AsyncIterator[ChartService]:
    """A ready ChartService (engine windows first when an engine runs); closes what it opened."""
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp.ClientSession())
        market: BarsSource = MarketData(
            session,
            binance_rest_url=settings.binance_rest_url,
            yahoo_url=settings.yahoo_url,
            timeout_s=settings.http_timeout_s,
            cache_ttl_s=settings.market_cache_ttl_s,
        )
        external = ExternalSources(
            session=session,
            futures_url=settings.futures_url,
            fear_greed_url=settings.fear_greed_url,
            timeout_s=settings.http_timeout_s,
        )
        if engine is not None:
            market = EngineFirstBars(engine, market)
        renderer: ChartRenderer
        if render_in_pool:
            pool = ProcessPoolRenderer(
                settings.render_workers,
                per_principal=settings.max_renders_per_principal,
                principal=current_principal,
                warm=settings.render_warm_start,
            )
            renderer = await stack.enter_async_context(pool)
        else:
            renderer = InlineRenderer()
        yield ChartService(market, renderer, external_sources=external, summary_signals=settings.summary_signals)


@contextlib.asynccontextmanager
async def daemon_services(settings: Settings, *, sim: bool, trade: bool) -> AsyncIterator[tuple[Settings, Services]]:
    """Everything the MCP tools need, started in order and stopped in reverse.

    Yields the effective settings (``--sim`` rewrites the exchange URLs) and the services.
    """
    async with contextlib.AsyncExitStack() as stack:
        settings = testnet_endpoints(settings)
        settings = await stack.enter_async_context(simulated_exchange(settings, sim))
        db = await stack.enter_async_context(open_database(settings))
        supervisor = await stack.enter_async_context(Supervisor())
        scheduler = DaemonScheduler()  # started last (below), so it stops before what its jobs use
        session = await stack.enter_async_context(aiohttp.ClientSession())
        engine = await stack.enter_async_context(running_engine(settings, session=session)) if trade else None
        charts = await stack.enter_async_context(chart_service(settings, session=session, engine=engine))
        services = Services(charts=charts, max_bars=settings.max_bars, engine=engine, tokens=TokenStore(db))
        services.market = market_data(settings, session)
        services.journal = JournalStore(db, limits=journal_limits(settings))
        services.agent = agent_settings(settings)
        services.scheduler = scheduler
        if engine is not None:
            schedule_stream_rotation(engine, scheduler, settings)
        if engine is not None:
            rest = BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s)
            directory = SymbolDirectory(rest)
            trades_log = TradesLog(settings.resolved_data_dir() / "trades.log")
            # Orders first: their first reconciliation sends the alert-action intents a crash left
            # unsent, and alert actions need the order service the moment the evaluator starts.
            services.orders = await stack.enter_async_context(
                running_orders(
                    settings,
                    db=db,
                    engine=engine,
                    directory=directory,
                    supervisor=supervisor,
                    trades_log=trades_log,
                    session=session,
                    scheduler=scheduler,
                )
            )
            runtime = await stack.enter_async_context(
                running_alerts(
                    settings,
                    db=db,
                    engine=engine,
                    symbols=engine.catalogue or directory,
                    supervisor=supervisor,
                    trades_log=trades_log,
                    orders=services.orders,
                    scheduler=scheduler,
                )
            )
            services.alerts, services.push = runtime.service, runtime.hub
            services.channels, services.feed = runtime.channels, runtime.feed
            services.prompts = DaemonPromptData(rest, services.orders)
            services.halt = await stack.enter_async_context(
                running_halt(db=db, service=services.orders, supervisor=supervisor, trades_log=trades_log)
            )
            services.suspensions = running_suspensions(db, services.orders, supervisor, trades_log)
            services.schedules = ScheduleService(
                ScheduleStore(db),
                services.orders,
                audit=trades_log.append,
                jobs=scheduler,
                misfire_grace_s=settings.schedule_misfire_grace_s,
            )
            await services.schedules.start()
        await stack.enter_async_context(scheduler.running())
        yield settings, services


def running_suspensions(
    db: Database, orders: OrderService, supervisor: Supervisor, trades_log: TradesLog
) -> SuspensionService:
    """The per-principal suspensions (brokers/suspensions.py), with the watch that carries out the
    cancel-open requests other processes write (its first pass: those left pending while no daemon ran)."""
    service = SuspensionService(
        SuspensionStore(db), lambda principal: cancel_principal_open(orders, principal), audit=trades_log.append
    )
    supervisor.start("trading-suspensions-watch", service.watch)
    return service


def market_data(settings: Settings, session: aiohttp.ClientSession) -> MarketData:
    """REST market data (Binance, Yahoo) for the quote, history and discovery tools."""
    return MarketData(
        session,
        binance_rest_url=settings.binance_rest_url,
        yahoo_url=settings.yahoo_url,
        timeout_s=settings.http_timeout_s,
        cache_ttl_s=settings.market_cache_ttl_s,
    )


def journal_limits(settings: Settings) -> JournalLimits:
    """The journal's byte limits (both storages)."""
    return JournalLimits(
        max_bytes_per_principal=settings.journal_max_bytes_per_principal, max_bytes=settings.journal_max_bytes
    )


def agent_settings(settings: Settings) -> AgentSettings:
    return AgentSettings(
        risk_free_rate=settings.risk_free_rate,
        risk_lookback_days=settings.risk_lookback_days,
        cache_ttl_s=settings.agent_cache_ttl_s,
        tool_groups=tuple(settings.tool_groups),
    )


def describe_endpoints(settings: Settings) -> dict[str, Any]:
    """Non-secret settings worth logging at start-up."""
    return {
        "binance_rest_url": settings.binance_rest_url,
        "yahoo_url": settings.yahoo_url,
        "data_dir": str(settings.resolved_data_dir()),
    }
