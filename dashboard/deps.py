"""What the dashboard is given by the daemon: the services it shows and acts on, and its own parts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dashboard.sessions import SessionStore
from mcp_bridge.oauth.attempts import PassphraseAttempts
from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tools import Services

OPERATOR = "operator"
"""The principal that owns alerts created from the dashboard."""


@dataclass(slots=True)
class DashboardDeps:
    services: Services
    sessions: SessionStore
    passphrase: Callable[[], Awaitable[str | None]]
    """The operator passphrase's hash now (systemd credential first, else the database)."""
    status: Callable[[], Awaitable[dict[str, Any]]]
    """The daemon's /status document."""
    oauth: OAuthStore | None
    secure_cookie: bool
    version: str
    indicators: tuple[str, ...] = ()
    """The engine's indicators (what the markets page charts)."""
    attempts: PassphraseAttempts = field(default_factory=PassphraseAttempts)
    keepalive_s: float = 15.0
    listeners: list[Callable[[], None]] = field(default_factory=list)
    """Told when tokens, OAuth clients or sessions changed (open event streams send ``access``)."""

    def changed(self) -> None:
        for listener in self.listeners:
            listener()
