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


def not_available(name: str):
    """The handler of a trading tool this build does not implement yet.

    Without an engine it answers chartgen's text; with the engine running it says plainly
    that the tool itself is missing, rather than pretending the engine is down.
    """

    async def handler(services: Services, args: dict[str, Any]) -> ToolResult:
        if services.engine is None:
            raise ToolError(ENGINE_NOT_RUNNING)
        raise ToolError(f"{name} is not available in this build yet: the live engine runs, but this tool does not.")

    return handler
