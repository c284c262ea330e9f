"""The services tool handlers use (through their ToolContext) and what chartgen-style tools return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types

from alerts.channels.sender import OutboxSender
from alerts.feed import NotificationFeed
from alerts.push import PushHub
from alerts.service import AlertService
from brokers.halt_switch import HaltSwitch
from brokers.schedules.service import ScheduleService
from brokers.service import OrderService
from engine.charts.service import ChartService
from engine.live import LiveEngine
from engine.market_data.source import MarketData
from mcp_bridge.journal_store import JournalStore
from mcp_bridge.prompts import PromptData
from mcp_bridge.tokens import TokenStore

ToolResult = list[types.TextContent | types.ImageContent]


class JobStatus(Protocol):
    """The daemon's job scheduler as /status sees it (``daemon.scheduler.DaemonScheduler``)."""

    def status(self) -> dict[str, Any]: ...


ENGINE_NOT_RUNNING = "Trading engine not running. Start with --trade to enable trading tools."


@dataclass(slots=True)
class Services:
    """The services tools adapt to; ``None`` means that part of the daemon is not running."""

    charts: ChartService
    max_bars: int = 5000
    engine: LiveEngine | None = None
    """The live market engine (``--trade``), or None."""
    alerts: AlertService | None = None
    """Alerts and notifications (``--trade``), or None."""
    push: PushHub | None = None
    """Open notification streams (``--trade``), or None."""
    feed: NotificationFeed | None = None
    """Every firing and action outcome of every principal, for the dashboard (``--trade``), or None."""
    channels: OutboxSender | None = None
    """The notification channels' sender (``--trade`` with ``[channels.NAME]`` settings), or None."""
    orders: OrderService | None = None
    """Orders, positions and balances (``--trade``), or None."""
    prompts: PromptData | None = None
    """Market and account data for the MCP prompts (``--trade``), or None (no prompts listed)."""
    tokens: TokenStore | None = None
    """Bearer tokens (HTTP authentication), or None when nothing authenticates."""
    schedules: ScheduleService | None = None
    """Scheduled orders (``--trade``; :mod:`brokers.schedules`), or None."""
    scheduler: JobStatus | None = None
    """The daemon's job scheduler (``daemon.scheduler.DaemonScheduler``): every periodic job, for /status."""
    halt: HaltSwitch | None = None
    """The operator's halt switch (``--trade``; :mod:`brokers.halt_switch`), or None."""
    market: MarketData | None = None
    """REST market data (Binance, Yahoo) for quotes, history and discovery; None in tests that do not need it."""
    journal: JournalStore | None = None
    """The agents' event journal (:mod:`mcp_bridge.journal_store`), or None without a database."""
    agent: AgentSettings = field(default_factory=lambda: AgentSettings())
    """Settings of the agent tools (risk metrics, cache)."""
    not_running: str | None = None
    """What a tool whose part is not running answers (None: chartgen's "Trading engine not running"
    message; a cluster front names what it does not serve yet)."""

    def not_running_note(self) -> str:
        return self.not_running or ENGINE_NOT_RUNNING


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What the agent tools read from the daemon's settings."""

    risk_free_rate: float = 0.0
    """Annual risk-free rate subtracted in trade_simulate's Sharpe ratio."""
    risk_lookback_days: int = 365
    """Days of daily closes behind trade_simulate's risk metrics."""
    cache_ttl_s: float = 5.0
    """Identical agent read calls within this time are answered from cache."""
    tool_groups: tuple[str, ...] = ("chart", "alerts", "trading", "portfolio", "journal")
    """The tool groups offered."""
