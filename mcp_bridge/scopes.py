"""Token scopes: what each scope allows, which scope each tool needs, and how scope lists are read.

Every bearer token (personal or OAuth) carries a set of scopes:

- ``charts``: chart, indicator and market-data tools;
- ``alerts``: alerts, notifications and the agents' event journal;
- ``trade``: orders, balances and positions;
- ``admin``: everything, plus acting on other principals' orders.

A tool missing from :data:`TOOL_SCOPES` needs ``admin`` (a new tool is closed until it is
given a scope here).  Scope lists are written ``charts,alerts`` on the command line and
``charts alerts`` in OAuth; :func:`parse_scopes` reads both.
"""

from __future__ import annotations

from collections.abc import Iterable

CHARTS, ALERTS, TRADE, ADMIN = "charts", "alerts", "trade", "admin"

SCOPE_ORDER: tuple[str, ...] = (CHARTS, ALERTS, TRADE, ADMIN)
"""Every scope, in the order they are shown."""

ALL_SCOPES = frozenset(SCOPE_ORDER)
"""Every scope a token can carry (stdio's one local client and the ``--sim`` demo token hold them all)."""

DEFAULT_TOKEN_SCOPES = frozenset({CHARTS, ALERTS})
"""A new personal access token's scopes unless told otherwise: trading is granted explicitly."""

MIGRATED_SCOPES = frozenset({CHARTS, ALERTS, TRADE})
"""What tokens issued before scopes existed (and OAuth's old ``mcp`` scope) were allowed to do."""

LEGACY_OAUTH_SCOPE = "mcp"
"""The single scope OAuth granted before scopes existed; read as :data:`MIGRATED_SCOPES`."""

DESCRIPTIONS: dict[str, str] = {
    CHARTS: "charts, indicators and market data",
    ALERTS: "price and signal alerts, notifications, the event journal",
    TRADE: "place and cancel orders, see orders, balances and positions",
    ADMIN: "everything, including every other client's orders",
}

TOOL_SCOPES: dict[str, str] = {
    "generate_chart": CHARTS,
    "list_indicators": CHARTS,
    "get_indicators": CHARTS,
    "place_order": TRADE,
    "cancel_order": TRADE,
    "place_oco": TRADE,
    "get_orders": TRADE,
    "get_positions": TRADE,
    "get_balance": TRADE,
    "halt_trading": TRADE,
    "schedule_order": TRADE,
    "list_schedules": TRADE,
    "cancel_schedule": TRADE,
    "set_alert": ALERTS,
    "list_alerts": ALERTS,
    "cancel_alert": ALERTS,
    "get_notifications": ALERTS,
    "subscribe_notifications": ALERTS,
    "unsubscribe_notifications": ALERTS,
    "list_subscriptions": ALERTS,
    # agent tools (docs/design.md §9)
    "get_quotes": CHARTS,
    "get_history": CHARTS,
    "get_exchanges": CHARTS,
    "get_symbols": CHARTS,
    "fetch_chart_documentation": CHARTS,
    "validate_chart_config": CHARTS,
    "construct_chart_config": CHARTS,
    "get_portfolio": TRADE,
    "trade_simulate": TRADE,
    "trade_execute": TRADE,
    "log_event": ALERTS,
    "get_events": ALERTS,
}


class ScopeError(ValueError):
    """A scope list naming an unknown scope, or none at all."""


def required_scope(tool: str) -> str:
    """The scope a call to ``tool`` needs (``admin`` for a tool no scope was assigned to)."""
    return TOOL_SCOPES.get(tool, ADMIN)


def allows(scopes: frozenset[str], tool: str) -> bool:
    """Whether a caller holding ``scopes`` may list and call ``tool``."""
    return ADMIN in scopes or required_scope(tool) in scopes


def ordered(scopes: Iterable[str]) -> list[str]:
    """Known scopes in display order (unknown names dropped)."""
    wanted = set(scopes)
    return [s for s in SCOPE_ORDER if s in wanted]


def format_scopes(scopes: Iterable[str], sep: str = ",") -> str:
    return sep.join(ordered(scopes))


def parse_scopes(text: str) -> frozenset[str]:
    """``"charts,alerts"`` (or space-separated) → the scope set; :class:`ScopeError` names the valid ones."""
    names = [n.strip().lower() for n in text.replace(",", " ").split()]
    unknown = [n for n in names if n not in ALL_SCOPES]
    if unknown:
        raise ScopeError(
            f"unknown scope {unknown[0]!r}; valid scopes are {', '.join(SCOPE_ORDER)} "
            "(comma-separated, e.g. --scope charts,alerts,trade)"
        )
    if not names:
        raise ScopeError(f"no scope given; name one or more of {', '.join(SCOPE_ORDER)}, e.g. --scope charts,alerts")
    return frozenset(names)


def from_stored(text: str | None) -> frozenset[str]:
    """Scopes as stored (space-separated); the legacy OAuth ``mcp`` reads as :data:`MIGRATED_SCOPES`.

    Unknown names are dropped and a missing value is no scope at all (fail closed).
    """
    if not text:
        return frozenset()
    names = set(text.split())
    if LEGACY_OAUTH_SCOPE in names:
        names |= MIGRATED_SCOPES
    return frozenset(names & ALL_SCOPES)


def to_stored(scopes: Iterable[str]) -> str:
    return format_scopes(scopes, " ")


def refusal(tool: str, scopes: frozenset[str]) -> str:
    """The isError text for a call outside the caller's scopes: the tool, the missing scope, the fix."""
    needed = required_scope(tool)
    wanted = format_scopes(scopes | {needed}) if needed != ADMIN else ADMIN
    return (
        f"{tool} needs the '{needed}' scope, which this token does not have (it has: "
        f"{format_scopes(scopes) or 'none'}). Use a token that has it: `chartgen token create NAME --scope {wanted}`, "
        f"or for an OAuth client, connect again and tick '{needed}' on the consent page."
    )
