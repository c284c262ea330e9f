"""A loopback HTTP server for the tests that stand in for a third-party API (Yahoo's chart and
search endpoints): routes in, the base URL out, stopped on exit."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def http_stub(routes: dict[str, Route]) -> AsyncIterator[str]:
    """Serve ``{path: handler}`` (GET) on 127.0.0.1 and a free port; yields ``http://127.0.0.1:PORT``."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
