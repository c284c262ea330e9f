"""mcp_bridge package."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_bridge.errors import ToolError
    from mcp_bridge.http_app import Authenticate, build_http_app
    from mcp_bridge.identity import Caller, current_principal
    from mcp_bridge.journal_store import MIGRATIONS as JOURNAL_MIGRATIONS
    from mcp_bridge.journal_store import EventFilter, Journal, JournalLimits, JournalStore, event_size
    from mcp_bridge.oauth.attempts import PassphraseAttempts, TooManyAttempts
    from mcp_bridge.oauth.consent import origin_of
    from mcp_bridge.oauth.passphrase import PassphraseError, check_passphrase_async, hash_passphrase
    from mcp_bridge.oauth.pg_store import PG_OAUTH_MIGRATIONS, PgOAuthStore
    from mcp_bridge.oauth.provider import ChartgenOAuthProvider
    from mcp_bridge.oauth.routes import oauth_routes, resource_metadata_url
    from mcp_bridge.oauth.store import MIGRATIONS as OAUTH_MIGRATIONS
    from mcp_bridge.oauth.store import AccessRow, OAuthStore, RefreshRow
    from mcp_bridge.pg_journal import PG_JOURNAL_MIGRATIONS, PgJournalStore
    from mcp_bridge.pg_tokens import PG_TOKEN_MIGRATIONS, PgTokenStore
    from mcp_bridge.prompts import Holding, PromptCredentialsError, PromptRateLimited, Quote
    from mcp_bridge.rebinding import guarded, security_settings
    from mcp_bridge.scopes import (
        ADMIN,
        ALL_SCOPES,
        DEFAULT_TOKEN_SCOPES,
        SCOPE_ORDER,
        ScopeError,
        format_scopes,
        parse_scopes,
    )
    from mcp_bridge.server import SERVER_VERSION, ToolRouter, build_server
    from mcp_bridge.stdio import serve_stdio
    from mcp_bridge.token_cache import marker_for
    from mcp_bridge.tokens import MIGRATIONS as TOKEN_MIGRATIONS
    from mcp_bridge.tokens import TokenError, TokenStore, parse_scope_list
    from mcp_bridge.tool_specs import wire
    from mcp_bridge.tools.agent_calls import RESULT_CACHE
    from mcp_bridge.tools.alerting import SetAlertArgs
    from mcp_bridge.tools.catalog import CATALOG, TOOL_NAMES
    from mcp_bridge.tools.chart_config import surface
    from mcp_bridge.tools.chart_validation import parse_chart, validate
    from mcp_bridge.tools.charting import FORMATS, MAX_INDICATORS, chart_request
    from mcp_bridge.tools.context import AgentSettings, Services
    from mcp_bridge.tools.unit import parse_args

_HOMES = {
    "ADMIN": "mcp_bridge.scopes",
    "ALL_SCOPES": "mcp_bridge.scopes",
    "AccessRow": "mcp_bridge.oauth.store",
    "AgentSettings": "mcp_bridge.tools.context",
    "Authenticate": "mcp_bridge.http_app",
    "CATALOG": "mcp_bridge.tools.catalog",
    "Caller": "mcp_bridge.identity",
    "ChartgenOAuthProvider": "mcp_bridge.oauth.provider",
    "DEFAULT_TOKEN_SCOPES": "mcp_bridge.scopes",
    "EventFilter": "mcp_bridge.journal_store",
    "FORMATS": "mcp_bridge.tools.charting",
    "Holding": "mcp_bridge.prompts",
    "Journal": "mcp_bridge.journal_store",
    "JournalLimits": "mcp_bridge.journal_store",
    "JournalStore": "mcp_bridge.journal_store",
    "MAX_INDICATORS": "mcp_bridge.tools.charting",
    "JOURNAL_MIGRATIONS": "mcp_bridge.journal_store:MIGRATIONS",
    "OAUTH_MIGRATIONS": "mcp_bridge.oauth.store:MIGRATIONS",
    "TOKEN_MIGRATIONS": "mcp_bridge.tokens:MIGRATIONS",
    "OAuthStore": "mcp_bridge.oauth.store",
    "PG_JOURNAL_MIGRATIONS": "mcp_bridge.pg_journal",
    "PG_OAUTH_MIGRATIONS": "mcp_bridge.oauth.pg_store",
    "PG_TOKEN_MIGRATIONS": "mcp_bridge.pg_tokens",
    "PassphraseAttempts": "mcp_bridge.oauth.attempts",
    "PassphraseError": "mcp_bridge.oauth.passphrase",
    "PgJournalStore": "mcp_bridge.pg_journal",
    "PgOAuthStore": "mcp_bridge.oauth.pg_store",
    "PgTokenStore": "mcp_bridge.pg_tokens",
    "PromptCredentialsError": "mcp_bridge.prompts",
    "PromptRateLimited": "mcp_bridge.prompts",
    "Quote": "mcp_bridge.prompts",
    "RESULT_CACHE": "mcp_bridge.tools.agent_calls",
    "RefreshRow": "mcp_bridge.oauth.store",
    "SCOPE_ORDER": "mcp_bridge.scopes",
    "SERVER_VERSION": "mcp_bridge.server",
    "ScopeError": "mcp_bridge.scopes",
    "Services": "mcp_bridge.tools.context",
    "SetAlertArgs": "mcp_bridge.tools.alerting",
    "TOOL_NAMES": "mcp_bridge.tools.catalog",
    "TokenError": "mcp_bridge.tokens",
    "TokenStore": "mcp_bridge.tokens",
    "TooManyAttempts": "mcp_bridge.oauth.attempts",
    "ToolError": "mcp_bridge.errors",
    "ToolRouter": "mcp_bridge.server",
    "build_http_app": "mcp_bridge.http_app",
    "build_server": "mcp_bridge.server",
    "chart_request": "mcp_bridge.tools.charting",
    "check_passphrase_async": "mcp_bridge.oauth.passphrase",
    "current_principal": "mcp_bridge.identity",
    "event_size": "mcp_bridge.journal_store",
    "format_scopes": "mcp_bridge.scopes",
    "guarded": "mcp_bridge.rebinding",
    "hash_passphrase": "mcp_bridge.oauth.passphrase",
    "marker_for": "mcp_bridge.token_cache",
    "oauth_routes": "mcp_bridge.oauth.routes",
    "origin_of": "mcp_bridge.oauth.consent",
    "parse_args": "mcp_bridge.tools.unit",
    "parse_chart": "mcp_bridge.tools.chart_validation",
    "parse_scope_list": "mcp_bridge.tokens",
    "parse_scopes": "mcp_bridge.scopes",
    "resource_metadata_url": "mcp_bridge.oauth.routes",
    "security_settings": "mcp_bridge.rebinding",
    "serve_stdio": "mcp_bridge.stdio",
    "surface": "mcp_bridge.tools.chart_config",
    "validate": "mcp_bridge.tools.chart_validation",
    "wire": "mcp_bridge.tool_specs",
}
"""Where each public name lives, imported on first use (PEP 562) so that importing the package stays
cheap and its modules free of circles through it; a name whose home is itself a module is that module."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    home, _, attr = home.partition(":")  # "module:attr": the name the module gives it, when two would clash
    module = importlib.import_module(home)
    value = module if home.endswith(f".{name}") and not hasattr(module, name) else getattr(module, attr or name)
    globals()[name] = value
    return value


__all__ = [
    "ADMIN",
    "ALL_SCOPES",
    "CATALOG",
    "DEFAULT_TOKEN_SCOPES",
    "FORMATS",
    "JOURNAL_MIGRATIONS",
    "MAX_INDICATORS",
    "OAUTH_MIGRATIONS",
    "PG_JOURNAL_MIGRATIONS",
    "PG_OAUTH_MIGRATIONS",
    "PG_TOKEN_MIGRATIONS",
    "RESULT_CACHE",
    "SCOPE_ORDER",
    "SERVER_VERSION",
    "TOKEN_MIGRATIONS",
    "TOOL_NAMES",
    "AccessRow",
    "AgentSettings",
    "Authenticate",
    "Caller",
    "ChartgenOAuthProvider",
    "EventFilter",
    "Holding",
    "Journal",
    "JournalLimits",
    "JournalStore",
    "OAuthStore",
    "PassphraseAttempts",
    "PassphraseError",
    "PgJournalStore",
    "PgOAuthStore",
    "PgTokenStore",
    "PromptCredentialsError",
    "PromptRateLimited",
    "Quote",
    "RefreshRow",
    "ScopeError",
    "Services",
    "SetAlertArgs",
    "TokenError",
    "TokenStore",
    "TooManyAttempts",
    "ToolError",
    "ToolRouter",
    "build_http_app",
    "build_server",
    "chart_request",
    "check_passphrase_async",
    "current_principal",
    "event_size",
    "format_scopes",
    "guarded",
    "hash_passphrase",
    "marker_for",
    "oauth_routes",
    "origin_of",
    "parse_args",
    "parse_chart",
    "parse_scope_list",
    "parse_scopes",
    "resource_metadata_url",
    "security_settings",
    "serve_stdio",
    "surface",
    "validate",
    "wire",
]
