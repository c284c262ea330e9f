"""The process modes: one-shot render, MCP over stdio, MCP over Streamable HTTP."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog

from config import Settings
from daemon.http_server import BindError, bind_socket, make_server
from daemon.services import chart_service, describe_endpoints
from engine.charts.service import ChartRequest
from engine.indicators.params import IndicatorError
from engine.indicators.registry import parse_requests
from engine.market_data.errors import MarketDataError
from mcp_bridge.http_app import build_http_app
from mcp_bridge.server import build_server
from mcp_bridge.stdio import serve_stdio
from mcp_bridge.tools import Services

log = structlog.get_logger(__name__)


class ModeError(Exception):
    """A start-up problem the operator must fix; the CLI prints it and exits non-zero."""


@contextlib.asynccontextmanager
async def _simulator(settings: Settings, enabled: bool) -> AsyncIterator[Settings]:
    """With ``--sim``, start the exchange simulator on loopback and point the Binance URLs at it."""
    if not enabled:
        yield settings
        return
    from brokers.simulator.app import start_simulator

    sim = await start_simulator(host="127.0.0.1", port=0)
    try:
        ws = sim.url.replace("http://", "ws://")
        yield settings.model_copy(
            update={"binance_rest_url": sim.url, "binance_stream_url": ws, "binance_ws_api_url": f"{ws}/ws-api/v3"}
        )
    finally:
        await sim.close()


async def render_once(
    settings: Settings,
    *,
    symbol: str | None,
    interval: str,
    panels: list[str],
    output: Path,
    width: int,
    height: int,
    bars: int,
    source: str,
) -> None:
    """chartgen's default mode: fetch (or sample) data, render one PNG to ``output``."""
    try:
        requests = parse_requests(list(panels))
    except IndicatorError as exc:
        raise ModeError(str(exc)) from exc
    if not 1 <= bars <= settings.max_bars:
        raise ModeError(f"--bars must be between 1 and {settings.max_bars}, got {bars}")
    if not (200 <= width <= 4096 and 150 <= height <= 4096):
        raise ModeError(f"--width must be 200-4096 and --height 150-4096, got {width}x{height}")
    async with chart_service(settings, render_in_pool=False) as charts:
        req = ChartRequest(
            symbol=symbol, interval=interval, indicators=requests, bars=bars, width=width, height=height, source=source
        )
        try:
            out = await charts.chart(req)
        except MarketDataError as exc:
            raise ModeError(f"Failed to fetch data: {exc}") from exc
    assert out.png is not None
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(out.png)
    print(f"Done: {output}")


def _services(charts: Any, settings: Settings) -> Services:
    return Services(charts=charts, max_bars=settings.max_bars)


async def run_stdio(settings: Settings, *, sim: bool) -> None:
    """``--mcp``: serve one client over stdin/stdout."""
    async with _simulator(settings, sim) as settings, chart_service(settings) as charts:
        server, _ = build_server(_services(charts, settings))
        log.info("mcp_stdio_started", **describe_endpoints(settings))
        await serve_stdio(server)


async def run_http(settings: Settings, *, sim: bool, trade: bool) -> None:
    """``--serve``: MCP over Streamable HTTP on ``settings.host:port``."""
    if not settings.host_is_loopback():
        raise ModeError(
            f"refusing to listen on {settings.host}: authentication is not available yet, so the server only binds "
            "loopback. Use --host 127.0.0.1 and put a TLS proxy in front."
        )
    try:
        sock = bind_socket(settings.host, settings.port)
    except BindError as exc:
        raise ModeError(str(exc)) from exc
    host, port = sock.getsockname()[:2]
    async with _simulator(settings, sim) as settings, chart_service(settings) as charts:
        server, _ = build_server(_services(charts, settings))
        app = build_http_app(server, host=settings.host)
        http = make_server(app)
        shown = f"[{host}]" if ":" in host else host
        print(f"MCP server listening on http://{shown}:{port}/mcp", flush=True)
        if trade:
            log.warning("trading_engine_unavailable", detail="the live engine is not built yet; charting tools only")
        if sim:
            print(f"Exchange simulator at {settings.binance_rest_url}", flush=True)
        log.info("mcp_http_started", host=host, port=port, **describe_endpoints(settings))
        await http.serve(sockets=[sock])


def fail(message: str) -> int:
    """Print a one-line reason to stderr and return the exit status."""
    print(f"chartgen: error: {message}", file=sys.stderr)
    return 1
