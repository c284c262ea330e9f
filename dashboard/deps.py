"""What the dashboard is given by the daemon: the services it shows and acts on, and its own parts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from brokers import Fill
from dashboard.sessions import Sessions
from engine import Tick
from mcp_bridge import OAuthStore, PassphraseAttempts, PgOAuthStore, Services

OPERATOR = "operator"
"""The principal that owns alerts created from the dashboard."""


class ClusterPages(Protocol):
    """What a cluster front shows in place of a single node's engine and order service
    (daemon/front/dashboard.py builds it from the cluster's PostgreSQL and bus)."""

    async def markets(self) -> list[dict[str, Any]]:
        """The overview's markets: symbol, interval, last_price, live, ready (as a single node's)."""
        ...

    async def orders(self) -> dict[str, Any]:
        """The orders page's document (the single node's keys)."""
        ...

    async def fills(self, symbol: str) -> list[Fill]:
        """The account's fills in ``symbol`` (the chart's markers)."""
        ...


@dataclass(slots=True)
class DashboardDeps:
    services: Services
    sessions: Sessions
    passphrase: Callable[[], Awaitable[str | None]]
    """The operator passphrase's hash now (systemd credential first, else the database)."""
    status: Callable[[], Awaitable[dict[str, Any]]]
    """The daemon's /status document."""
    oauth: OAuthStore | PgOAuthStore | None
    secure_cookie: bool
    version: str
    indicators: tuple[str, ...] = ()
    """The engine's indicators (what the markets page charts)."""
    attempts: PassphraseAttempts = field(default_factory=PassphraseAttempts)
    base_url: str | None = None
    """The public URL behind a proxy: its origin may post the sign-in form (as may this server's loopback one)."""
    keepalive_s: float = 15.0
    listeners: list[Callable[[], None]] = field(default_factory=list)
    """Told when tokens, OAuth clients or sessions changed (open event streams send ``access``)."""
    cluster: ClusterPages | None = None
    """A cluster front's markets, account and fills (it has no engine or order service of its own)."""
    ticks: list[Callable[[Tick], None]] | None = None
    """Where a front's open event streams register for prices (the workers' ticks on ``bus = "nats"``,
    one per market of the symbol); None where the engine's subscription is used."""
    notified: list[Callable[[], None]] | None = None
    """Where a front's open event streams register to hear that alerts fired anywhere in the cluster
    (daemon/front/dashboard.py ``FiredWatch``): they then send ``notifications``; None on a single
    node (its alert feed is used)."""

    def changed(self) -> None:
        for listener in self.listeners:
            listener()
