"""Which symbols an exchange offers, searchable, cached for an hour: Binance, Yahoo and ccxt venues.

- Binance: ``GET /api/v3/exchangeInfo`` through :class:`BinanceRest` (weight 20), every
  TRADING symbol with its base and quote asset;
- Yahoo: the search endpoint ``GET /v1/finance/search?q=…`` (Yahoo has no full symbol
  list, so a search text is needed), cached per query;
- any ccxt.pro exchange: ccxt's ``load_markets`` on a key-less exchange (spot markets that
  are not marked inactive), the symbol written as our engine writes it (``BTCUSDT``).

Every answer carries the REST request it came from and when it was made (``ref``), so a
tool can cite it; a cached answer keeps the original request's time.  Descriptions read
``Bitcoin / TetherUS`` for assets of :data:`ASSET_NAMES`, else ``BASE / QUOTE``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import orjson
import structlog

from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError
from engine.market_data.yahoo import YahooChart

log = structlog.get_logger(__name__)

TTL_S = 3600.0
EXCHANGE_INFO_WEIGHT = 20
YAHOO_SEARCH_PATH = "/v1/finance/search"

ASSET_NAMES: dict[str, str] = {
    "BTC": "Bitcoin",
    "ETH": "Ethereum",
    "SOL": "Solana",
    "BNB": "BNB",
    "XRP": "XRP",
    "ADA": "Cardano",
    "DOGE": "Dogecoin",
    "DOT": "Polkadot",
    "AVAX": "Avalanche",
    "LINK": "Chainlink",
    "LTC": "Litecoin",
    "TRX": "TRON",
    "SHIB": "Shiba Inu",
    "UNI": "Uniswap",
    "ATOM": "Cosmos",
    "NEAR": "NEAR Protocol",
    "APT": "Aptos",
    "ARB": "Arbitrum",
    "SUI": "Sui",
    "PEPE": "Pepe",
    "TON": "Toncoin",
    "XLM": "Stellar",
    "BCH": "Bitcoin Cash",
    "ETC": "Ethereum Classic",
    "FIL": "Filecoin",
    "OP": "Optimism",
    "INJ": "Injective",
    "USDT": "TetherUS",
    "USDC": "USD Coin",
    "FDUSD": "First Digital USD",
    "BUSD": "BUSD",
    "DAI": "Dai",
    "EUR": "Euro",
    "USD": "US Dollar",
}
"""Display names of well-known assets (Binance's own wording where it has one, e.g. TetherUS)."""

_YAHOO_TYPES = {
    "EQUITY": "stock",
    "ETF": "etf",
    "INDEX": "index",
    "CRYPTOCURRENCY": "crypto",
    "CURRENCY": "forex",
    "FUTURE": "futures",
    "MUTUALFUND": "fund",
}


@dataclass(frozen=True, slots=True)
class SymbolInfo:
    """One symbol of an exchange."""

    symbol: str
    full_symbol: str
    description: str
    type: str


@dataclass(frozen=True, slots=True)
class SymbolList:
    """Symbols of one exchange (or one Yahoo search) and the request they came from."""

    exchange: str
    symbols: tuple[SymbolInfo, ...]
    ref: str
    """``venue:GET path?query@ISO-time`` of the request that fetched them."""


def describe_pair(base: str, quote: str) -> str:
    """``Bitcoin / TetherUS`` for known assets, else ``BASE / QUOTE``."""
    return f"{ASSET_NAMES.get(base.upper(), base.upper())} / {ASSET_NAMES.get(quote.upper(), quote.upper())}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _compact(s: str) -> str:
    return "".join(ch for ch in s if ch.isalnum()).upper()


def matches(info: SymbolInfo, search: str | None) -> bool:
    """Case-insensitive substring of the symbol or the description."""
    if not search:
        return True
    needle = search.strip().lower()
    return needle in info.symbol.lower() or needle in info.description.lower()


def default_ccxt_factory(exchange_id: str) -> Any:
    """A key-less ccxt.pro exchange with ccxt's own URLs (what ``--exchange ID`` uses)."""
    from engine.feed.ccxt_feed import build_pro_exchange

    return build_pro_exchange(exchange_id)


class SymbolSearch:
    """Symbol lists per exchange, each fetched at most once per ``ttl_s`` (concurrent callers share it)."""

    def __init__(
        self,
        binance: BinanceRest | None,
        *,
        yahoo: YahooChart | None = None,
        ccxt_factory: Callable[[str], Any] = default_ccxt_factory,
        ttl_s: float = TTL_S,
        timeout_s: float = 10.0,
    ) -> None:
        self._binance = binance
        self._yahoo = yahoo
        self._ccxt_factory = ccxt_factory
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._cache: dict[str, tuple[float, SymbolList]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _cached(self, key: str, fetch: Callable[[], Any]) -> SymbolList:
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() < hit[0]:
            return hit[1]
        async with self._locks.setdefault(key, asyncio.Lock()):
            hit = self._cache.get(key)
            if hit is not None and time.monotonic() < hit[0]:
                return hit[1]
            listed: SymbolList = await fetch()
            self._cache[key] = (time.monotonic() + self._ttl_s, listed)
            log.info("symbols_fetched", key=key, count=len(listed.symbols))
            return listed

    async def binance(self) -> SymbolList:
        """Binance's TRADING symbols from exchangeInfo."""
        rest = self._binance
        if rest is None:
            raise MarketDataError("Binance market data is not configured in this daemon")

        async def fetch() -> SymbolList:
            at = time.time()
            data = await rest.get("/api/v3/exchangeInfo", {}, weight=EXCHANGE_INFO_WEIGHT)
            entries = data.get("symbols", []) if isinstance(data, dict) else []
            out = []
            for s in entries:
                if not isinstance(s, dict) or "symbol" not in s or s.get("status", "TRADING") != "TRADING":
                    continue
                sym = str(s["symbol"]).upper()
                base, quote = str(s.get("baseAsset", "")), str(s.get("quoteAsset", ""))
                desc = describe_pair(base, quote) if base and quote else sym
                out.append(SymbolInfo(sym, f"BINANCE:{sym}", desc, "crypto"))
            if not out:
                raise MarketDataError("Binance exchangeInfo listed no tradable symbols")
            out.sort(key=lambda i: i.symbol)
            return SymbolList("BINANCE", tuple(out), f"binance:GET /api/v3/exchangeInfo@{_iso(at)}")

        return await self._cached("BINANCE", fetch)

    async def yahoo(self, query: str, limit: int) -> SymbolList:
        """Yahoo's search answer for ``query`` (at most ``limit`` quotes asked for)."""
        if self._yahoo is None:
            raise MarketDataError("Yahoo market data is not configured in this daemon")
        yahoo = self._yahoo
        params = {"q": query, "quotesCount": str(max(1, min(limit, 100))), "newsCount": "0"}
        path = f"{YAHOO_SEARCH_PATH}?{urlencode(params)}"

        async def fetch() -> SymbolList:
            at = time.time()
            status, body = await yahoo.get(YAHOO_SEARCH_PATH, params)
            if status != 200:
                raise MarketDataError(f"Yahoo search returned status {status}", status=status)
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise MarketDataError("Yahoo search returned a body that is not JSON") from exc
            quotes = data.get("quotes", []) if isinstance(data, dict) else []
            out = []
            for q in quotes:
                if not isinstance(q, dict) or not q.get("symbol"):
                    continue
                sym = str(q["symbol"])
                name = q.get("longname") or q.get("shortname") or sym
                where = q.get("exchDisp") or q.get("exchange")
                desc = f"{name} ({where})" if where else str(name)
                kind = _YAHOO_TYPES.get(str(q.get("quoteType", "")).upper(), str(q.get("quoteType", "other")).lower())
                out.append(SymbolInfo(sym, f"YAHOO:{sym}", desc, kind))
            return SymbolList("YAHOO", tuple(out), f"yahoo:GET {path}@{_iso(at)}")

        return await self._cached(f"YAHOO\x00{query.lower()}\x00{params['quotesCount']}", fetch)

    async def ccxt(self, exchange_id: str) -> SymbolList:
        """The spot markets of a ccxt exchange (load_markets), symbols written as the engine writes them."""

        async def fetch() -> SymbolList:
            import ccxt

            exchange = self._ccxt_factory(exchange_id)
            at = time.time()
            try:
                markets = await asyncio.wait_for(exchange.load_markets(), self._timeout_s)
            except TimeoutError as exc:
                raise MarketDataError(f"{exchange_id} did not answer within {self._timeout_s:g} s") from exc
            except ccxt.BaseError as exc:
                raise MarketDataError(f"{exchange_id} load_markets failed: {type(exc).__name__}: {exc}") from exc
            finally:
                await exchange.close()
            seen: dict[str, SymbolInfo] = {}
            for m in (markets or {}).values():
                if not m.get("spot", True) or m.get("active") is False:
                    continue
                base, quote = str(m.get("base", "")), str(m.get("quote", ""))
                sym = _compact(base + quote) or _compact(str(m.get("id", "")))
                if sym and sym not in seen:
                    full = f"{exchange_id.upper()}:{sym}"
                    seen[sym] = SymbolInfo(sym, full, describe_pair(base, quote), "crypto")
            out = tuple(sorted(seen.values(), key=lambda i: i.symbol))
            return SymbolList(exchange_id, out, f"{exchange_id}:ccxt load_markets@{_iso(at)}")

        return await self._cached(f"ccxt\x00{exchange_id}", fetch)
