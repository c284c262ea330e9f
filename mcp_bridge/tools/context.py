"""The services tool handlers use (through their ToolContext) and what chartgen-style tools return."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types

from alerts import AlertService, NotificationFeed, OutboxSender, PushHub
from brokers import (
    Actor,
    Balance,
    HaltAuthority,
    HaltState,
    LegDesk,
    OrderRequest,
    OrderService,
    ScheduleService,
    SimulatedAccount,
    SuspensionService,
    Venue,
)
from engine import ChartService, LiveEngine, MarketData
from mcp_bridge.journal_store import Journal
from mcp_bridge.prompts import PromptData
from mcp_bridge.tokens import TokenStore

if TYPE_CHECKING:  # asyncpg is imported only by a cluster front
    from mcp_bridge.pg_tokens import PgTokenStore

ToolResult = list[types.TextContent | types.ImageContent]


class JobStatus(Protocol):
    """The daemon's job scheduler as /status sees it (``daemon.scheduler.DaemonScheduler``)."""

    def status(self) -> dict[str, Any]: ...


class OrderPlacer(Protocol):
    """What place_order and cancel_order call: the single node's OrderService, or a cluster front's
    order intents (cluster/front_orders.py, cluster/cancels.py)."""

    async def place_parsed(
        self, order: OrderRequest, bracket: dict[str, Decimal | None] | None, *, owner: str | None
    ) -> dict[str, Any]: ...

    async def cancel_order(self, order_id: Any, *, actor: Actor) -> dict[str, Any]: ...


class OcoPlacer(Protocol):
    """What place_oco calls: the single node's order lists (brokers/orders/lists.py), or a cluster
    front's list intents (cluster/front_orders.py)."""

    async def place_parsed_oco(self, p: dict[str, Any], *, owner: str | None) -> dict[str, Any]: ...


class FrontOrderDesk(OrderPlacer, OcoPlacer, Protocol):
    """A cluster front's orders: single orders and OCO lists, both as intents (cluster/front_orders.py)."""


class LivePrices(Protocol):
    """Prices as a live engine gives them (a cluster front's: the workers' ticks on NATS,
    cluster/bus_prices.py): None when it has no fresh price of the symbol."""

    def last_price(self, symbol: str) -> float | None: ...

    def exchange_time_ms(self, symbol: str) -> int | None: ...

    def price_ref(self, symbol: str, at_ms: int) -> str: ...


class AccountReader(Protocol):
    """What get_orders, get_positions and get_balance read: the single node's OrderService, or a
    cluster front's mirror of the account (cluster/account_mirror.py)."""

    async def get_orders(self, filter_: Any, *, actor: Actor) -> list[dict[str, Any]]: ...

    async def get_positions(self) -> list[dict[str, Any]]: ...

    async def get_balance(self) -> dict[str, Any]: ...

    async def balances(self) -> list[Balance]:
        """The account's balances (get_portfolio's holdings), exact."""
        ...


class HaltControl(Protocol):
    """The operator's halt switch: the single node's (brokers/halt_switch.py) or a cluster's
    (cluster/halt.py)."""

    @property
    def state(self) -> HaltState: ...

    @property
    def halted(self) -> bool: ...

    def note(self) -> str | None: ...

    async def halt(self, *, reason: str | None, by: HaltAuthority, cancel_open: bool = False) -> dict[str, Any]: ...

    async def resume(self, *, by: HaltAuthority) -> dict[str, Any]:
        """Raises :class:`~brokers.halt_authority.HaltRefused` when ``by`` may not lift the halt."""
        ...


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
    tokens: TokenStore | PgTokenStore | None = None
    """Bearer tokens (HTTP authentication; a cluster front's in PostgreSQL), or None when nothing authenticates."""
    schedules: ScheduleService | None = None
    """Scheduled orders (``--trade``; :mod:`brokers.schedules`), or None."""
    scheduler: JobStatus | None = None
    """The daemon's job scheduler (``daemon.scheduler.DaemonScheduler``): every periodic job, for /status."""
    halt: HaltControl | None = None
    """The operator's halt switch (``--trade``: :mod:`brokers.halt_switch`; a cluster front:
    cluster/halt.py), or None."""
    suspensions: SuspensionService | None = None
    """The operator's per-principal trading suspensions (:mod:`brokers.suspensions`; ``--trade`` on a
    single node, a cluster front's on PostgreSQL), or None when trading is off."""
    front_orders: FrontOrderDesk | None = None
    """A cluster front's place_order, cancel_order and place_oco (cluster/front_orders.py), or None."""
    front_account: AccountReader | None = None
    """A cluster front's get_orders, get_positions and get_balance (cluster/account_mirror.py), or None."""
    front_simulation: SimulatedAccount | None = None
    """A cluster front's trade_simulate account: the mirror and the order leader's guard rails
    (cluster/front_desk.py), or None."""
    front_legs: LegDesk | None = None
    """A cluster front's trade_execute legs: order intents for the order leader (cluster/front_desk.py), or None."""
    venue: Venue | None = None
    """Where a cluster front lists and prices pairs for get_portfolio (brokers/public_venue.py), or None
    (a single node uses its broker)."""
    live_prices: LivePrices | None = None
    """A cluster front's prices of the markets the workers follow (``bus = "nats"``), for quotes; None
    on a single node (its engine prices them) or without NATS."""
    market: MarketData | None = None
    """REST market data (Binance, Yahoo) for quotes, history and discovery; None in tests that do not need it."""
    journal: Journal | None = None
    """The agents' event journal (:mod:`mcp_bridge.journal_store`; a cluster front's is
    :mod:`mcp_bridge.pg_journal`), or None without a database."""
    agent: AgentSettings = field(default_factory=lambda: AgentSettings())
    """Settings of the agent tools (risk metrics, cache)."""
    not_running: str | None = None
    """What a tool whose part is not running answers (None: chartgen's "Trading engine not running"
    message; a cluster front names what it does not serve yet)."""

    @property
    def order_placer(self) -> OrderPlacer | None:
        """Where place_order and cancel_order go: the order service, else a front's order intents, else None."""
        return self.orders if self.orders is not None else self.front_orders

    @property
    def oco_placer(self) -> OcoPlacer | None:
        """Where place_oco goes: the order service's lists, else a front's order intents, else None."""
        return self.orders.lists if self.orders is not None else self.front_orders

    @property
    def account_reader(self) -> AccountReader | None:
        """Where get_orders, get_positions and get_balance read: the order service, else a front's mirror,
        else None."""
        return self.orders if self.orders is not None else self.front_account

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
