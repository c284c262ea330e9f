"""The tool table: name → handler, in tools/list order."""

from __future__ import annotations

from mcp_bridge.tool_specs import TOOL_NAMES
from mcp_bridge.tools import charting, trading
from mcp_bridge.tools.alerting import ALERT_HANDLERS
from mcp_bridge.tools.context import Handler
from mcp_bridge.tools.halting import HALT_HANDLERS
from mcp_bridge.tools.orders import ORDER_HANDLERS
from mcp_bridge.tools.schedules import SCHEDULE_HANDLERS


def build_handlers() -> dict[str, Handler]:
    """Handlers for all 15 tools (trading tools answer "not running" until the engine exists)."""
    table: dict[str, Handler] = {
        "generate_chart": charting.generate_chart,
        "list_indicators": charting.list_indicators,
        "get_indicators": charting.get_indicators,
    }
    for name in trading.TRADING_TOOLS:
        table[name] = ALERT_HANDLERS.get(name) or ORDER_HANDLERS.get(name) or trading.not_available(name)
    table.update(HALT_HANDLERS)
    table.update(SCHEDULE_HANDLERS)
    table["place_oco"] = ORDER_HANDLERS["place_oco"]
    missing = set(TOOL_NAMES) - set(table)
    if missing:
        raise RuntimeError(f"tools without a handler: {sorted(missing)}")
    return {name: table[name] for name in TOOL_NAMES}
