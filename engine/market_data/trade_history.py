"""The exchange's trades of one symbol between two times, for a cluster worker's hand-over.

A market that changed owner was followed by nobody for a few seconds; the new owner closes that
gap by checking every trade the exchange made in it (daemon/worker/handover.py).  Klines would not
do: a bar's high may come from before the alert was armed or before the old owner's mark.

Binance: ``GET /api/v3/aggTrades`` (weight 4, at most 1,000 rows, ``startTime``/``endTime`` at most
an hour apart and not combinable with ``fromId``): the first page by time, the next pages by
``fromId`` until a trade is past the end.  An aggregate trade is trades of one taker order at one
price, so its price is a price the market traded at, which is all an alert needs.  ccxt
exchanges: ``fetch_trades(symbol, since, limit)`` paged by ``since``.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple, Protocol

from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError

AGG_TRADES_WEIGHT = 4
PAGE = 1000
MAX_SPAN_MS = 3_600_000
"""Binance refuses a startTime..endTime wider than an hour; a longer gap is refused here too (the
caller checks what it can and says what it could not)."""


class TradePrint(NamedTuple):
    time_ms: int
    price: float


class TradeHistory(Protocol):
    async def trades(self, symbol: str, start_ms: int, end_ms: int) -> list[TradePrint]:
        """Every trade with ``start_ms ≤ time ≤ end_ms``, oldest first."""
        ...


def _check_span(start_ms: int, end_ms: int) -> None:
    if end_ms - start_ms > MAX_SPAN_MS:
        raise ValueError(f"trade history spans at most {MAX_SPAN_MS // 60_000} minutes, asked for {start_ms}..{end_ms}")


class BinanceTradeHistory:
    def __init__(self, rest: BinanceRest) -> None:
        self.rest = rest

    async def trades(self, symbol: str, start_ms: int, end_ms: int) -> list[TradePrint]:
        _check_span(start_ms, end_ms)
        if end_ms < start_ms:
            return []
        params: dict[str, Any] = {"symbol": symbol.upper(), "startTime": start_ms, "endTime": end_ms, "limit": PAGE}
        out: list[TradePrint] = []
        while True:
            rows = await self.rest.get("/api/v3/aggTrades", params, weight=AGG_TRADES_WEIGHT)
            if not isinstance(rows, list):
                raise MarketDataError("Binance aggTrades answer is not a list")
            try:
                page = [(int(r["a"]), TradePrint(int(r["T"]), float(r["p"]))) for r in rows]
            except (KeyError, TypeError, ValueError) as exc:
                raise MarketDataError(f"Binance aggTrades row not understood: {exc}") from exc
            out.extend(t for _, t in page if start_ms <= t.time_ms <= end_ms)
            if len(page) < PAGE or page[-1][1].time_ms > end_ms:
                return out
            params = {"symbol": symbol.upper(), "fromId": page[-1][0] + 1, "limit": PAGE}


class CcxtTradeHistory:
    def __init__(self, exchange: Any, unified: Any, *, timeout_s: float = 15.0) -> None:
        self._exchange = exchange
        self._unified = unified
        """``async (symbol) -> ccxt symbol`` (engine/feed/ccxt_feed.py ``CcxtMarkets.unified``)."""
        self._timeout_s = timeout_s

    async def trades(self, symbol: str, start_ms: int, end_ms: int) -> list[TradePrint]:
        _check_span(start_ms, end_ms)
        name = await self._unified(symbol)
        since = start_ms
        out: list[TradePrint] = []
        while True:
            try:
                rows = await asyncio.wait_for(self._exchange.fetch_trades(name, since, PAGE), self._timeout_s)
            except TimeoutError as exc:
                raise MarketDataError(f"{self._exchange.id} did not answer within {self._timeout_s:g} s") from exc
            except Exception as exc:  # ccxt raises its own hierarchy: named for the caller
                raise MarketDataError(f"{self._exchange.id} trades: {exc}") from exc
            page = [TradePrint(int(r["timestamp"]), float(r["price"])) for r in rows or [] if r.get("timestamp")]
            out.extend(t for t in page if since <= t.time_ms <= end_ms)
            if len(page) < PAGE or page[-1].time_ms > end_ms:
                return out
            # the next page from the last millisecond again (a page may end inside it: the repeated
            # prints are harmless to a crossing check); a page all in one millisecond moves on
            since = page[-1].time_ms if page[-1].time_ms > since else since + 1
