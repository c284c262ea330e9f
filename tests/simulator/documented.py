"""Key sets of Binance's documented answers (reference/binance/rest-api.md), to compare the simulator's with.

Each set is copied from the example of the section named beside it; :func:`assert_documented_keys`
allows the "Conditional fields in Order Responses" on top of an order's keys, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ORDER_CONDITIONAL = frozenset(
    {"icebergQty", "preventedMatchId", "preventedQuantity", "stopPrice", "strategyId", "strategyType",
     "trailingDelta", "trailingTime", "usedSor", "workingFloor", "pegPriceType", "pegOffsetType",
     "pegOffsetValue", "peggedPrice", "expiryReason"}
)  # fmt: skip
"""rest-api.md, "Conditional fields in Order Responses"."""

NEW_ORDER_ACK = frozenset({"symbol", "orderId", "orderListId", "clientOrderId", "transactTime"})
"""New order (TRADE), Response - ACK."""
NEW_ORDER_RESULT = NEW_ORDER_ACK | {
    "price", "origQty", "executedQty", "origQuoteOrderQty", "cummulativeQuoteQty", "status", "timeInForce",
    "type", "side", "workingTime", "selfTradePreventionMode",
}  # fmt: skip
"""New order (TRADE), Response - RESULT."""
NEW_ORDER_FULL = NEW_ORDER_RESULT | {"fills"}
"""New order (TRADE), Response - FULL."""
QUERY_ORDER = frozenset(
    {"symbol", "orderId", "orderListId", "clientOrderId", "price", "origQty", "executedQty", "cummulativeQuoteQty",
     "status", "timeInForce", "type", "side", "stopPrice", "icebergQty", "time", "updateTime", "isWorking",
     "workingTime", "origQuoteOrderQty", "selfTradePreventionMode"}
)  # fmt: skip
"""Query order (USER_DATA); Current open orders has the same."""
CANCEL_ORDER = frozenset(
    {"symbol", "origClientOrderId", "orderId", "orderListId", "clientOrderId", "transactTime", "price", "origQty",
     "executedQty", "origQuoteOrderQty", "cummulativeQuoteQty", "status", "timeInForce", "type", "side",
     "selfTradePreventionMode"}
)  # fmt: skip
"""Cancel order (TRADE); each order of Cancel All Open Orders and each cancelled list's ``orderReports``."""
CANCELLED_LIST = frozenset(
    {"orderListId", "contingencyType", "listStatusType", "listOrderStatus", "listClientOrderId", "transactionTime",
     "symbol", "orders", "orderReports"}
)  # fmt: skip
"""Cancel All Open Orders on a Symbol: an order list's entry."""
CANCEL_REPLACE = frozenset({"cancelResult", "newOrderResult", "cancelResponse", "newOrderResponse"})
"""Cancel an Existing Order and Send a New Order: the success answer, and ``data`` of a failure."""
RATE_LIMIT_ORDER = frozenset({"rateLimitType", "interval", "intervalNum", "limit", "count"})
"""Query Unfilled Order Count: each row."""
TICKER_MINI = frozenset(
    {"symbol", "openPrice", "highPrice", "lowPrice", "lastPrice", "volume", "quoteVolume", "openTime", "closeTime",
     "firstId", "lastId", "count"}
)  # fmt: skip
"""Rolling window price change statistics, Response - MINI."""
TICKER_FULL = TICKER_MINI | {"priceChange", "priceChangePercent", "weightedAvgPrice"}
"""Rolling window price change statistics, Response - FULL."""
ACCOUNT = frozenset(
    {"makerCommission", "takerCommission", "buyerCommission", "sellerCommission", "commissionRates", "canTrade",
     "canWithdraw", "canDeposit", "brokered", "requireSelfTradePrevention", "preventSor", "updateTime",
     "accountType", "balances", "permissions", "uid"}
)  # fmt: skip
"""Account information (USER_DATA)."""
EXCHANGE_INFO = frozenset({"timezone", "serverTime", "rateLimits", "exchangeFilters", "symbols"})
"""Exchange information; its optional ``sors`` is "present only when SOR is available" (it is not)."""
EXCHANGE_INFO_SYMBOL = frozenset(
    {"symbol", "status", "baseAsset", "baseAssetPrecision", "quoteAsset", "quotePrecision", "quoteAssetPrecision",
     "baseCommissionPrecision", "quoteCommissionPrecision", "orderTypes", "icebergAllowed", "ocoAllowed",
     "otoAllowed", "opoAllowed", "quoteOrderQtyMarketAllowed", "allowTrailingStop", "cancelReplaceAllowed",
     "amendAllowed", "pegInstructionsAllowed", "isSpotTradingAllowed", "isMarginTradingAllowed", "filters",
     "permissions", "permissionSets", "defaultSelfTradePreventionMode", "allowedSelfTradePreventionModes"}
)  # fmt: skip
"""Exchange information: a ``symbols`` entry."""


def assert_documented_keys(
    answer: Mapping[str, Any], documented: Iterable[str], conditional: Iterable[str] = ()
) -> None:
    """Every documented key is there, and nothing else but the ``conditional`` ones."""
    keys, want, extra = set(answer), set(documented), set(conditional)
    assert want <= keys, f"missing {sorted(want - keys)}"
    assert keys <= want | extra, f"undocumented {sorted(keys - want - extra)}"
