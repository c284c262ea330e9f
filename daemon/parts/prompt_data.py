"""The data behind the MCP prompts: 24-hour tickers from the exchange, balances from the broker."""

from __future__ import annotations

from decimal import Decimal

from brokers import BrokerError, OrderService, RateLimitedError
from engine import BinanceRest, MarketDataError, RateLimited
from mcp_bridge import Holding, PromptCredentialsError, PromptRateLimited, Quote


class DaemonPromptData:
    """PromptData over Binance's public REST (tickers) and the running order service (balances)."""

    def __init__(self, rest: BinanceRest, orders: OrderService | None) -> None:
        self._rest = rest
        self._orders = orders

    async def quote(self, symbol: str) -> Quote | None:
        try:
            t = await self._rest.get("/api/v3/ticker/24hr", {"symbol": symbol}, weight=2)
        except RateLimited as exc:
            raise PromptRateLimited(int(exc.retry_after_s + 0.999)) from None
        except MarketDataError as exc:
            if "Invalid symbol" in str(exc) or "-1121" in str(exc):
                return None
            raise
        return Quote(
            symbol=symbol,
            price=Decimal(t["lastPrice"]),
            change=Decimal(t["priceChange"]),
            change_percent=Decimal(t["priceChangePercent"]),
            high=Decimal(t["highPrice"]),
            low=Decimal(t["lowPrice"]),
            volume=Decimal(t["volume"]),
        )

    async def holdings(self) -> list[Holding] | None:
        if self._orders is None:
            return None
        try:
            balances = await self._orders.broker.balances()
        except RateLimitedError as exc:
            raise PromptRateLimited(int(exc.retry_after_s + 0.999)) from None
        except BrokerError as exc:
            if exc.code == -32002:
                raise PromptCredentialsError(str(exc.data.get("api_key", "****"))) from None
            raise
        return [Holding(b.asset, b.free, b.locked) for b in balances]
