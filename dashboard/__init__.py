"""The operator's web dashboard at /ui: sessions, sign-in, JSON API, live events, static assets."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dashboard import pg_sessions, sessions
    from dashboard.api import fill_view
    from dashboard.auth import COOKIE
    from dashboard.deps import ClusterPages, DashboardDeps
    from dashboard.device_cookies import (
        DEVICE_COOKIE,
        DeviceCookieJar,
        device_of,
        issue_device_cookie,
        set_device_cookie,
    )
    from dashboard.pg_sessions import PG_SESSION_MIGRATIONS, PgSessionStore
    from dashboard.routes import dashboard_routes
    from dashboard.sessions import (
        LINK_S,
        MIGRATIONS,
        TOUCH_EVERY_S,
        Session,
        Sessions,
        SessionStore,
        SignInState,
        end_every_sign_in,
    )

_HOMES = {
    "COOKIE": "dashboard.auth",
    "ClusterPages": "dashboard.deps",
    "DEVICE_COOKIE": "dashboard.device_cookies",
    "DashboardDeps": "dashboard.deps",
    "DeviceCookieJar": "dashboard.device_cookies",
    "LINK_S": "dashboard.sessions",
    "MIGRATIONS": "dashboard.sessions",
    "PG_SESSION_MIGRATIONS": "dashboard.pg_sessions",
    "PgSessionStore": "dashboard.pg_sessions",
    "Session": "dashboard.sessions",
    "SessionStore": "dashboard.sessions",
    "Sessions": "dashboard.sessions",
    "SignInState": "dashboard.sessions",
    "TOUCH_EVERY_S": "dashboard.sessions",
    "dashboard_routes": "dashboard.routes",
    "device_of": "dashboard.device_cookies",
    "end_every_sign_in": "dashboard.sessions",
    "fill_view": "dashboard.api",
    "issue_device_cookie": "dashboard.device_cookies",
    "pg_sessions": "dashboard.pg_sessions",
    "sessions": "dashboard.sessions",
    "set_device_cookie": "dashboard.device_cookies",
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
    "COOKIE",
    "DEVICE_COOKIE",
    "LINK_S",
    "MIGRATIONS",
    "PG_SESSION_MIGRATIONS",
    "TOUCH_EVERY_S",
    "ClusterPages",
    "DashboardDeps",
    "DeviceCookieJar",
    "PgSessionStore",
    "Session",
    "SessionStore",
    "Sessions",
    "SignInState",
    "dashboard_routes",
    "device_of",
    "end_every_sign_in",
    "fill_view",
    "issue_device_cookie",
    "pg_sessions",
    "sessions",
    "set_device_cookie",
]
