"""The wire text of chartgen's 15 tools and of our first five: descriptions, input schemas, annotations.

This is the contract copy (golden-tested in tests/mcp_bridge/test_tools_golden.py); each tool's
:class:`~mcp_bridge.tools.unit.ToolUnit` in its group module takes its text from here with
:func:`wire`.  chartgen's names, order and argument names.

Descriptions are our own; schemas describe what the handlers accept (including chartgen's
aliases).  Handlers validate again and answer bad input with an isError result that names
the field, so a client that ignores the schema still gets a clear message.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from mcp_bridge.schedule_specs import schedule_tools

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
_ORDER_TYPES = "market limit limit_maker stop_loss stop_loss_limit take_profit take_profit_limit stop".split()
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
            "live exchange). Market orders fill at the current price; limit orders need a price. Protective "
            "types stop_loss / take_profit (market once triggered) and stop_loss_limit / take_profit_limit (a "
            "limit at price once triggered) need stop_price and/or trailing_delta. bracket attaches an OCO exit "
            "(take profit + stop loss, opposite side, same quantity) placed when the entry fills."
        ),
        input_schema=_obj(
            {
                "symbol": {"type": "string", "description": "Trading pair, e.g. BTCUSDT"},
                "side": {"type": "string", "enum": ["buy", "sell"]},
                "type": {
                    "type": "string",
                    "enum": _ORDER_TYPES,
                    "default": "market",
                    "description": "stop is read as stop_loss (stop_loss_limit with a price)",
                },
                "quantity": {"type": "number", "exclusiveMinimum": 0, "description": "Amount of the base asset"},
                "price": {"type": "number", "exclusiveMinimum": 0, "description": "Limit price (limit orders)"},
                "stop_price": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Trigger price of stop_loss / take_profit (and _limit) orders",
                },
                "trailing_delta": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10000,
                    "description": "Trailing stop distance in basis points (100 = 1%); stop_price then activates it",
                },
                "time_in_force": {
                    "type": "string",
                    "enum": ["GTC", "IOC", "FOK"],
                    "description": "Limit orders: GTC (default) rests; IOC/FOK expire if they cannot fill now",
                },
                "bracket": {
                    "type": "object",
                    "description": (
                        'Optional exit OCO for the entry: {"take_profit": P, "stop_loss": S, "stop_limit": L?}; '
                        "an OTOCO where the exchange has it and the entry is a limit order, else placed by the "
                        "daemon once the entry fills (never if it is cancelled)"
                    ),
                    "properties": {
                        "take_profit": {"type": "number", "exclusiveMinimum": 0},
                        "stop_loss": {"type": "number", "exclusiveMinimum": 0},
                        "stop_limit": {"type": "number", "exclusiveMinimum": 0},
                    },
                    "required": ["take_profit", "stop_loss"],
                    "additionalProperties": False,
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
        description=(
            "Cancel an open order by the order_id that place_order returned; a list id (place_oco, bracket) or "
            "any leg of a list cancels the whole list."
        ),
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
        name="halt_trading",
        description=(
            "Halt all trading: every new order (tools, alert actions, schedules, brackets, OCO legs) is refused "
            "with 'trading is halted by the operator' until resumed. cancel_open=true also cancels your own open "
            "orders and order lists on the exchange (every client's with an admin token) and reports how many. "
            "resume=true (alone) resumes trading: a halt you set yourself, or any halt with an admin token; the "
            "operator's halt only the operator or an admin token lifts."
        ),
        input_schema=_obj(
            {
                "cancel_open": {
                    "type": "boolean",
                    "default": False,
                    "description": "Also cancel your open orders (every client's with an admin token)",
                },
                "reason": {"type": "string", "maxLength": 200, "description": "Why (shown in the daemon's status)"},
                "resume": {"type": "boolean", "default": False, "description": "Resume trading instead of halting"},
            }
        ),
        annotations=_ORDER,
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
                "action": {
                    "type": "object",
                    "description": (
                        "Optional: place an order when the alert fires, exactly once: "
                        '{"place_order": {...place_order arguments; symbol defaults to the alert\'s}}. '
                        "Needs the trade scope. Checked now (filters, limits, symbol; a short balance is a "
                        "warning); the notification carries the order id and outcome."
                    ),
                    "properties": {"place_order": {"type": "object"}},
                    "required": ["place_order"],
                },
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
            "streams, optionally only for some symbols or alert types; missed ones are queued. With channels, "
            "they are also sent to those notification channels (webhook, Telegram, ntfy)."
        ),
        input_schema=_obj(
            {
                "symbols": {"type": "array", "items": {"type": "string"}, "description": "Omit for all symbols"},
                "alert_types": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["price_above", "price_below", "indicator_signal"]},
                    "description": "Omit for all types",
                },
                "channels": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": (
                        "Also deliver the matching notifications to these notification channels (names of the "
                        "operator's [channels.NAME] settings: webhook, Telegram, ntfy)"
                    ),
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

TOOLS = (*TOOLS, *schedule_tools(next(t for t in TOOLS if t.name == "place_order")))

PLACE_OCO = types.Tool(
    name="place_oco",
    description=(
        "Place a one-cancels-the-other pair around the last price: a take-profit limit at take_profit_price "
        "(LIMIT_MAKER; TAKE_PROFIT_LIMIT for a buy) and a stop loss at stop_price (STOP_LOSS, or STOP_LOSS_LIMIT "
        "at stop_limit_price). When one fills the other is cancelled. Returns the list id (cancel_order takes "
        "it) and both legs."
    ),
    input_schema=_obj(
        {
            "symbol": {"type": "string", "description": "Trading pair, e.g. BTCUSDT"},
            "side": {"type": "string", "enum": ["buy", "sell"], "description": "sell exits a long, buy a short"},
            "quantity": {"type": "number", "exclusiveMinimum": 0, "description": "Amount of the base asset"},
            "take_profit_price": {"type": "number", "exclusiveMinimum": 0},
            "stop_price": {"type": "number", "exclusiveMinimum": 0},
            "stop_limit_price": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Optional: the stop leg becomes a limit order at this price once triggered",
            },
        },
        ["symbol", "side", "quantity", "take_profit_price", "stop_price"],
    ),
    annotations=_ORDER,
)
"""place_oco (protective order lists): listed after chartgen's tools."""
TOOLS = (*TOOLS, PLACE_OCO)


_BY_NAME: dict[str, types.Tool] = {t.name: t for t in TOOLS}


def wire(name: str) -> dict[str, Any]:
    """The hand-kept description, input schema and annotations of ``name`` (for its ToolUnit)."""
    tool = _BY_NAME[name]
    return {"description": tool.description or "", "wire_schema": tool.input_schema, "annotations": tool.annotations}
