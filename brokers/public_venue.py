"""Binance's public market data as a :class:`~brokers.portfolio_view.Venue`: which pairs are listed
(with their filters) and their last prices, without an account or keys.

A cluster front holds no exchange keys (only the order leader does), yet get_portfolio there
prices the account's holdings the way a single node does: a pair is valued when the exchange lists
it as TRADING, at the quote source's price or else the venue's ticker (``GET
/api/v3/ticker/price``, weight 2).  The listing comes from the front's cached ``exchangeInfo``
(:class:`~engine.market_data.symbol_directory.SymbolDirectory`, refreshed hourly).  Market-data
failures are :class:`~brokers.models.BrokerError`, as a broker's would be, so the pricer reports the
pair as unvalued with the reason.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from brokers.filters import SymbolRules
from brokers.models import BrokerError
from engine import BinanceRest, MarketDataError, SymbolDirectory

TICKER_WEIGHT = 2


class PublicVenue:
    """Listing and last prices of Binance pairs from its public REST API."""

    name = "binance"

    def __init__(self, rest: BinanceRest, directory: SymbolDirectory) -> None:
        self.rest = rest
        self.directory = directory

    async def rules(self, symbol: str) -> SymbolRules | None:
        try:
            entry = await self.directory.entry(symbol)
        except MarketDataError as exc:
            raise BrokerError(str(exc)) from exc
        return None if entry is None else SymbolRules.from_exchange_info(entry)

    async def last_price(self, symbol: str) -> Decimal | None:
        try:
            answer = await self.rest.get("/api/v3/ticker/price", {"symbol": symbol.upper()}, weight=TICKER_WEIGHT)
        except MarketDataError as exc:
            raise BrokerError(str(exc)) from exc
        try:
            return Decimal(str(answer["price"])) if isinstance(answer, dict) and "price" in answer else None
        except InvalidOperation:
            return None
