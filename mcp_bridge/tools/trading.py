"""Trading, alert and notification tools while no trading engine runs (chartgen's answer)."""

from __future__ import annotations

from typing import Any

from mcp_bridge.errors import ToolError
from mcp_bridge.tools.context import Services, ToolResult

ENGINE_NOT_RUNNING = "Trading engine not running. Start with --trade to enable trading tools."

TRADING_TOOLS = (
    "place_order",
    "cancel_order",
    "get_orders",
    "get_positions",
    "get_balance",
    "set_alert",
    "list_alerts",
    "cancel_alert",
    "get_notifications",
    "subscribe_notifications",
    "unsubscribe_notifications",
    "list_subscriptions",
)


async def engine_not_running(services: Services, args: dict[str, Any]) -> ToolResult:
    raise ToolError(ENGINE_NOT_RUNNING)
