"""get_quotes and get_history: current quotes and price history for crypto pairs and stocks.

Both follow the agent convention (:mod:`mcp_bridge.tools.agent_calls`: tool_call_id,
source_refs, the seed's error codes).  The work is done by
:class:`~engine.market_data.quotes.QuoteSource` and
:class:`~engine.market_data.history.HistorySource`, one of each per daemon (kept here per
MarketData, rebuilt if the services' engine changes), so their caches outlive a call.

Caching, and why it differs between the two tools:

- get_quotes has no result cache (``cache_ttl_s=None``): a cached answer would freeze the
  live engine's price.  Its own caches do the "avoid duplicate calls" work instead: the 24 h
  ticker rows behind a followed pair's change and volume are kept 60 s (no request on the
  hot path), and a price that comes over REST (a pair the engine does not follow, a stock)
  is reused for the daemon's ``agent_cache_ttl_s`` (``services.agent.cache_ttl_s``), citing
  the request that fetched it and its time.
- get_history uses the convention's result cache with a constant 30 s (agent_unit takes a
  constant): history changes only in its forming last bar, so an identical call within 30 s
  is answered from cache, citing the call that fetched it.
"""

from __future__ import annotations

import weakref
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, WithJsonSchema

from engine import MAX_ROWS, HistoryArgumentError, HistorySource, MarketData, QuoteSource, iso_utc
from mcp_bridge.tools.agent_calls import AgentArgs, AgentCall, AgentError, Code, SourcedData, agent_unit
from mcp_bridge.tools.context import Services
from mcp_bridge.tools.unit import READ_REMOTE, ToolContext

HISTORY_CACHE_TTL_S = 30.0
TICKER_TTL_S = 60.0


Symbol = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=32, pattern=r"^[A-Za-z0-9.^=_\-]+$"),
]
QuoteField = Literal["price", "change", "change_percent", "volume", "timestamp"]
Period = Literal["1d", "5d", "1mo", "3mo", "6mo", "1y", "2y", "5y", "10y", "ytd", "max"]
Interval = Literal["1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk", "1mo", "3mo"]


class GetQuotesArgs(AgentArgs):
    symbols: list[Symbol] = Field(
        min_length=1, max_length=100, description="1 to 100 tickers: crypto pairs (BTCUSDT) and/or stocks (AAPL)"
    )
    fields: list[QuoteField] | None = Field(
        default=None,
        min_length=1,
        description="Only these fields besides symbol (price, change, change_percent, volume, timestamp); default all",
    )


def _optional(description: str) -> Any:
    """A quote field ``fields`` may leave out: absent from the answer then, never null."""
    return Field(default=None, exclude_if=lambda v: v is None, description=description)


Number = Annotated[float | None, WithJsonSchema({"type": "number"})]
Text = Annotated[str | None, WithJsonSchema({"type": "string"})]


class QuoteOut(BaseModel):
    """One quote; a field left out by ``fields`` is absent (never null)."""

    symbol: str
    price: Number = _optional("Last price")
    change: Number = _optional("price minus the price 24 h ago (crypto) or the previous close (stocks)")
    change_percent: Number = _optional("change as a percentage of that reference price")
    volume: Number = _optional("24 h base-asset volume (crypto), the session's volume (stocks)")
    timestamp: Text = _optional("When price was current, ISO-8601 UTC")


class QuotesData(SourcedData):
    quotes: list[QuoteOut]


class GetHistoryArgs(AgentArgs):
    symbol: Symbol = Field(description="A crypto pair (BTCUSDT) or a stock ticker (AAPL)")
    period: Period = Field(description="1d, 5d, 1mo, 3mo, 6mo, 1y, 2y, 5y, 10y, ytd or max")
    interval: Interval | None = Field(
        default=None,
        description="Bar interval; default by period: 1d→5m, 5d→15m, 1mo→1h, 3mo–2y and ytd→1d, 5y/10y/max→1wk",
    )


class HistoryRowOut(BaseModel):
    timestamp: str = Field(description="Bar open time, ISO-8601 UTC")
    open: float
    high: float
    low: float
    close: float
    volume: float
    adjusted_close: float


class HistoryData(SourcedData):
    history: list[HistoryRowOut]


_sources: weakref.WeakKeyDictionary[MarketData, tuple[Any, QuoteSource, HistorySource]] = weakref.WeakKeyDictionary()


def sources(services: Services) -> tuple[QuoteSource, HistorySource]:
    """The daemon's QuoteSource and HistorySource (made once per MarketData and engine); quotes priced
    by the live engine, else a cluster front's prices from NATS (:attr:`Services.live_prices`)."""
    market = services.market
    if market is None:
        raise AgentError(Code.NOT_AVAILABLE, "market data is not configured in this daemon (run chartgen --serve)")
    live = services.engine if services.engine is not None else services.live_prices
    held = _sources.get(market)
    if held is None or held[0] is not live:
        quotes = QuoteSource(market, live, ticker_ttl_s=TICKER_TTL_S, price_ttl_s=max(0.0, services.agent.cache_ttl_s))
        held = _sources[market] = (live, quotes, HistorySource(market, services.engine))
    return held[1], held[2]


async def get_quotes(ctx: ToolContext, args: GetQuotesArgs, call: AgentCall) -> QuotesData:
    quotes, _ = sources(ctx.services)
    got = await quotes.quotes(list(args.symbols))
    wanted = set(args.fields) if args.fields else None
    out: list[QuoteOut] = []
    for q in got:
        for ref in q.refs:
            call.cite(ref)
        full = {
            "price": q.price,
            "change": q.change,
            "change_percent": q.change_percent,
            "volume": q.volume,
            "timestamp": iso_utc(q.timestamp),
        }
        kept = {k: v for k, v in full.items() if wanted is None or k in wanted}
        out.append(QuoteOut.model_validate({"symbol": q.symbol, **kept}))
    return QuotesData(quotes=out)


async def get_history(ctx: ToolContext, args: GetHistoryArgs, call: AgentCall) -> HistoryData:
    _, history = sources(ctx.services)
    try:
        got = await history.history(args.symbol, args.period, args.interval)
    except HistoryArgumentError as exc:
        raise AgentError(Code.INVALID_ARGUMENT, str(exc)) from exc
    for ref in got.refs:
        call.cite(ref)
    rows = [
        HistoryRowOut(
            timestamp=iso_utc(r.timestamp),
            open=r.open,
            high=r.high,
            low=r.low,
            close=r.close,
            volume=r.volume,
            adjusted_close=r.adjusted_close,
        )
        for r in got.rows
    ]
    return HistoryData(history=rows)


UNITS = (
    agent_unit(
        name="get_quotes",
        description=(
            "Current quotes for 1-100 symbols: crypto pairs (BTCUSDT) and stocks (AAPL). Crypto the live engine "
            "follows: price and timestamp are the engine's latest trade and the exchange's event time; change, "
            "change_percent (against the price 24 h ago, the 24 h ticker's openPrice) and volume (24 h, base asset) "
            "from Binance's 24 h ticker (one request for all symbols, kept 60 s). Other crypto: all from the 24 h "
            "ticker. Stocks: Yahoo Finance chart meta, change against the previous close, the session's volume. "
            "fields limits each quote to symbol plus those fields. Unknown symbol: INVALID_SYMBOL. tool_call_id "
            "and data.source_refs follow the convention (refs name the engine window or each REST request and its "
            "time)."
        ),
        args=GetQuotesArgs,
        data=QuotesData,
        handler=get_quotes,
        group="portfolio",
        annotations=READ_REMOTE,
        cache_ttl_s=None,
    ),
    agent_unit(
        name="get_history",
        description=(
            "OHLCV history of one symbol over a period (1d, 5d, 1mo, 3mo, 6mo, 1y, 2y, 5y, 10y, ytd, max) at an "
            "interval (default by period: 1d→5m, 5d→15m, 1mo→1h, 3mo-2y and ytd→1d, 5y/10y/max→1wk). Crypto: "
            "Binance klines from the period start to now (paged 1000 a request; from the live engine's window "
            "when it follows the pair at that interval and reaches back far enough), adjusted_close = close; "
            "intervals 2m, 90m, 5d, 3mo are not available for crypto. Stocks: Yahoo Finance chart, adjusted_close "
            "from Yahoo's adjclose (close when Yahoo sends none, noted in source_refs), null rows dropped; Yahoo "
            f"serves 1m for 7 days, 2m-90m for 60 days, 1h for 2 years. At most {MAX_ROWS} rows: a longer request "
            f"is refused (INVALID_ARGUMENT naming a coarser interval), period max keeps the newest {MAX_ROWS}. The "
            "last row may be a bar still forming. Identical calls within 30 s are answered from cache. "
            "tool_call_id and data.source_refs follow the convention (each REST request and its time)."
        ),
        args=GetHistoryArgs,
        data=HistoryData,
        handler=get_history,
        group="portfolio",
        annotations=READ_REMOTE,
        cache_ttl_s=HISTORY_CACHE_TTL_S,
    ),
)
