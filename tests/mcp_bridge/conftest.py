"""Fixtures for the MCP bridge: the SDK server over our tools, served over HTTP on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon import serving as serve_app
from engine import ChartService
from mcp_bridge.http_app import build_http_app
from mcp_bridge.server import build_server
from mcp_bridge.tools import Services


@pytest.fixture
def services(charts: ChartService) -> Services:
    return Services(charts=charts, max_bars=5000)


@pytest.fixture
async def mcp_url(services: Services) -> AsyncIterator[str]:
    """Base URL of our Streamable HTTP app (uvicorn in the test's loop)."""
    server, _ = build_server(services)
    async with serve_app(build_http_app(server)) as url:
        yield url


@pytest.fixture
def router(services: Services) -> Any:
    _, router = build_server(services)
    return router


@pytest.fixture
async def direct_url(services: Services) -> AsyncIterator[str]:
    """The same app with the daemon's session-less fast path for tools/call (``router.direct``)."""
    server, router = build_server(services)
    async with serve_app(build_http_app(server, direct=router.direct)) as url:
        yield url
