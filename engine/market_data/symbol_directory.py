"""Which symbols the exchange lists, from ``/api/v3/exchangeInfo`` (cached, fetched once at a time).

Used to validate user input (an alert on ``BTCUSDX`` is refused with the nearest listed
names) before the engine is asked to follow a market.  The list is refreshed after
``ttl_s``; concurrent callers share one request, and a failed refresh keeps serving the
last good list when there is one.

The request goes through :class:`~engine.market_data.binance_rest.BinanceRest` (weight 20 per
call, budgeted by its rate gate) rather than python-binance's ``get_exchange_info``, which
has no 429/418 handling: measured in BinanceRest's docstring (``python -m bench.python_binance_gaps``).
"""

from __future__ import annotations

import asyncio
import difflib
import time
from typing import Any

from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError

EXCHANGE_INFO_WEIGHT = 20


class SymbolDirectory:
    """The exchange's tradable symbols (status TRADING), upper-case."""

    def __init__(self, rest: BinanceRest, *, ttl_s: float = 3600.0) -> None:
        self._rest = rest
        self._ttl_s = ttl_s
        self._symbols: frozenset[str] = frozenset()
        self._entries: dict[str, dict[str, Any]] = {}
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    async def symbols(self) -> frozenset[str]:
        """The listed symbols; raises MarketDataError when the list was never fetched and cannot be."""
        if self._symbols and time.monotonic() - self._fetched_at < self._ttl_s:
            return self._symbols
        async with self._lock:
            if self._symbols and time.monotonic() - self._fetched_at < self._ttl_s:
                return self._symbols
            try:
                data = await self._rest.get("/api/v3/exchangeInfo", {}, weight=EXCHANGE_INFO_WEIGHT)
            except MarketDataError:
                if self._symbols:
                    return self._symbols
                raise
            entries = data.get("symbols", []) if isinstance(data, dict) else []
            listed = frozenset(
                str(s["symbol"]).upper()
                for s in entries
                if isinstance(s, dict) and "symbol" in s and s.get("status", "TRADING") == "TRADING"
            )
            if not listed:
                raise MarketDataError("exchangeInfo listed no tradable symbols")
            self._entries = {str(s["symbol"]).upper(): s for s in entries if isinstance(s, dict) and "symbol" in s}
            self._symbols, self._fetched_at = listed, time.monotonic()
            return listed

    async def entry(self, symbol: str) -> dict[str, Any] | None:
        """The raw exchangeInfo entry of ``symbol`` (filters, assets), or None if it is not listed."""
        await self.symbols()
        return self._entries.get(symbol.upper())

    async def check(self, symbol: str) -> str | None:
        """None if ``symbol`` is listed, else a message naming the closest listed symbols."""
        listed = await self.symbols()
        if symbol.upper() in listed:
            return None
        close = difflib.get_close_matches(symbol.upper(), sorted(listed), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; use the exchange's symbol, e.g. BTCUSDT"
        return f"symbol {symbol!r} is not listed on the exchange{hint}"
