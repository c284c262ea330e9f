"""exchangeInfo documents: symbols with Binance's filters and the rate limits.

Every field of rest-api.md's example is present except the top-level ``sors`` ("present only
when SOR is available": the simulator has no smart order routing).  What the simulator does
not implement is stated as not allowed: ``amendAllowed`` (order amend keep priority),
``opoAllowed`` (OPO lists) and ``pegInstructionsAllowed`` (pegged orders) are false.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from simulator.count_filters import CountFilters
from simulator.order_rate import OrderRate

QUOTES = ("USDT", "FDUSD", "USDC", "BUSD", "BTC", "ETH", "BNB")
ORDER_TYPES = ["LIMIT", "LIMIT_MAKER", "MARKET", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"]


def split_symbol(symbol: str) -> tuple[str, str]:
    """(base, quote) by the longest known quote suffix."""
    for q in QUOTES:
        if symbol.endswith(q) and len(symbol) > len(q):
            return symbol[: -len(q)], q
    return symbol[:-4] or symbol, symbol[-4:]


def _fmt(x: float) -> str:
    return f"{x:.8f}"


def tick_size_for(price: float) -> float:
    """A tick of about 1e-6 of the price, a power of ten (BTC ~65000 → 0.01)."""
    return 10.0 ** max(-8, math.floor(math.log10(max(price, 1e-8))) - 6)


def step_size_for(price: float) -> float:
    """A quantity step worth about 0.1-1 quote units at most (BTC → 0.00001)."""
    return 10.0 ** max(-8, min(0, -math.floor(math.log10(max(price, 1e-8))) - 1))


def symbol_info(symbol: str, price: float, count_filters: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One ``symbols`` entry; ``count_filters`` are the MAX_NUM_* filters in force (Binance's by default)."""
    base, quote = split_symbol(symbol)
    tick = tick_size_for(price)
    step = step_size_for(price)
    return {
        "symbol": symbol,
        "status": "TRADING",
        "baseAsset": base,
        "baseAssetPrecision": 8,
        "quoteAsset": quote,
        "quotePrecision": 8,
        "quoteAssetPrecision": 8,
        "baseCommissionPrecision": 8,
        "quoteCommissionPrecision": 8,
        "orderTypes": ORDER_TYPES,
        "icebergAllowed": True,
        "ocoAllowed": True,
        "otoAllowed": True,
        "opoAllowed": False,
        "quoteOrderQtyMarketAllowed": True,
        "allowTrailingStop": True,
        "cancelReplaceAllowed": True,
        "amendAllowed": False,
        "pegInstructionsAllowed": False,
        "isSpotTradingAllowed": True,
        "isMarginTradingAllowed": False,
        "filters": [
            {
                "filterType": "PRICE_FILTER",
                "minPrice": _fmt(tick),
                "maxPrice": _fmt(1_000_000.0),
                "tickSize": _fmt(tick),
            },
            {"filterType": "LOT_SIZE", "minQty": _fmt(step), "maxQty": _fmt(9_000.0), "stepSize": _fmt(step)},
            {"filterType": "ICEBERG_PARTS", "limit": 10},
            {"filterType": "MARKET_LOT_SIZE", "minQty": _fmt(0.0), "maxQty": _fmt(100.0), "stepSize": _fmt(0.0)},
            {
                "filterType": "TRAILING_DELTA",
                "minTrailingAboveDelta": 10,
                "maxTrailingAboveDelta": 2000,
                "minTrailingBelowDelta": 10,
                "maxTrailingBelowDelta": 2000,
            },
            {
                "filterType": "PERCENT_PRICE_BY_SIDE",
                "bidMultiplierUp": "5",
                "bidMultiplierDown": "0.2",
                "askMultiplierUp": "5",
                "askMultiplierDown": "0.2",
                "avgPriceMins": 5,
            },
            {
                "filterType": "NOTIONAL",
                "minNotional": _fmt(5.0),
                "applyMinToMarket": True,
                "maxNotional": _fmt(9_000_000.0),
                "applyMaxToMarket": False,
                "avgPriceMins": 5,
            },
            *(CountFilters().exchange_filters() if count_filters is None else count_filters),
        ],
        "permissions": [],
        "permissionSets": [["SPOT"]],
        "defaultSelfTradePreventionMode": "EXPIRE_MAKER",
        "allowedSelfTradePreventionModes": ["NONE", "EXPIRE_TAKER", "EXPIRE_MAKER", "EXPIRE_BOTH"],
    }


def exchange_info(
    server_time: int,
    symbols: list[tuple[str, float]],
    weight_limit: int,
    order_limits: Sequence[dict[str, Any]] | None = None,
    count_filters: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole document; ``order_limits`` are the ``ORDERS`` rate limits in force (order_rate.py)."""
    orders = OrderRate(lambda: 0).rate_limits() if order_limits is None else list(order_limits)
    return {
        "timezone": "UTC",
        "serverTime": server_time,
        "rateLimits": [
            {"rateLimitType": "REQUEST_WEIGHT", "interval": "MINUTE", "intervalNum": 1, "limit": weight_limit},
            *orders,
            {"rateLimitType": "RAW_REQUESTS", "interval": "MINUTE", "intervalNum": 5, "limit": 61000},
        ],
        "exchangeFilters": [],
        "symbols": [symbol_info(s, p, count_filters) for s, p in symbols],
    }
