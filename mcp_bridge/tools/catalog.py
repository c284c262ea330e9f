"""Every tool the daemon offers, in tools/list order: chartgen's 15 first, then ours.

Each group module declares its tools as :class:`~mcp_bridge.tools.unit.ToolUnit` values; this
module only orders them and checks the whole (unique names, a scope for each).  The order is
part of the wire contract: chartgen's 15 keep their names and positions at the head.
"""

from __future__ import annotations

from typing import Any

from mcp_bridge.scopes import TOOL_SCOPES
from mcp_bridge.tools import alerting, chart_config, charting, discovery, journal, market, orders, portfolio, schedules
from mcp_bridge.tools.halting import HALT_TRADING
from mcp_bridge.tools.unit import ToolUnit


def _check(units: tuple[ToolUnit[Any], ...]) -> tuple[ToolUnit[Any], ...]:
    names = [u.name for u in units]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"tools declared twice: {sorted(dupes)}")
    unscoped = [n for n in names if n not in TOOL_SCOPES]
    if unscoped:
        raise RuntimeError(f"tools without a scope in mcp_bridge/scopes.py: {unscoped}")
    return units


CATALOG: tuple[ToolUnit[Any], ...] = _check(
    (
        # chartgen's 15, in chartgen's order
        *charting.UNITS,
        *orders.CHARTGEN_UNITS,
        *alerting.CHARTGEN_UNITS,
        # ours: protective orders, the halt switch, schedules (the unattended-trading release)
        HALT_TRADING,
        orders.PLACE_OCO,
        *schedules.UNITS,
        # the agent tools (docs/design.md §9)
        *market.UNITS,
        *portfolio.UNITS,
        *journal.UNITS,
        *discovery.UNITS,
        *chart_config.UNITS,
    )
)

TOOL_NAMES: tuple[str, ...] = tuple(u.name for u in CATALOG)
"""Every tool's name in tools/list order (all groups)."""

UNITS_BY_NAME: dict[str, ToolUnit[Any]] = {u.name: u for u in CATALOG}


def offered(groups: tuple[str, ...] | list[str]) -> tuple[ToolUnit[Any], ...]:
    """The units of the chosen groups, in catalog order."""
    wanted = set(groups)
    return tuple(u for u in CATALOG if u.group in wanted)
