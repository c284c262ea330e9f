"""What every tool handler receives (the services) and returns (content blocks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from alerts.push import PushHub
from alerts.service import AlertService
from brokers.halt_switch import HaltSwitch
from brokers.schedules.service import ScheduleService
from brokers.service import OrderService
from engine.charts.service import ChartService
from mcp_bridge.tokens import TokenStore

ToolResult = list[types.TextContent | types.ImageContent]
Handler = Callable[["Services", dict[str, Any]], Awaitable[ToolResult]]


@dataclass(slots=True)
class Services:
    """The services tools adapt to; ``None`` means that part of the daemon is not running."""

    charts: ChartService
    max_bars: int = 5000
    engine: Any = None
    """The live market engine (``--trade``), or None."""
    alerts: AlertService | None = None
    """Alerts and notifications (``--trade``), or None."""
    push: PushHub | None = None
    """Open notification streams (``--trade``), or None."""
    orders: OrderService | None = None
    """Orders, positions and balances (``--trade``), or None."""
    prompts: Any = None
    """Market and account data for the MCP prompts (``--trade``), or None (no prompts listed)."""
    tokens: TokenStore | None = None
    """Bearer tokens (HTTP authentication), or None when nothing authenticates."""
    schedules: ScheduleService | None = None
    """Scheduled orders (``--trade``; :mod:`brokers.schedules`), or None."""
    scheduler: Any = None
    """The daemon's job scheduler (``daemon.scheduler.DaemonScheduler``): every periodic job, for /status."""
    halt: HaltSwitch | None = None
    """The operator's halt switch (``--trade``; :mod:`brokers.halt_switch`), or None."""
