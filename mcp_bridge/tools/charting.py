"""generate_chart, list_indicators and get_indicators (contract §2.1-2.3).

A chart that needs a render worker (PNG, ``both``, ``series``, a large summary or
get_indicators payload) waits for its client's turn (engine.charts.gate); a client with
too many charts waiting is refused with a retry hint.
"""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
import structlog

from engine.charts.gate import RenderBusy
from engine.charts.jsonout import pretty
from engine.charts.service import ChartRequest
from engine.indicators.params import IndicatorError
from engine.indicators.registry import IndicatorRequest, list_indicators_payload, parse_requests
from engine.market_data.errors import MarketDataError
from mcp_bridge.args import bool_arg, choice_arg, int_arg, interval_arg, pick, symbol_arg
from mcp_bridge.errors import ToolError
from mcp_bridge.tools.context import Services, ToolResult

FORMATS = ("png", "summary", "both", "series")
SOURCES = ("auto", "binance", "yahoo")
DEFAULT_CHART_INDICATORS = ["ema_stack", "cipher_b", "macd"]
MAX_INDICATORS = 24
RATE_LIMITED = -32001
"""structuredContent error code of a refused call (with ``retry_after_secs``), as the prompts use."""

log = structlog.get_logger(__name__)


def text(payload: Any) -> types.TextContent:
    return types.TextContent(text=pretty(payload))


def _indicator_list(value: Any, field: str, default: list[str] | None) -> list[IndicatorRequest]:
    if value is None:
        if default is None:
            raise ToolError("indicators array is required and must not be empty")
        value = default
    if not isinstance(value, list):
        raise ToolError(f'{field} must be an array of indicator names or objects, e.g. ["rsi", {{"name": "macd"}}]')
    if len(value) > MAX_INDICATORS:
        raise ToolError(f"{field} has {len(value)} entries; at most {MAX_INDICATORS} indicators per request")
    try:
        return parse_requests(value)
    except IndicatorError as exc:
        raise ToolError(str(exc)) from exc


async def generate_chart(services: Services, args: dict[str, Any]) -> ToolResult:
    fmt_raw = args.get("format")
    fmt = "png" if fmt_raw is None else (fmt_raw.strip().lower() if isinstance(fmt_raw, str) else "")
    if fmt not in FORMATS:
        raise ToolError("Unknown format: expected 'png', 'summary', 'both', or 'series'.")
    indicators_arg = "indicators" if args.get("indicators") is not None else "panels"
    requests = _indicator_list(pick(args, "indicators", "panels"), indicators_arg, DEFAULT_CHART_INDICATORS)
    req = ChartRequest(
        symbol=symbol_arg(pick(args, "ticker", "symbol"), "ticker"),
        interval=interval_arg(pick(args, "timeframe", "interval"), "timeframe"),
        indicators=requests,
        bars=int_arg(args.get("bars"), "bars", default=200, minimum=1, maximum=services.max_bars),
        width=int_arg(args.get("width"), "width", default=1920, minimum=200, maximum=4096),
        height=int_arg(args.get("height"), "height", default=1080, minimum=150, maximum=4096),
        format=fmt,  # type: ignore[arg-type]
        source=choice_arg(args.get("source"), "source", SOURCES, default="auto"),
        all_signals=bool_arg(args.get("all_signals"), "all_signals", default=False),
    )
    try:
        out = await services.charts.chart(req)
    except MarketDataError as exc:
        raise ToolError(f"Failed to fetch data: {exc}") from exc
    except IndicatorError as exc:
        raise ToolError(str(exc)) from exc
    except RenderBusy as exc:
        raise _refused("generate_chart", exc) from exc
    content: ToolResult = []
    if out.png is not None:
        content.append(types.ImageContent(data=base64.b64encode(out.png).decode("ascii"), mime_type="image/png"))
    if out.text is not None:
        content.append(types.TextContent(text=out.text))
    return content


async def list_indicators(services: Services, args: dict[str, Any]) -> ToolResult:
    return [text(list_indicators_payload())]


async def get_indicators(services: Services, args: dict[str, Any]) -> ToolResult:
    symbol = symbol_arg(pick(args, "symbol", "ticker"), "symbol", required=True)
    assert symbol is not None
    interval = interval_arg(pick(args, "interval", "timeframe"), "interval")
    raw = pick(args, "indicators")
    if raw is None or (isinstance(raw, list) and not raw):
        raise ToolError("indicators array is required and must not be empty")
    requests = _indicator_list(raw, "indicators", None)
    bars = int_arg(args.get("bars"), "bars", default=200, minimum=1, maximum=services.max_bars)
    source = choice_arg(args.get("source"), "source", SOURCES, default="auto")
    all_signals = bool_arg(args.get("all_signals"), "all_signals", default=False)
    if services.engine is not None:
        # without an explicit `bars` the engine answers over its whole (warm) window
        window = None if args.get("bars") is None else bars
        cached = await services.engine.indicator_payload(
            symbol, interval, requests, bars=window, all_signals=all_signals
        )
        if cached is not None:
            return [text(cached)]
    try:
        payload = await services.charts.indicators_text(
            symbol, interval, requests, bars=bars, source=source, all_signals=all_signals
        )
    except MarketDataError as exc:
        raise ToolError(f"Failed to fetch data: {exc}") from exc
    except IndicatorError as exc:
        raise ToolError(str(exc)) from exc
    except RenderBusy as exc:
        raise _refused("get_indicators", exc) from exc
    return [types.TextContent(text=payload)]


def _refused(tool: str, exc: RenderBusy) -> ToolError:
    """A call refused because its client has too many charts waiting (with when to retry)."""
    log.warning("render_refused", running=exc.running, queued=exc.queued, retry_after_s=exc.retry_after_s)
    return ToolError(f"{tool} refused: {exc}", code=RATE_LIMITED, data={"retry_after_secs": exc.retry_after_s})
