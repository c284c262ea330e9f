"""Current quotes of crypto pairs and stocks: the live engine's price, Binance's 24 h ticker, Yahoo's chart meta.

This module owns :class:`Quote` and :class:`QuoteSource` (used by the get_quotes tool and by
trade_simulate).  Where a quote comes from:

- A crypto pair (:func:`~engine.market_data.source.is_crypto`) the live engine follows: the
  price and its time are the engine's latest trade and the exchange's event time (on a cluster
  front, whose ``engine`` is the workers' ticks on NATS, cluster/bus_prices.py: the newest tick
  and its exchange time, the source named by its ``price_ref``); change,
  change_percent and volume come from Binance's 24 h ticker (change against its ``openPrice``,
  the price 24 h ago).  Ticker rows are fetched for every symbol that needs one in a single
  ``GET /api/v3/ticker/24hr?symbols=[...]`` and kept for ``ticker_ttl_s`` (60 s), so quoting
  followed pairs costs no network round trip while their rows are fresh.
- A crypto pair the engine does not follow: everything from the 24 h ticker (lastPrice,
  priceChange, priceChangePercent, volume, closeTime); its row is refetched after
  ``price_ttl_s`` (2 s) so its price is never older than that.
- Anything else: Yahoo's chart endpoint meta (regularMarketPrice against previousClose or
  chartPreviousClose, regularMarketVolume, regularMarketTime and the regular session's
  start/end for :attr:`Quote.market_open`).

An unknown symbol raises :class:`MarketDataError` with status 400 (Binance) or 404 (Yahoo)
whose message names it and the fix; a failed request raises MarketDataError (no status, or
the venue's), and Binance's 429/418 raise :class:`~engine.market_data.errors.RateLimited`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import orjson
import structlog

from engine.market_data.errors import MarketDataError, RateLimited
from engine.market_data.source import MarketData, is_crypto
from engine.market_data.ttl_cache import TtlCache

log = structlog.get_logger(__name__)

TICKER_PATH = "/api/v3/ticker/24hr"
TICKER_WEIGHT_PER_SYMBOL = 2


@dataclass(frozen=True, slots=True)
class Quote:
    """One symbol's current price and its change over the last day."""

    symbol: str
    price: float
    change: float
    """Price minus the reference: the 24 h ticker's openPrice (crypto) or the previous close (stocks)."""
    change_percent: float
    volume: float
    """Base-asset volume of the last 24 h (crypto) or shares traded in the regular session (stocks)."""
    timestamp: float
    """When ``price`` was current, epoch seconds (the exchange's clock)."""
    source_ref: str
    """Where ``price`` came from (``engine:…``, ``binance:GET …@time`` or ``yahoo:GET …@time``)."""
    market_open: bool | None = None
    """Whether the regular session is open now (stocks); None for crypto, which always trades."""
    extra_refs: tuple[str, ...] = ()
    """Further sources the quote used (the 24 h ticker behind a live engine price's change)."""

    @property
    def refs(self) -> tuple[str, ...]:
        return (self.source_ref, *self.extra_refs)


def iso_utc(ts: float) -> str:
    """Epoch seconds as UTC ISO-8601 with milliseconds and a Z."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def normalise(symbol: str) -> str:
    """Crypto pairs in upper case (Binance's spelling); other tickers as given, trimmed."""
    s = symbol.strip()
    return s.upper() if is_crypto(s) else s


def _num(row: dict[str, Any], key: str, where: str) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise MarketDataError(f"{where} answer has no usable {key!r}") from exc


@dataclass(frozen=True, slots=True)
class _TickerRow:
    fetched: float  # time.monotonic() when it arrived
    row: dict[str, Any]
    ref: str


async def yahoo_chart_json(market: MarketData, symbol: str, params: dict[str, str]) -> tuple[dict[str, Any], str]:
    """GET Yahoo's ``/v8/finance/chart/{symbol}`` with ``params``: its decoded ``result[0]`` and the ref.

    404 (Yahoo's "No data found, symbol may be delisted") raises MarketDataError status 404;
    400/422 (an interval Yahoo refuses for that range) raise it with that status and Yahoo's
    description; 429 raises RateLimited; anything else unexpected raises it without status.
    """
    path = f"/v8/finance/chart/{symbol}"
    ref = f"yahoo:GET {path}?{urlencode(params)}@{iso_utc(time.time())}"
    status, body = await market.yahoo.get(path, params)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    chart = data.get("chart") if isinstance(data, dict) else None
    err = chart.get("error") if isinstance(chart, dict) else None
    detail = err.get("description") if isinstance(err, dict) else None
    if status == 429:
        raise RateLimited("Yahoo answered HTTP 429 (rate limit); retry in a minute", retry_after_s=60.0)
    if status == 404 or (status == 200 and err):
        raise MarketDataError(
            f"unknown symbol {symbol!r}: Yahoo has no data for it ({detail or 'not found'}); check the ticker "
            "(e.g. AAPL, ^GSPC, EURUSD=X) or find it with get_symbols exchange=YAHOO",
            status=404,
        )
    if status in (400, 422):
        raise MarketDataError(f"Yahoo refused the request for {symbol}: {detail or f'HTTP {status}'}", status=status)
    if status != 200:
        raise MarketDataError(f"Yahoo API returned status {status}" + (f": {detail}" if detail else ""))
    try:
        if not isinstance(chart, dict):
            raise TypeError
        result = chart["result"][0]
        if not isinstance(result, dict):
            raise TypeError
    except (KeyError, IndexError, TypeError) as exc:
        raise MarketDataError(f"Yahoo chart answer for {symbol} has an unexpected shape") from exc
    return result, ref


class QuoteSource:
    """Quotes for any mix of crypto pairs and stocks; create one per daemon (its ticker cache lives here)."""

    def __init__(
        self,
        market: MarketData,
        engine: Any | None,
        *,
        ticker_ttl_s: float = 60.0,
        price_ttl_s: float = 2.0,
    ) -> None:
        self.market = market
        self.engine = engine
        self.ticker_ttl_s = ticker_ttl_s
        self.price_ttl_s = price_ttl_s
        self._tickers: dict[str, _TickerRow] = {}
        self._ticker_lock = asyncio.Lock()
        self._yahoo: TtlCache[Quote] = TtlCache(price_ttl_s, max_entries=1024)

    async def quote(self, symbol: str) -> Quote:
        return (await self.quotes([symbol]))[0]

    async def quotes(self, symbols: list[str]) -> list[Quote]:
        """One quote per symbol, in the order given (duplicates answered once each)."""
        names = [normalise(s) for s in symbols]
        crypto = [s for s in dict.fromkeys(names) if is_crypto(s)]
        stocks = [s for s in dict.fromkeys(names) if not is_crypto(s)]
        found: dict[str, Quote] = {}
        if stocks:
            got = await asyncio.gather(*(self._stock(s) for s in stocks))
            found.update(zip(stocks, got, strict=True))
        if crypto:
            found.update(await self._crypto(crypto))
        return [found[s] for s in names]

    # --- crypto ------------------------------------------------------------------------
    def _live(self, symbol: str) -> tuple[float, int] | None:
        """The engine's price and exchange time of ``symbol`` when it follows it."""
        engine = self.engine
        if engine is None:
            return None
        price = engine.last_price(symbol)
        at_ms = engine.exchange_time_ms(symbol)
        if price is None or at_ms is None:
            return None
        return float(price), int(at_ms)

    def _fresh(self, symbol: str, now: float, live: bool) -> _TickerRow | None:
        row = self._tickers.get(symbol)
        ttl = self.ticker_ttl_s if live else self.price_ttl_s
        if row is None or now - row.fetched >= ttl:
            return None
        return row

    async def _crypto(self, symbols: list[str]) -> dict[str, Quote]:
        live = {s: self._live(s) for s in symbols}
        rows = await self._ticker_rows(symbols, {s for s, p in live.items() if p is not None})
        out: dict[str, Quote] = {}
        for s in symbols:
            t = rows[s]
            lp = live[s]
            if lp is not None:
                price, at_ms = lp
                open_price = _num(t.row, "openPrice", "Binance 24 h ticker")
                change = price - open_price
                pct = change / open_price * 100.0 if open_price else 0.0
                ref = self._live_ref(s, at_ms)
                volume = _num(t.row, "volume", "Binance 24 h ticker")
                out[s] = Quote(s, price, change, pct, volume, at_ms / 1000, ref, None, (t.ref,))
            else:
                out[s] = Quote(
                    symbol=s,
                    price=_num(t.row, "lastPrice", "Binance 24 h ticker"),
                    change=_num(t.row, "priceChange", "Binance 24 h ticker"),
                    change_percent=_num(t.row, "priceChangePercent", "Binance 24 h ticker"),
                    volume=_num(t.row, "volume", "Binance 24 h ticker"),
                    timestamp=_num(t.row, "closeTime", "Binance 24 h ticker") / 1000,
                    source_ref=t.ref,
                    market_open=None,
                )
        return out

    def _live_ref(self, symbol: str, at_ms: int) -> str:
        named = getattr(self.engine, "price_ref", None)
        if named is not None:
            return str(named(symbol, at_ms))
        return f"engine:{symbol}/{self._followed_interval(symbol)}@{iso_utc(at_ms / 1000)}"

    def _followed_interval(self, symbol: str) -> str:
        markets = getattr(self.engine, "markets", None) or []
        return next((iv for sym, iv in markets if sym == symbol), "stream")

    async def _ticker_rows(self, symbols: list[str], live: set[str]) -> dict[str, _TickerRow]:
        """Fresh-enough ticker rows for ``symbols``; the missing ones fetched in one request."""
        now = time.monotonic()
        have = {s: r for s in symbols if (r := self._fresh(s, now, s in live)) is not None}
        if len(have) == len(symbols):
            return have
        async with self._ticker_lock:  # one request at a time; a waiter may find its rows fetched
            now = time.monotonic()
            have = {s: r for s in symbols if (r := self._fresh(s, now, s in live)) is not None}
            need = [s for s in symbols if s not in have]
            if need:
                have.update(await self._fetch_tickers(need))
        return have

    async def _fetch_tickers(self, symbols: list[str]) -> dict[str, _TickerRow]:
        rest = self.market.binance
        query = {"symbols": orjson.dumps(symbols).decode()}
        ref = f"binance:GET {TICKER_PATH}?symbols={query['symbols']}@{iso_utc(time.time())}"
        try:
            data = await rest.get(TICKER_PATH, query, weight=self._weight(len(symbols)))
        except RateLimited:
            raise
        except MarketDataError as exc:
            if exc.status == 400:
                await self._name_invalid(symbols, exc)
            raise
        rows = data if isinstance(data, list) else [data]
        fetched = time.monotonic()
        got: dict[str, _TickerRow] = {}
        for row in rows:
            if isinstance(row, dict) and isinstance(row.get("symbol"), str):
                got[row["symbol"]] = self._tickers[row["symbol"]] = _TickerRow(fetched, row, ref)
        missing = [s for s in symbols if s not in got]
        if missing:
            raise MarketDataError(_unknown_crypto(missing), status=400)
        log.debug("ticker_fetched", symbols=len(symbols))
        return got

    @staticmethod
    def _weight(n: int) -> int:
        return 2 if n <= 20 else 40 if n <= 100 else 80

    async def _name_invalid(self, symbols: list[str], exc: MarketDataError) -> None:
        """Binance refused the batch (one bad name refuses all): find the bad names and say which."""
        if len(symbols) == 1:
            raise MarketDataError(_unknown_crypto(symbols), status=400) from exc
        rest = self.market.binance

        async def bad(s: str) -> bool:
            try:
                await rest.get(TICKER_PATH, {"symbol": s}, weight=TICKER_WEIGHT_PER_SYMBOL)
            except MarketDataError as one:
                return one.status == 400
            return False

        flags = await asyncio.gather(*(bad(s) for s in symbols))
        invalid = [s for s, f in zip(symbols, flags, strict=True) if f]
        if invalid:
            raise MarketDataError(_unknown_crypto(invalid), status=400) from exc

    # --- stocks ------------------------------------------------------------------------
    async def _stock(self, symbol: str) -> Quote:
        return await self._yahoo.get_or_fetch(symbol, lambda: self._fetch_stock(symbol))

    async def _fetch_stock(self, symbol: str) -> Quote:
        result, ref = await yahoo_chart_json(self.market, symbol, {"range": "1d", "interval": "1d"})
        meta = result.get("meta")
        if not isinstance(meta, dict):
            raise MarketDataError(f"Yahoo chart answer for {symbol} has no meta")
        price = _num(meta, "regularMarketPrice", f"Yahoo chart of {symbol}")
        prev_raw = meta.get("previousClose") or meta.get("chartPreviousClose")
        prev = float(prev_raw) if isinstance(prev_raw, int | float) and prev_raw else None
        change = price - prev if prev else 0.0
        pct = change / prev * 100.0 if prev else 0.0
        volume = float(meta.get("regularMarketVolume") or 0.0)
        at = float(meta.get("regularMarketTime") or time.time())
        return Quote(symbol, price, change, pct, volume, at, ref, _session_open(meta, time.time()))


def _session_open(meta: dict[str, Any], now: float) -> bool | None:
    """Whether ``now`` is inside meta.currentTradingPeriod.regular (None when Yahoo does not say)."""
    period = meta.get("currentTradingPeriod")
    regular = period.get("regular") if isinstance(period, dict) else None
    if not isinstance(regular, dict):
        return None
    start, end = regular.get("start"), regular.get("end")
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return None
    return bool(start <= now < end)


def _unknown_crypto(symbols: list[str]) -> str:
    names = ", ".join(symbols)
    return (
        f"unknown symbol {names}: Binance has no such spot pair; check the spelling (e.g. BTCUSDT, ETHUSDT) "
        "or list pairs with get_symbols exchange=BINANCE"
    )
