"""The 15 tools as tools/list shows them: chartgen's names, order and argument names.

Descriptions are our own; schemas describe what the handlers accept (including chartgen's
aliases).  Handlers validate again and answer bad input with an isError result that names
the field, so a client that ignores the schema still gets a clear message.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

_INDICATOR_ITEM: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "description": "Indicator name or alias, e.g. rsi, macd, cipher_b, bb"},
        {
            "type": "object",
            "description": 'Indicator with parameters, e.g. {"name": "rsi", "length": 21}',
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": True,
        },
    ]
}
_INDICATORS = {
    "type": "array",
    "items": _INDICATOR_ITEM,
    "description": "Indicators to compute (names or {name, ...params} objects). See list_indicators.",
}
_SYMBOL = {
    "type": "string",
    "description": "Ticker: crypto pairs such as BTCUSDT (Binance) or stocks such as AAPL (Yahoo)",
}
_INTERVAL = {"type": "string", "description": "Bar interval: 1m, 5m, 15m, 30m, 1h, 2h, 4h, 6h, 12h, 1d, 1w (or 1wk)"}
_SOURCE = {
    "type": "string",
    "enum": ["auto", "binance", "yahoo"],
    "default": "auto",
    "description": "Market data source; auto picks Binance for crypto pairs and Yahoo otherwise",
}
_CONDITION = {
    "type": "object",
    "description": (
        'One of {"price_above": 70000}, {"price_below": 0.805}, or '
        '{"indicator_signal": {"indicator": "cipher_b", "signal": "gold_buy"}}'
    ),
}

_RO = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
_LOCAL_RO = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_WRITE = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
_ORDER = types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name="generate_chart",
        description=(
            "Draw a candlestick chart with technical indicators, or return the same analysis as data. "
            "format=png gives the image; summary gives a compact JSON digest (last values, levels, recent "
            "signals) that costs far fewer tokens; both gives image and digest; series gives every bar and "
            "every indicator value. Without a ticker it uses seeded sample data. 38 indicators are available "
            '(see list_indicators); pass parameters as objects, e.g. {"name":"rsi","length":21}.'
        ),
        input_schema=_obj(
            {
                "ticker": _SYMBOL,
                "symbol": {"type": "string", "description": "Alias of ticker"},
                "timeframe": {**_INTERVAL, "default": "4h"},
                "interval": {"type": "string", "description": "Alias of timeframe"},
                "indicators": {**_INDICATORS, "default": ["ema_stack", "cipher_b", "macd"]},
                "panels": {**_INDICATORS, "description": "Alias of indicators"},
                "bars": {"type": "integer", "default": 200, "minimum": 1, "maximum": 5000},
                "width": {"type": "integer", "default": 1920, "minimum": 200, "maximum": 4096},
                "height": {"type": "integer", "default": 1080, "minimum": 150, "maximum": 4096},
                "format": {"type": "string", "enum": ["png", "summary", "both", "series"], "default": "png"},
                "source": _SOURCE,
                "all_signals": {
                    "type": "boolean",
                    "default": False,
                    "description": "Summary: list every signal in the window instead of the most recent ones",
                },
            }
        ),
        annotations=_RO,
    ),
    types.Tool(
        name="list_indicators",
        description=(
            "List every indicator with its type (overlay, panel, external), aliases, configurable "
            "parameters with defaults, the formula it uses, and the signal labels it can emit."
        ),
        input_schema=_obj({}),
        annotations=_LOCAL_RO,
    ),
    types.Tool(
        name="get_indicators",
        description=(
            "Compute indicators for a symbol and return their current values as JSON (no image): last value "
            "of each line, levels and recent signals. Served from the live engine when it follows the symbol "
            "and interval, otherwise computed on freshly fetched bars; reports the bar count it used."
        ),
        input_schema=_obj(
            {
                "symbol": _SYMBOL,
                "ticker": {"type": "string", "description": "Alias of symbol"},
                "interval": {**_INTERVAL, "default": "4h"},
                "timeframe": {"type": "string", "description": "Alias of interval"},
                "indicators": _INDICATORS,
                "bars": {"type": "integer", "default": 200, "minimum": 1, "maximum": 5000},
                "source": _SOURCE,
                "all_signals": {"type": "boolean", "default": False},
            },
            ["symbol", "indicators"],
        ),
        annotations=_RO,
    ),
    types.Tool(
        name="place_order",
        description=(
            "Place a buy or sell order (paper trading unless the daemon runs against the Binance testnet or a "
            "live exchange). Market orders fill at the current price; limit orders need a price."
        ),
        input_schema=_obj(
            {
                "symbol": {"type": "string", "description": "Trading pair, e.g. BTCUSDT"},
                "side": {"type": "string", "enum": ["buy", "sell"]},
                "type": {"type": "string", "enum": ["market", "limit"], "default": "market"},
                "quantity": {"type": "number", "exclusiveMinimum": 0, "description": "Amount of the base asset"},
                "price": {"type": "number", "exclusiveMinimum": 0, "description": "Limit price (limit orders)"},
                "time_in_force": {
                    "type": "string",
                    "enum": ["GTC", "IOC", "FOK"],
                    "description": "Limit orders: GTC (default) rests; IOC/FOK expire if they cannot fill now",
                },
                "client_order_id": {
                    "type": "string",
                    "description": "Your own id (1-36 of letters, digits . : / _ -); default a new UUID",
                },
            },
            ["symbol", "side", "type", "quantity"],
        ),
        annotations=_ORDER,
    ),
    types.Tool(
        name="cancel_order",
        description="Cancel an open order by the order_id that place_order returned.",
        input_schema=_obj({"order_id": {"type": "string"}}, ["order_id"]),
        annotations=_ORDER,
    ),
    types.Tool(
        name="get_orders",
        description="List orders with their state (Pending, Open, Filled, Cancelled, Rejected).",
        input_schema=_obj({"filter": {"type": "string", "enum": ["open", "all"], "default": "all"}}),
        annotations=_LOCAL_RO,
    ),
    types.Tool(
        name="get_positions",
        description="List open positions with entry price, current price and unrealized profit or loss.",
        input_schema=_obj({}),
        annotations=_LOCAL_RO,
    ),
    types.Tool(
        name="get_balance",
        description="Show account balances per asset (free and locked).",
        input_schema=_obj({}),
        annotations=_LOCAL_RO,
    ),
    types.Tool(
        name="set_alert",
        description=(
            "Create a one-shot alert on a price level or an indicator signal. It fires once, then is removed; "
            "fired alerts are delivered by get_notifications and to push subscribers."
        ),
        input_schema=_obj(
            {
                "symbol": {"type": "string", "description": "Exchange symbol, e.g. BTCUSDT"},
                "condition": _CONDITION,
                "interval": {
                    "type": "string",
                    "description": "Bars an indicator alert (or a trigger=close price alert) watches; "
                    "default the engine's first interval",
                },
                "trigger": {
                    "type": "string",
                    "enum": ["touch", "close"],
                    "description": "Price alerts: touch (default) fires on any trade reaching the level; "
                    "close on a closed bar's close",
                },
                "params": {
                    "type": "object",
                    "description": 'Indicator parameters for indicator_signal, e.g. {"length": 21}',
                },
                "expires_at": {
                    "type": "string",
                    "description": "RFC 3339 time after which the alert is dropped unfired",
                },
                "note": {"type": "string", "description": "Free text returned with the notification (max 500 chars)"},
            },
            ["symbol", "condition"],
        ),
        annotations=_WRITE,
    ),
    types.Tool(
        name="list_alerts",
        description="List the alerts that are waiting to fire.",
        input_schema=_obj({}),
        annotations=_LOCAL_RO,
    ),
    types.Tool(
        name="cancel_alert",
        description="Delete a waiting alert by the alert_id that set_alert returned.",
        input_schema=_obj({"alert_id": {"type": "string"}}, ["alert_id"]),
        annotations=_WRITE,
    ),
    types.Tool(
        name="get_notifications",
        description="Return and clear the alerts that fired since the last call (yours only).",
        input_schema=_obj({}),
        annotations=_WRITE,
    ),
    types.Tool(
        name="subscribe_notifications",
        description=(
            "Receive fired alerts as push notifications (notifications/alert_triggered) on your open MCP "
            "streams, optionally only for some symbols or alert types; missed ones are queued."
        ),
        input_schema=_obj(
            {
                "symbols": {"type": "array", "items": {"type": "string"}, "description": "Omit for all symbols"},
                "alert_types": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["price_above", "price_below", "indicator_signal"]},
                    "description": "Omit for all types",
                },
            }
        ),
        annotations=_WRITE,
    ),
    types.Tool(
        name="unsubscribe_notifications",
        description="Stop push notifications for your token.",
        input_schema=_obj({}),
        annotations=_WRITE,
    ),
    types.Tool(
        name="list_subscriptions",
        description="Show your push subscription: filters, whether a stream is connected, and the offline queue size.",
        input_schema=_obj({}),
        annotations=_LOCAL_RO,
    ),
)

TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in TOOLS)
