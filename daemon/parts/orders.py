"""Building and running the broker side (``--trade``): the paper broker by default, the order
service above it, the tick feed for resting paper orders, and periodic reconciliation.

The order guard's first price source is the engine (:meth:`EngineQuotes.live_price`, a
look-up with no I/O), so an order on a followed symbol costs no ticker request; the
broker's REST ticker is its second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import aiohttp
import structlog

from brokers import (
    BinanceBroker,
    Broker,
    BrokerError,
    ExchangeOrder,
    OrderService,
    OrderStore,
    PaperBroker,
    SafetyLimits,
    SymbolRules,
    UserStream,
)
from config import Settings
from daemon.scheduler import DaemonScheduler, Job
from daemon.supervisor import Supervisor
from daemon.trades_log import TradesLog
from engine import LiveEngine, MarketDataError, SymbolDirectory, Tick, to_binance
from storage import Database

log = structlog.get_logger(__name__)

PRICE_WAIT_S = 10.0


class EngineQuotes:
    """Prices and exchange rules for brokers, from the live engine and exchangeInfo."""

    def __init__(self, engine: LiveEngine, directory: SymbolDirectory, interval: str) -> None:
        self.engine = engine
        self.directory = directory
        self.interval = interval
        self._rules: dict[str, SymbolRules] = {}

    async def rules(self, symbol: str) -> SymbolRules | None:
        cached = self._rules.get(symbol)
        if cached is not None:
            return cached
        try:
            entry = await self.directory.entry(symbol)
        except MarketDataError:
            return None
        if entry is None:
            return None
        rules = self._rules[symbol] = SymbolRules.from_exchange_info(entry)
        return rules

    def live_price(self, symbol: str) -> Decimal | None:
        """The engine's last trade of ``symbol`` while one of its streams is connected, else None.

        A price kept from a stream that has since dropped is not offered: the guard then asks
        the ticker rather than value an order at a price that may be old.
        """
        name = symbol.upper()
        if not any(key[0] == name and st.live_since is not None for key, st in self.engine.sync.windows.items()):
            return None
        last = self.engine.last_price(name)
        return None if last is None else Decimal(str(last))

    async def price(self, symbol: str) -> Decimal | None:
        """The engine's last price; a symbol not followed yet is followed and its first price awaited."""
        last = self.engine.last_price(symbol)
        if last is None:
            if not self.engine.follows(symbol, self.interval):
                self.engine.follow(symbol, self.interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PRICE_WAIT_S):
                    await self.engine.wait_until(lambda: self.engine.last_price(symbol) is not None)
            last = self.engine.last_price(symbol)
        return None if last is None else Decimal(str(last))


async def feed_paper_ticks(engine: LiveEngine, broker: PaperBroker) -> None:
    """Resting paper limit orders fill when a tick reaches them (supervised task)."""
    sub = engine.subscribe([Tick])
    try:
        async for event in sub:
            if isinstance(event, Tick) and event.symbol in broker.resting_symbols():
                await broker.on_price(event.symbol, Decimal(str(event.price)))
    finally:
        sub.close()


def _order_service(
    broker: Broker, db: Database, quotes: EngineQuotes, trades_log: TradesLog, limits: SafetyLimits
) -> OrderService:
    """The order service over any broker, its guard priced by the engine first."""
    return OrderService(
        broker,
        OrderStore(db),
        audit=trades_log.append,
        mark_price=quotes.engine.last_price,
        limits=limits,
        engine_price=quotes.live_price,
    )


def _exchange_service(
    settings: Settings,
    broker: Broker,
    db: Database,
    quotes: EngineQuotes,
    trades_log: TradesLog,
    limits: SafetyLimits,
) -> OrderService:
    """The order service over an exchange broker (Binance or ccxt)."""
    service = _order_service(broker, db, quotes, trades_log, limits)
    service.unresolved_grace_s = settings.order_unresolved_grace_s
    return service


async def _first_reconcile(service: OrderService, before: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Reconcile at start-up; an unreachable exchange leaves the daemon up, degraded (see /readyz)."""
    try:
        if before is not None:
            await before()
        await service.reconcile()
    except BrokerError as exc:
        log.error("broker_start_degraded", broker=service.broker.name, error=str(exc))


class BrokerChoiceError(ValueError):
    """The broker settings cannot be honoured (missing keys, mainnet without --live)."""


def choose_broker(settings: Settings) -> str:
    """paper, binance or ccxt, from the settings (see Settings.broker)."""
    if settings.broker == "paper":
        return "paper"
    if settings.broker == "ccxt":
        if settings.ccxt_keys() is None:
            raise BrokerChoiceError("broker=ccxt needs ccxt_api_key and ccxt_api_secret (CHARTGEN_CCXT_API_KEY/SECRET)")
        return "ccxt"
    keys = settings.binance_keys()
    mainnet = "api.binance.com" in settings.binance_rest_url
    if keys is None:
        if settings.broker == "binance":
            raise BrokerChoiceError("broker=binance needs BINANCE_API_KEY and BINANCE_API_SECRET (or --sim)")
        return "paper"
    if mainnet and not settings.live:
        if settings.broker == "binance":
            raise BrokerChoiceError("orders on Binance mainnet need --live; use --testnet for the spot testnet")
        log.warning("mainnet_keys_ignored", reason="mainnet trading needs --live; using the paper broker")
        return "paper"
    return "binance"


@contextlib.asynccontextmanager
async def running_orders(
    settings: Settings,
    *,
    db: Database,
    engine: LiveEngine,
    directory: SymbolDirectory,
    supervisor: Supervisor,
    trades_log: TradesLog,
    session: aiohttp.ClientSession,
    scheduler: DaemonScheduler,
) -> AsyncIterator[OrderService]:
    quotes = EngineQuotes(engine, directory, to_binance(settings.intervals[0]) if settings.intervals else "1m")
    limits = SafetyLimits(
        max_order_notional=settings.trading_max_order_notional,
        max_daily_notional=settings.trading_max_daily_notional,
        allowed_symbols=frozenset(settings.trading_allowed_symbols),
    )
    choice = choose_broker(settings)
    if choice == "binance":
        async with _binance_orders(settings, quotes, db, supervisor, scheduler, trades_log, limits, session) as service:
            yield service
        return
    if choice == "ccxt":
        async with _ccxt_orders(settings, quotes, db, scheduler, trades_log, limits) as service:
            yield service
        return
    broker = PaperBroker(
        db,
        rules=quotes.rules,
        price=quotes.price,
        starting_balances=dict(settings.paper_balances),
        fee_rate=settings.paper_fee_rate,
        slippage=settings.paper_slippage,
    )
    await broker.start()
    service = _order_service(broker, db, quotes, trades_log, limits)
    await service.reconcile()
    supervisor.start("paper-ticks", lambda: feed_paper_ticks(engine, broker))
    scheduler.every("order-reconcile", settings.reconcile_interval_s, _reconcile(service))
    log.info("broker_ready", broker=broker.name)
    yield service


def _reconcile(service: OrderService) -> Job:
    async def run() -> None:
        await service.reconcile()

    return run


def broker_readiness(service: OrderService | None) -> list[str]:
    """Degraded-state reasons of the broker side: a failing reconciliation, a lost user-data stream."""
    if service is None:
        return []
    reasons = [] if service.reconcile_error is None else [f"broker: reconciliation failing ({service.reconcile_error})"]
    stream = getattr(service, "user_stream", None)
    if stream is not None and not stream.connected:
        reasons.append("broker: user-data stream disconnected (fills are learnt by reconciliation until it is back)")
    return reasons


@contextlib.asynccontextmanager
async def _binance_orders(
    settings: Settings,
    quotes: EngineQuotes,
    db: Database,
    supervisor: Supervisor,
    scheduler: DaemonScheduler,
    trades_log: TradesLog,
    limits: SafetyLimits,
    session: aiohttp.ClientSession,
) -> AsyncIterator[OrderService]:
    keys = settings.binance_keys()
    assert keys is not None
    broker = BinanceBroker(api_key=keys[0], api_secret=keys[1], rest_url=settings.binance_rest_url)
    try:
        service = _exchange_service(settings, broker, db, quotes, trades_log, limits)
        await _first_reconcile(service, before=broker.sync_time)

        async def on_order(update: ExchangeOrder) -> None:  # the stream's handler returns nothing; the row is unused
            await service.on_update(update)

        stream = UserStream(
            session,
            settings.binance_ws_api_url,
            api_key=keys[0],
            api_secret=keys[1],
            on_order=on_order,
            on_list=service.lists.on_list_update,
            on_resubscribed=service.reconcile,
            time_offset_ms=broker.time_offset_ms,
        )
        supervisor.start("binance-user-stream", stream.run)
        scheduler.every("binance-time-sync", 300.0, _discard(broker.sync_time))
        scheduler.every("order-reconcile", settings.reconcile_interval_s, _reconcile(service))
        service.user_stream = stream  # type: ignore[attr-defined]  # brokers' OrderService declares none; readiness getattr()s it
        log.info("broker_ready", broker=broker.name, rest=settings.binance_rest_url)
        yield service
    finally:
        # before the session it runs on closes: the end of its connection is a stop, not a crash
        await supervisor.stop("binance-user-stream")
        await broker.close()


@contextlib.asynccontextmanager
async def _ccxt_orders(
    settings: Settings,
    quotes: EngineQuotes,
    db: Database,
    scheduler: DaemonScheduler,
    trades_log: TradesLog,
    limits: SafetyLimits,
) -> AsyncIterator[OrderService]:
    """Orders on a ccxt exchange: its sandbox unless --live; reconciled at start and periodically.

    ccxt has no user-data stream common to all exchanges, so fills are learnt by the
    periodic reconciliation (``reconcile_interval_s``) and by querying after each order.
    """
    # imported here, not at the top: ccxt costs about 0.9 s of every daemon start (python -X importtime,
    # 2-core VM) and only a daemon trading through ccxt needs it
    from brokers import CcxtBroker, build_exchange

    keys = settings.ccxt_keys()
    assert keys is not None
    urls = None
    if settings.ccxt_api_url:
        urls = {"public": settings.ccxt_api_url, "private": settings.ccxt_api_url}
    try:
        exchange = build_exchange(
            settings.ccxt_broker_exchange, api_key=keys[0], secret=keys[1], sandbox=not settings.live, urls=urls
        )
    except Exception as exc:  # ccxt raises NotSupported when an exchange has no sandbox
        raise BrokerChoiceError(
            f"cannot use {settings.ccxt_broker_exchange!r} for orders: {exc} (orders without a sandbox need --live)"
        ) from exc
    broker = CcxtBroker(exchange)
    try:
        service = _exchange_service(settings, broker, db, quotes, trades_log, limits)
        await _first_reconcile(service)
        scheduler.every("order-reconcile", settings.reconcile_interval_s, _reconcile(service))
        log.info("broker_ready", broker=broker.name, sandbox=not settings.live and urls is None)
        yield service
    finally:
        await broker.close()


def _discard(job: Job) -> Job:
    async def run() -> None:
        await job()

    return run
