"""The /ui routes: the page (or the sign-in form), its static files, the JSON API and the event stream.

Every route runs the daemon's Host/Origin check (DNS rebinding) and carries the dashboard's
security headers; the sign-in post is further accepted only from the daemon's own origin, and
``/ui/link`` opens a one-time sign-in link (dashboard/auth.py).  Static files are the package's
``dashboard/static`` files, looked up by exact name — nothing else on disk is reachable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from dashboard import api, trading
from dashboard.auth import (
    Handler,
    current_session,
    link_route,
    login_route,
    logout,
    problem,
    secured,
    sign_in_page,
    signed_in,
)
from dashboard.deps import DashboardDeps
from dashboard.events import events
from mcp_bridge import guarded
from storage import StorageUnavailable

TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}


def _static_files() -> dict[str, bytes]:
    root = resources.files("dashboard") / "static"
    return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file() and f.name.rsplit(".", 1)[-1] in
            ("js", "css", "html", "svg")}  # fmt: skip


def dashboard_routes(deps: DashboardDeps, guard: TransportSecurityMiddleware) -> list[BaseRoute]:
    files = _static_files()

    async def page(request: Request) -> Response:
        session = await current_session(request, deps)
        if session is None:
            return sign_in_page()
        html = files.get("index.html", b"<!doctype html><title>chartgen</title><p>dashboard assets missing</p>")
        return secured(Response(html.replace(b"__CSRF_TOKEN__", session.csrf.encode()), media_type="text/html"))

    async def static(request: Request) -> Response:
        if await current_session(request, deps) is None:
            return problem(401, "not signed in: sign in at /ui with the operator passphrase")
        name = request.path_params["name"]
        body = files.get(name)
        if body is None or name == "index.html":
            return problem(404, f"no such file: {name}")
        suffix = "." + name.rsplit(".", 1)[-1]
        return secured(Response(body, media_type=TYPES[suffix], headers={"Cache-Control": "no-cache"}))

    def route(path: str, fn: Callable[[Request], Awaitable[Response]], method: str) -> Route:
        async def answered(request: Request) -> Response:
            try:
                return await fn(request)
            except StorageUnavailable as exc:  # a cluster front's PostgreSQL is away: nothing was done
                return problem(503, f"{exc}; try again shortly")

        return Route(path, guarded(guard, answered), methods=[method])

    def read(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return signed_in(deps, handler, changes=False)

    def change(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return signed_in(deps, handler, changes=True)

    return [
        route("/ui", page, "GET"),
        route("/ui/", page, "GET"),
        route("/ui/login", login_route(deps), "POST"),
        route("/ui/link", link_route(deps), "GET"),
        route("/ui/logout", change(logout), "POST"),
        route("/ui/static/{name}", static, "GET"),
        route("/ui/events", read(events), "GET"),
        route("/ui/api/overview", read(api.overview), "GET"),
        route("/ui/api/chart", read(api.chart), "GET"),
        route("/ui/api/alerts", read(api.alerts), "GET"),
        route("/ui/api/alerts", change(api.create_alert), "POST"),
        route("/ui/api/alerts/{alert_id}", change(api.cancel_alert), "DELETE"),
        route("/ui/api/notifications", read(api.notifications), "GET"),
        route("/ui/api/orders", read(api.orders), "GET"),
        route("/ui/api/health", read(api.health), "GET"),
        route("/ui/api/access", read(api.access), "GET"),
        route("/ui/api/tokens", change(api.create_token), "POST"),
        route("/ui/api/tokens/{token_id}", change(api.revoke_token), "DELETE"),
        route("/ui/api/oauth-clients/{client_id}", change(api.revoke_client), "DELETE"),
        route("/ui/api/sessions/{session_id}", change(api.revoke_session), "DELETE"),
        route("/ui/api/trading", read(trading.trading), "GET"),
        route("/ui/api/trading/halt", change(trading.halt), "POST"),
        route("/ui/api/trading/resume", change(trading.resume), "POST"),
        route("/ui/api/trading/suspensions", change(trading.suspend), "POST"),
        route("/ui/api/trading/suspensions/{principal}", change(trading.unsuspend), "DELETE"),
        route("/ui/api/trading/schedules/{schedule_id}", change(trading.cancel_schedule), "DELETE"),
    ]
