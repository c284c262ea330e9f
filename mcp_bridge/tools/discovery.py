"""get_exchanges and get_symbols: which venues this daemon can chart or follow, and their symbols.

Adapted from the chart-img seed for our own charts.  Exchanges are BINANCE (crypto: charts,
the live engine, orders), YAHOO (stocks and more: charts) and every ccxt.pro exchange, each
described by what the daemon really does with it: the live engine follows one with
``--exchange ID`` when ccxt.pro streams its candles, the ccxt broker sends orders to it
(its sandbox, or only with ``--live`` when ccxt has none), and generate_chart does not read
it (charts come from Binance and Yahoo).  Symbols come from
:class:`~engine.market_data.symbol_search.SymbolSearch` (exchangeInfo, Yahoo's search,
ccxt's load_markets; an hour's cache); both tools follow the agent convention.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import time
import weakref
from types import ModuleType

from pydantic import BaseModel, Field

from engine import MarketData, SymbolSearch, matches
from mcp_bridge.tools.agent_calls import (
    AgentArgs,
    AgentCall,
    AgentError,
    Code,
    SourcedData,
    agent_unit,
)
from mcp_bridge.tools.unit import READ_REMOTE, ToolContext

HOUR_S = 3600.0


class Exchange(BaseModel):
    id: str = Field(description="What get_symbols and construct_chart_config take (BINANCE, YAHOO, kraken, ...)")
    name: str
    type: str = Field(description="crypto or stock")
    description: str = Field(description="What this daemon does with it")
    capabilities: list[str] = Field(description="Some of: charts, live engine, orders, orders (live only)")


class ExchangesData(SourcedData):
    exchanges: list[Exchange]
    count: int


class GetExchangesArgs(AgentArgs):
    """No arguments besides tool_call_id."""


_BINANCE = Exchange(
    id="BINANCE",
    name="Binance",
    type="crypto",
    description=(
        "Binance spot. Charts: klines over REST (generate_chart source=binance, or auto for pairs such as "
        "BTCUSDT). Live engine: our own websocket stream manager (the default --exchange binance). Orders: "
        "broker=binance (testnet, or live with --live) or broker=ccxt with ccxt's binance class."
    ),
    capabilities=["charts", "live engine", "orders"],
)
_YAHOO = Exchange(
    id="YAHOO",
    name="Yahoo Finance",
    type="stock",
    description=(
        "Yahoo Finance charts of stocks, ETFs, indices (^GSPC), currencies (EURUSD=X) and futures (GC=F): "
        "generate_chart source=yahoo, or auto for tickers that are not crypto pairs. No live engine, no orders."
    ),
    capabilities=["charts"],
)

_exchanges_cache: tuple[float, list[Exchange], str] | None = None
_pro_ids: tuple[str, ...] | None = None


def _ccxt_pro() -> ModuleType:
    """ccxt.pro, imported on first use and off the event loop (callers run this in a thread): ccxt
    costs about 0.9 s of import (python -X importtime, 2-core VM), which every daemon start paid
    while it was imported at the top of this module, for two tools most sessions never call."""
    return importlib.import_module("ccxt.pro")


async def ccxt_pro_ids() -> tuple[str, ...]:
    """The exchange ids of ccxt.pro (imported in a thread on the first call)."""
    global _pro_ids
    if _pro_ids is None:
        _pro_ids = tuple((await asyncio.to_thread(_ccxt_pro)).exchanges)
    return _pro_ids


def _ccxt_entry(ccxtpro: ModuleType, exchange_id: str) -> Exchange | None:
    cls = getattr(ccxtpro, exchange_id, None)
    if cls is None:
        return None
    ex = cls()
    has = ex.has or {}
    caps: list[str] = []
    parts = [f"{ex.name} via ccxt.pro."]
    if has.get("watchOHLCV") and has.get("fetchOHLCV"):
        caps.append("live engine")
        parts.append(
            f"Live engine: --exchange {exchange_id} follows its spot markets (ccxt.pro watch_ohlcv streams, "
            "fetch_ohlcv backfill)."
        )
    else:
        parts.append("Live engine: no (ccxt.pro does not stream its candles).")
    if has.get("createOrder"):
        sandbox = bool((ex.urls or {}).get("test"))
        caps.append("orders" if sandbox else "orders (live only)")
        parts.append(
            f"Orders: broker=ccxt with ccxt_broker_exchange={exchange_id}"
            + (" (its sandbox unless --live)." if sandbox else ", only with --live (ccxt has no sandbox for it).")
        )
    parts.append("Charts: no (generate_chart reads Binance and Yahoo); get_symbols lists its spot markets.")
    return Exchange(id=exchange_id, name=ex.name, type="crypto", description=" ".join(parts), capabilities=caps)


def _build_exchanges() -> tuple[list[Exchange], str]:
    ccxtpro = _ccxt_pro()
    out = [_BINANCE, _YAHOO]
    for exchange_id in ccxtpro.exchanges:
        if exchange_id == "binance":
            continue  # BINANCE above (the daemon's own client; ccxt's class is one of its brokers)
        entry = _ccxt_entry(ccxtpro, exchange_id)
        if entry is not None:
            out.append(entry)
    return sorted(out, key=lambda e: (e.type, e.name.lower(), e.id)), f"ccxt:pro.exchanges@{ccxtpro.__version__}"


async def exchanges() -> tuple[list[Exchange], str]:
    """The exchange list (built at most once an hour, off the event loop) and its source ref."""
    global _exchanges_cache
    if _exchanges_cache is None or time.monotonic() >= _exchanges_cache[0]:
        built, ref = await asyncio.to_thread(_build_exchanges)
        _exchanges_cache = (time.monotonic() + HOUR_S, built, ref)
    return list(_exchanges_cache[1]), _exchanges_cache[2]


async def resolve_exchange(name: str) -> str:
    """``BINANCE``, ``YAHOO`` or a ccxt.pro id for a name in any case; INVALID_ARGUMENT otherwise."""
    key = name.strip()
    if key.upper() in ("BINANCE", "YAHOO"):
        return key.upper()
    pro_ids = await ccxt_pro_ids()
    if key.lower() in pro_ids:
        return key.lower()
    ids = ["BINANCE", "YAHOO", *(e for e in pro_ids if e != "binance")]
    close = difflib.get_close_matches(key.lower(), [i.lower() for i in ids], n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise AgentError(
        Code.INVALID_ARGUMENT,
        f"unknown exchange {name!r}: {hint}call get_exchanges for the list (BINANCE, YAHOO, "
        f"{', '.join(ids[2:8])}, … {len(ids)} in all)",
    )


async def get_exchanges(ctx: ToolContext, args: GetExchangesArgs, call: AgentCall) -> ExchangesData:
    listed, ref = await exchanges()
    call.cite(ref)
    call.cite("daemon:generate_chart sources binance,yahoo")
    return ExchangesData(exchanges=listed, count=len(listed))


class SymbolOut(BaseModel):
    symbol: str = Field(description="What generate_chart's ticker takes (BTCUSDT, AAPL)")
    fullSymbol: str = Field(description="EXCHANGE:SYMBOL")
    description: str
    type: str = Field(description="crypto, stock, etf, index, forex, futures, fund, ...")


class SymbolsData(SourcedData):
    exchange: str
    symbols: list[SymbolOut]
    count: int = Field(description="Symbols returned")
    total: int = Field(description="Symbols that matched before the limit")


class GetSymbolsArgs(AgentArgs):
    exchange: str = Field(min_length=1, max_length=40, description="An id from get_exchanges: BINANCE, YAHOO, kraken")
    search: str | None = Field(
        default=None,
        min_length=1,
        max_length=60,
        description="Case-insensitive text found in the symbol or its description (required for YAHOO)",
    )
    limit: int = Field(default=50, ge=1, le=500)


_searches: weakref.WeakKeyDictionary[MarketData, SymbolSearch] = weakref.WeakKeyDictionary()


def search_for(market: MarketData | None) -> SymbolSearch:
    """The symbol search over ``market``'s clients (one per MarketData, so its cache lasts)."""
    if market is None:
        raise AgentError(Code.NOT_AVAILABLE, "market data is not configured in this daemon")
    found = _searches.get(market)
    if found is None:
        found = _searches[market] = SymbolSearch(market.binance, yahoo=market.yahoo)
    return found


def use_search(market: MarketData, search: SymbolSearch) -> None:
    """Use ``search`` for ``market`` (tests point ccxt at the simulator this way)."""
    _searches[market] = search


async def get_symbols(ctx: ToolContext, args: GetSymbolsArgs, call: AgentCall) -> SymbolsData:
    exchange = await resolve_exchange(args.exchange)
    search = search_for(ctx.services.market)
    if exchange == "YAHOO":
        if not args.search:
            raise AgentError(
                Code.INVALID_ARGUMENT,
                "search: required for YAHOO (Yahoo has no symbol list; give a name or ticker, e.g. search='apple')",
            )
        listed = await search.yahoo(args.search, args.limit)
    elif exchange == "BINANCE":
        listed = await search.binance()
    else:
        listed = await search.ccxt(exchange)
    call.cite(listed.ref)
    hits = [s for s in listed.symbols if exchange == "YAHOO" or matches(s, args.search)]
    if args.search and exchange != "YAHOO":  # symbols that start with the text, then contain it, then the rest
        needle = args.search.strip().upper()
        hits.sort(key=lambda s: (not s.symbol.startswith(needle), needle not in s.symbol))
    shown = [SymbolOut(symbol=s.symbol, fullSymbol=s.full_symbol, description=s.description, type=s.type) for s in hits]
    return SymbolsData(
        exchange=exchange, symbols=shown[: args.limit], count=min(len(shown), args.limit), total=len(hits)
    )


UNITS = (
    agent_unit(
        name="get_exchanges",
        description=(
            "List the exchanges this daemon can chart or follow: BINANCE (crypto: charts, live engine, orders), "
            "YAHOO (stocks, indices, currencies: charts) and the ccxt.pro exchanges (live engine with --exchange, "
            "orders through the ccxt broker; not charted). Each with id, name, type and what works. Cached 1 h."
        ),
        args=GetExchangesArgs,
        data=ExchangesData,
        handler=get_exchanges,
        group="chart",
        annotations=READ_REMOTE,
        cache_ttl_s=HOUR_S,
    ),
    agent_unit(
        name="get_symbols",
        description=(
            "Symbols of one exchange from get_exchanges: BINANCE from exchangeInfo, YAHOO from Yahoo's search "
            "(search required), a ccxt exchange from its markets. Optional case-insensitive search on symbol and "
            "description; limit (default 50, max 500). Each with symbol (generate_chart's ticker), fullSymbol, "
            "description and type. Lists are cached 1 h."
        ),
        args=GetSymbolsArgs,
        data=SymbolsData,
        handler=get_symbols,
        group="chart",
        annotations=READ_REMOTE,
    ),
)
