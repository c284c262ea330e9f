"""fetch_chart_documentation, validate_chart_config and construct_chart_config, for generate_chart.

Adapted from the chart-img seed to our own charts.  The documentation is generated from the
indicator registry and generate_chart's own schema (:mod:`engine.charts.chart_docs`);
validation runs generate_chart's own parser (:func:`mcp_bridge.tools.charting.chart_request`)
without rendering (:mod:`mcp_bridge.tools.chart_validation`), so a config it passes is one
generate_chart accepts; construction reads a sentence deterministically
(:mod:`engine.charts.config_builder`) and validates its answer the same way.  All three
follow the agent convention (tool_call_id, source_refs, error codes); an invalid config is a
successful validate_chart_config call with ``valid: false``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine import ChartSurface, UnknownAsset, all_indicators, build, documentation
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.agent_calls import AgentArgs, AgentCall, AgentError, Code, SourcedData, agent_unit, iso
from mcp_bridge.tools.chart_validation import Issue, ValidationLimits, validate
from mcp_bridge.tools.charting import DEFAULT_CHART_INDICATORS, FORMATS, MAX_INDICATORS, SOURCES
from mcp_bridge.tools.discovery import exchanges, resolve_exchange
from mcp_bridge.tools.unit import READ_LOCAL, ToolContext

DOC_TTL_S = 24 * 3600.0


def surface(max_bars: int) -> ChartSurface:
    """generate_chart's accepted values, read from its wire schema and constants."""
    props = wire("generate_chart")["wire_schema"]["properties"]
    return ChartSurface(
        max_bars=max_bars,
        max_indicators=MAX_INDICATORS,
        formats=FORMATS,
        sources=SOURCES,
        default_indicators=tuple(DEFAULT_CHART_INDICATORS),
        defaults={k: props[k].get("default") for k in ("timeframe", "bars", "width", "height", "format", "source")},
        width_range=(props["width"]["minimum"], props["width"]["maximum"]),
        height_range=(props["height"]["minimum"], props["height"]["maximum"]),
    )


def registry_ref() -> str:
    return f"registry:engine.indicators ({len(all_indicators())} indicators)"


# --- fetch_chart_documentation ---------------------------------------------------------------


class DocArgs(AgentArgs):
    section: Literal["indicators", "parameters", "exchanges", "all"] = "all"
    forceRefresh: bool = Field(default=False, description="Regenerate instead of using the 24 h cache")


class DocData(SourcedData):
    section: str
    cachedAt: str = Field(description="When this catalogue was generated (ISO 8601)")
    generatedFrom: str
    indicators: list[dict[str, Any]] | None = None
    categories: dict[str, str] | None = None
    familyRule: str | None = None
    chartParameters: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None
    exchanges: list[dict[str, Any]] | None = None
    examples: list[dict[str, Any]] | None = None


_docs: dict[int, tuple[float, str, dict[str, Any]]] = {}


async def fetch_chart_documentation(ctx: ToolContext, args: DocArgs, call: AgentCall) -> DocData:
    max_bars = ctx.services.max_bars
    hit = _docs.get(max_bars)
    if hit is None or args.forceRefresh or time.monotonic() >= hit[0]:
        now = datetime.now(UTC)
        hit = _docs[max_bars] = (
            time.monotonic() + DOC_TTL_S,
            iso(now.timestamp()),
            documentation(surface(max_bars), "all", now),
        )
    _, cached_at, doc = hit
    call.cite(f"{registry_ref()}@{cached_at}")
    call.cite("tool_specs:generate_chart")
    wanted = args.section
    parts: dict[str, Any] = {}
    if wanted in ("indicators", "all"):
        parts |= {k: doc[k] for k in ("indicators", "categories", "familyRule")}
    if wanted in ("parameters", "all"):
        parts |= {k: doc[k] for k in ("chartParameters", "limits")}
    if wanted == "all":
        parts["examples"] = doc["examples"]
    if wanted in ("exchanges", "all"):
        listed, ref = await exchanges()
        call.cite(ref)
        parts["exchanges"] = [e.model_dump() for e in listed]
    return DocData(
        section=wanted,
        cachedAt=cached_at,
        generatedFrom="the indicator registry and generate_chart's schema (never edited by hand)",
        **parts,
    )


# --- validate_chart_config -------------------------------------------------------------------


class ValidateArgs(AgentArgs):
    config: dict[str, Any] = Field(description="generate_chart arguments to check (nothing is rendered)")
    planLevel: str | None = Field(default=None, max_length=20, description="Accepted and ignored: there are no plans")


class ValidateData(SourcedData):
    valid: bool
    errors: list[Issue]
    warnings: list[str]
    suggestions: list[str]
    normalized: dict[str, Any] | None = Field(description="The config with canonical names and defaults (when valid)")
    limits: ValidationLimits


async def validate_chart_config(ctx: ToolContext, args: ValidateArgs, call: AgentCall) -> ValidateData:
    result = validate(args.config, ctx.services.max_bars)
    if args.planLevel:
        result.suggestions.append("planLevel is ignored: this daemon has no plans, every caller has the same limits")
    call.cite("parser:mcp_bridge.tools.charting.chart_request")
    call.cite(registry_ref())
    return ValidateData(**result.model_dump())


# --- construct_chart_config ------------------------------------------------------------------


class Preferences(BaseModel):
    model_config = ConfigDict(extra="forbid")

    theme: str | None = Field(default=None, max_length=20, description="dark (light is answered with a warning)")
    resolution: str | None = Field(default=None, max_length=20, description="WxH, e.g. 1200x675")
    interval: str | None = Field(default=None, max_length=8, description="e.g. 15m, 1h, 4h, 1d, 1w")
    range: str | None = Field(default=None, max_length=8, description="e.g. 1D, 7D, 1M, 3M, 1Y, YTD")


class ConstructArgs(AgentArgs):
    naturalLanguage: str = Field(min_length=1, max_length=2000, description="What to chart, in plain words")
    symbol: str | None = Field(default=None, max_length=40, description="Overrides the asset read from the text")
    exchange: str | None = Field(default=None, max_length=40, description="An id from get_exchanges")
    preferences: Preferences | None = None


class ConstructData(SourcedData):
    config: dict[str, Any] = Field(description="generate_chart arguments (checked by validate_chart_config)")
    reasoning: str = Field(description="What was read from which words")
    warnings: list[str]


async def construct_chart_config(ctx: ToolContext, args: ConstructArgs, call: AgentCall) -> ConstructData:
    venue = await resolve_exchange(args.exchange) if args.exchange else None
    max_bars = ctx.services.max_bars
    try:
        built = build(
            args.naturalLanguage,
            symbol=args.symbol,
            exchange=venue,
            preferences=args.preferences.model_dump() if args.preferences else None,
            max_bars=max_bars,
        )
    except UnknownAsset as exc:
        raise AgentError(Code.INVALID_SYMBOL, str(exc)) from None
    checked = validate(built.config, max_bars)
    if not checked.valid:
        problems = "; ".join(f"{e.field}: {e.message}" for e in checked.errors if e.severity == "error")
        raise AgentError(Code.INVALID_ARGUMENT, f"the constructed config is not valid: {problems}")
    reasoning = list(built.reasoning)
    if "indicators" not in built.config:
        reasoning.append(f"(default indicators: {', '.join(DEFAULT_CHART_INDICATORS)})")
    call.cite(registry_ref())
    call.cite("rules:chart-img seed interval selection")
    call.cite("parser:mcp_bridge.tools.charting.chart_request")
    return ConstructData(
        config=built.config, reasoning="; ".join(reasoning), warnings=[*built.warnings, *checked.warnings]
    )


UNITS = (
    agent_unit(
        name="fetch_chart_documentation",
        description=(
            "What generate_chart can draw, generated from the indicator registry: every indicator with its "
            "category, inputs (type, default, bounds), aliases and signals; chart parameters (intervals, formats, "
            "sources, bar and size ranges; the dark theme only); limits; exchanges; and example configs. "
            "section: indicators, parameters, exchanges or all (default); forceRefresh regenerates."
        ),
        args=DocArgs,
        data=DocData,
        handler=fetch_chart_documentation,
        group="chart",
        annotations=READ_LOCAL,
    ),
    agent_unit(
        name="validate_chart_config",
        description=(
            "Check generate_chart arguments without rendering, with generate_chart's own parser: valid, errors "
            "(field, message with the fix, severity), warnings (crowded panes, candles under 1.5 px, ignored "
            "sizes), suggestions and the normalised config with defaults filled. An invalid config is answered "
            "with valid=false, not as a failed call."
        ),
        args=ValidateArgs,
        data=ValidateData,
        handler=validate_chart_config,
        group="chart",
        annotations=READ_LOCAL,
    ),
    agent_unit(
        name="construct_chart_config",
        description=(
            "Turn a sentence ('Bitcoin with Bollinger Bands and RSI for the last 7 days') into generate_chart "
            "arguments, deterministically: asset (names, tickers, pairs), range → interval and bars, indicators "
            "with parameters ('RSI 21'), size ('1200x675', '4k', 'square'), format ('summary'). Returns config, "
            "reasoning and warnings; the config passes validate_chart_config. Unknown asset: INVALID_SYMBOL."
        ),
        args=ConstructArgs,
        data=ConstructData,
        handler=construct_chart_config,
        group="chart",
        annotations=READ_LOCAL,
    ),
)
