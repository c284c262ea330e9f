"""A dashboard whose store cannot be reached (a cluster front with PostgreSQL away): every route
answers 503 naming what was not done — never a 500, and never as if signed out."""

from __future__ import annotations

from typing import Any

import orjson
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.applications import Starlette

from dashboard.deps import DashboardDeps
from dashboard.routes import dashboard_routes
from mcp_bridge import Services, security_settings
from storage import StorageUnavailable

WHY = "PostgreSQL at db:5432 unreachable: session not checked"


class _Away:
    """A session store whose database is away."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []
        self.max_s = 3600.0

    async def verify(self, secret: str | None) -> None:
        raise StorageUnavailable(WHY)

    async def create(self, client: str, user_agent: str) -> Any:
        raise StorageUnavailable(WHY)

    async def still_valid(self, session_id: str) -> bool:
        raise StorageUnavailable(WHY)

    async def active(self) -> list[Any]:
        raise StorageUnavailable(WHY)

    async def revoke(self, session_id: str) -> bool:
        raise StorageUnavailable(WHY)


async def _passphrase() -> str | None:
    return None


async def _status() -> dict[str, Any]:
    return {}


async def test_every_route_answers_503_while_the_store_is_away() -> None:
    deps = DashboardDeps(
        services=Services(charts=None, max_bars=1000),  # type: ignore[arg-type]
        sessions=_Away(),
        passphrase=_passphrase,
        status=_status,
        oauth=None,
        secure_cookie=False,
        version="test",
    )
    guard = TransportSecurityMiddleware(security_settings("127.0.0.1", None))
    app = Starlette(routes=dashboard_routes(deps, guard))
    for method, path in [("GET", "/ui"), ("GET", "/ui/api/overview"), ("GET", "/ui/static/app.js"),
                         ("DELETE", "/ui/api/sessions/x")]:  # fmt: skip
        status, body = await _call(app, method, path)
        assert status == 503, (path, status, body)
        assert WHY in orjson.loads(body)["error"]


async def _call(app: Starlette, method: str, path: str) -> tuple[int, bytes]:
    """One request straight into the ASGI app (loopback Host, a session cookie): status and body."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1:9315"), (b"cookie", b"chartgen_session=s")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 9315),
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
