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
from pydantic import InstanceOf

from engine import (
    ChartFormat,
    ChartRequest,
    IndicatorError,
    IndicatorRequest,
    MarketDataError,
    RenderBusy,
    list_indicators_payload,
    parse_requests,
    pretty,
)
from mcp_bridge.args import bool_arg, choice_arg, int_arg, interval_arg, pick, symbol_arg
from mcp_bridge.errors import ToolError
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.context import Services, ToolResult
from mcp_bridge.tools.unit import NoArgs, ToolContext, ToolUnit, WireArgs

FORMATS: tuple[ChartFormat, ...] = ("png", "summary", "both", "series")
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


def chart_request(args: dict[str, Any], max_bars: int) -> ChartRequest:
    """generate_chart's arguments as a chart request (chartgen's aliases and defaults; ToolError names the field)."""
    return GenerateChartArgs.model_validate(args, context={"services": None, "max_bars": max_bars}).request


def _max_bars(services: Services | None) -> int:
    return services.max_bars if services is not None else 5000


class GenerateChartArgs(WireArgs):
    """generate_chart's arguments, read into the chart request it describes."""

    WIRE = tuple(
        "ticker symbol timeframe interval indicators panels bars width height format source all_signals".split()
    )
    request: InstanceOf[ChartRequest]

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        fmt_raw = raw.get("format")
        given = "png" if fmt_raw is None else (fmt_raw.strip().lower() if isinstance(fmt_raw, str) else "")
        fmt = next((f for f in FORMATS if f == given), None)
        if fmt is None:
            raise ToolError("Unknown format: expected 'png', 'summary', 'both', or 'series'.")
        indicators_arg = "indicators" if raw.get("indicators") is not None else "panels"
        requests = _indicator_list(pick(raw, "indicators", "panels"), indicators_arg, DEFAULT_CHART_INDICATORS)
        request = ChartRequest(
            symbol=symbol_arg(pick(raw, "ticker", "symbol"), "ticker"),
            interval=interval_arg(pick(raw, "timeframe", "interval"), "timeframe"),
            indicators=requests,
            bars=int_arg(raw.get("bars"), "bars", default=200, minimum=1, maximum=context["max_bars"]),
            width=int_arg(raw.get("width"), "width", default=1920, minimum=200, maximum=4096),
            height=int_arg(raw.get("height"), "height", default=1080, minimum=150, maximum=4096),
            format=fmt,
            source=choice_arg(raw.get("source"), "source", SOURCES, default="auto"),
            all_signals=bool_arg(raw.get("all_signals"), "all_signals", default=False),
        )
        return {"request": request}


class ListIndicatorsArgs(NoArgs):
    """list_indicators takes nothing; anything given is refused, naming it (chartgen ignored it:
    docs/deviations.md)."""

    TOOL = "list_indicators"


class GetIndicatorsArgs(WireArgs):
    """get_indicators' arguments; ``bars`` None means the engine's whole warm window."""

    WIRE = tuple("symbol ticker interval timeframe indicators bars source all_signals".split())
    symbol: str
    interval: str
    indicators: list[InstanceOf[IndicatorRequest]]
    bars: int
    explicit_bars: bool
    source: str
    all_signals: bool

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        symbol = symbol_arg(pick(raw, "symbol", "ticker"), "symbol", required=True)
        interval = interval_arg(pick(raw, "interval", "timeframe"), "interval")
        indicators = pick(raw, "indicators")
        if indicators is None or (isinstance(indicators, list) and not indicators):
            raise ToolError("indicators array is required and must not be empty")
        return {
            "symbol": symbol,
            "interval": interval,
            "indicators": _indicator_list(indicators, "indicators", None),
            "bars": int_arg(raw.get("bars"), "bars", default=200, minimum=1, maximum=context["max_bars"]),
            "explicit_bars": raw.get("bars") is not None,
            "source": choice_arg(raw.get("source"), "source", SOURCES, default="auto"),
            "all_signals": bool_arg(raw.get("all_signals"), "all_signals", default=False),
        }


async def generate_chart(ctx: ToolContext, args: GenerateChartArgs) -> ToolResult:
    services = ctx.services
    req = args.request
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


async def list_indicators(ctx: ToolContext, args: ListIndicatorsArgs) -> ToolResult:
    return [text(list_indicators_payload())]


async def get_indicators(ctx: ToolContext, args: GetIndicatorsArgs) -> ToolResult:
    services = ctx.services
    if services.engine is not None:
        # without an explicit `bars` the engine answers over its whole (warm) window
        window = args.bars if args.explicit_bars else None
        cached = await services.engine.indicator_text(
            args.symbol, args.interval, args.indicators, bars=window, all_signals=args.all_signals
        )
        if cached is not None:
            return [types.TextContent(text=cached)]
    try:
        payload = await services.charts.indicators_text(
            args.symbol,
            args.interval,
            args.indicators,
            bars=args.bars,
            source=args.source,
            all_signals=args.all_signals,
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


UNITS = (
    ToolUnit(
        name="generate_chart", args=GenerateChartArgs, handler=generate_chart, group="chart", **wire("generate_chart")
    ),
    ToolUnit(
        name="list_indicators",
        args=ListIndicatorsArgs,
        handler=list_indicators,
        group="chart",
        **wire("list_indicators"),
    ),
    ToolUnit(
        name="get_indicators", args=GetIndicatorsArgs, handler=get_indicators, group="chart", **wire("get_indicators")
    ),
)
