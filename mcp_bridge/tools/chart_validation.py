"""validate_chart_config's check: generate_chart's own parser run on a config, without rendering.

:func:`validate` runs :func:`mcp_bridge.tools.charting.chart_request` — the parser
generate_chart itself uses (:func:`parse_chart`) — so validation and rendering cannot disagree on what is accepted.
The parser stops at the first bad field; each one found is reported (with the fix) and left
out so the next run finds the next.  On top: unknown keys (chart-img's ``studies``, ``range``,
``theme``... get their equivalent), an interval the chosen source cannot serve (the fetch
would fail), and warnings about charts that would render badly.  The normalised config has
canonical names and every default filled, and passes the parser again.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

from pydantic import BaseModel

from engine import (
    YAHOO_INTERVALS,
    ChartRequest,
    IndicatorError,
    MarketDataError,
    all_indicators,
    detect_source,
    interval_seconds,
    is_crypto,
    parse_requests,
    to_binance,
)
from mcp_bridge.errors import ToolError
from mcp_bridge.tools.charting import MAX_INDICATORS, GenerateChartArgs, chart_request

ALIASES = (("ticker", "symbol"), ("timeframe", "interval"), ("indicators", "panels"))
FOREIGN_KEYS = {
    "studies": "use indicators: a list of names or {name, ...params} objects (see fetch_chart_documentation)",
    "range": "use bars: the chart covers bars × timeframe (e.g. 7 days of 1h = 168 bars)",
    "theme": "remove it: our charts are always dark",
    "style": "remove it: charts are candles (heikin_ashi is an overlay indicator)",
    "drawings": "remove it: drawings are not supported",
    "override": "remove it: styles cannot be overridden",
    "overrides": "remove it: styles cannot be overridden",
    "exchange": "remove it: give the ticker alone; source picks binance or yahoo",
    "timezone": "remove it: times are UTC",
}
YAHOO_ACCEPTS = frozenset({*YAHOO_INTERVALS, "1wk", "1mo", "60m", "90m"})
_LENGTH = re.compile(r"period|length|len$|slow|senkou_b|kijun|stoch_k")


class Issue(BaseModel):
    field: str
    message: str
    severity: Literal["error", "warning"]


class ValidationLimits(BaseModel):
    indicatorCount: int
    maxIndicators: int
    panelCount: int
    bars: int
    maxBars: int
    resolution: str
    maxResolution: str = "4096x4096"


class Validation(BaseModel):
    valid: bool
    errors: list[Issue]
    warnings: list[str]
    suggestions: list[str]
    normalized: dict[str, Any] | None
    limits: ValidationLimits


def parse_chart(config: dict[str, Any], max_bars: int) -> ChartRequest:
    """generate_chart's own parse of ``config`` (:func:`chart_request`)."""
    return chart_request(config, max_bars)


def _names() -> list[str]:
    return sorted({k for d in all_indicators() for k in (d.name, *d.aliases)})


def _field_of(message: str) -> str:
    if message.startswith("Unknown format"):
        return "format"
    if m := re.match(r"(indicators|panels)\[(\d+)\]", message):
        return f"indicators[{m.group(2)}]"
    for name in GenerateChartArgs.WIRE:
        if message.startswith((f"{name} ", f"{name}:")):
            return {"symbol": "ticker", "interval": "timeframe", "panels": "indicators"}.get(name, name)
    return "indicators"


def _indicator_hint(name: Any) -> str:
    if not isinstance(name, str):
        return ""
    base = name.split("@", 1)[0]
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", base).lower()
    from engine import INDICATOR_PHRASES

    if spaced in INDICATOR_PHRASES:
        return f"use {INDICATOR_PHRASES[spaced]!r}"
    close = difflib.get_close_matches(base.lower(), _names(), n=3, cutoff=0.5)
    return f"did you mean {', '.join(close)}?" if close else "see fetch_chart_documentation for the names"


def _fix(field: str, max_bars: int) -> str:
    return {
        "ticker": "use a ticker like BTCUSDT (Binance) or AAPL, ^GSPC (Yahoo), without an exchange prefix",
        "timeframe": "use 1m, 5m, 15m, 30m, 1h, 2h, 4h, 6h, 12h, 1d or 1w",
        "bars": f"use a whole number from 1 to {max_bars}",
        "width": "use 200 to 4096 pixels",
        "height": "use 150 to 4096 pixels",
        "format": "use png, summary, both or series",
        "source": "use auto, binance or yahoo",
        "all_signals": "use true or false",
    }.get(field, "fix the indicator (see fetch_chart_documentation)")


def _item_issues(items: Any) -> list[Issue]:
    if not isinstance(items, list):
        return []
    out = []
    for i, item in enumerate(items):
        try:
            parse_requests([item])
        except IndicatorError as exc:
            name = item.get("name") if isinstance(item, dict) else item
            text = str(exc).replace("indicators[0]", f"indicators[{i}]")
            hint = _indicator_hint(name) if "Unknown indicator" in text else ""
            out.append(
                Issue(field=f"indicators[{i}]", message=f"{text}{' — ' + hint if hint else ''}", severity="error")
            )
    return out


def validate(config: dict[str, Any], max_bars: int) -> Validation:
    """generate_chart's verdict on ``config`` (nothing rendered), with fixes and warnings."""
    issues: list[Issue] = []
    suggestions: list[str] = []
    known = set(GenerateChartArgs.WIRE)
    for key in config:
        if key not in known:
            fix = FOREIGN_KEYS.get(key, f"generate_chart ignores it; its arguments are {', '.join(sorted(known))}")
            issues.append(Issue(field=key, message=f"unknown key {key!r}: {fix}", severity="warning"))
    remaining = dict(config)
    request = None
    for _ in range(len(known) + 1):
        try:
            request = parse_chart(remaining, max_bars)
            break
        except ToolError as exc:
            field = _field_of(str(exc))
            if field.startswith("indicators"):
                items = _item_issues(remaining.get("indicators", remaining.get("panels")))
                issues += items or [Issue(field="indicators", message=str(exc), severity="error")]
                suggestions.append(_fix("indicators", max_bars))
                dropped: list[str] = [k for k in ("indicators", "panels") if k in remaining]
            else:
                dropped = [k for pair in ALIASES if field in pair for k in pair if k in remaining] or [field]
                given = dropped[0] if dropped[0] in config else field  # the key the caller used (symbol, interval)
                fix = _fix(field, max_bars)
                value = config.get(given)
                if field == "ticker" and isinstance(value, str) and ":" in value:
                    fix = f"drop the exchange prefix: use {value.rsplit(':', 1)[-1]!r} (source picks binance or yahoo)"
                issues.append(Issue(field=given, message=f"{exc} — {fix}", severity="error"))
                suggestions.append(fix)
            for k in dropped:
                remaining.pop(k, None)
            if not dropped:
                break
    errors = [i for i in issues if i.severity == "error"]
    warnings: list[str] = []
    normalized = None
    if request is not None and request.symbol is not None:
        source = detect_source(request.symbol) if request.source == "auto" else request.source
        bad = _interval_problem(source, request.interval)
        if bad:
            errors.append(Issue(field="timeframe", message=bad, severity="error"))
            issues.append(errors[-1])
    if request is not None and not errors:
        normalized = {
            "ticker": request.symbol,
            "timeframe": request.interval,
            "indicators": [{"name": r.definition.name, **r.params} for r in request.indicators],
            "bars": request.bars,
            "width": request.width,
            "height": request.height,
            "format": request.format,
            "source": request.source,
            "all_signals": request.all_signals,
        }
        warnings = _warnings(config, request)
        suggestions.append("valid: call generate_chart with this config (or the normalized one)")
    suggestions += [i.message.split(": ", 1)[-1] for i in issues if i.severity == "warning"]
    panels = sum(1 for r in request.indicators if not r.definition.is_overlay) if request else 0
    limits = ValidationLimits(
        indicatorCount=len(request.indicators) if request else 0,
        maxIndicators=MAX_INDICATORS,
        panelCount=panels,
        bars=request.bars if request else 0,
        maxBars=max_bars,
        resolution=f"{request.width}x{request.height}" if request else "",
    )
    return Validation(
        valid=not errors,
        errors=issues,
        warnings=warnings,
        suggestions=list(dict.fromkeys(suggestions)),
        normalized=normalized,
        limits=limits,
    )


def _interval_problem(source: str, interval: str) -> str | None:
    if source == "binance":
        try:
            to_binance(interval)
        except MarketDataError as exc:
            return f"{exc} — Binance would refuse the fetch"
        return None
    if interval not in YAHOO_ACCEPTS:
        return f"Yahoo has no {interval!r} bars; use one of {', '.join(YAHOO_INTERVALS)}"
    return None


def _warnings(config: dict[str, Any], request: ChartRequest) -> list[str]:
    out: list[str] = []
    image = request.format in ("png", "both")
    panels = [r for r in request.indicators if not r.definition.is_overlay]
    if request.symbol is None:
        out.append("no ticker: the chart draws seeded sample data")
    if image and len(panels) > 4 and request.height < 800:
        out.append(
            f"{len(panels)} panel indicators on a {request.height} px tall image leave each pane very short: "
            "use height ≥ 800 or fewer panels"
        )
    if image and request.width / request.bars < 1.5:
        out.append(
            f"{request.bars} bars on {request.width} px gives each candle under 1.5 px: use fewer bars or a wider image"
        )
    if not image and ("width" in config or "height" in config):
        out.append(f"format {request.format} has no image: width and height are ignored")
    names = [r.definition.name for r in request.indicators]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        out.append(f"indicators listed more than once: {', '.join(dupes)}")
    crypto = request.symbol is not None and (request.source == "binance" or is_crypto(request.symbol))
    for name in ("funding", "oi", "long_short"):
        if name in names and not crypto:
            out.append(f"{name} has data for crypto pairs only (Binance USD-M futures)")
    if "oi" in names and _span_days(request) > 30:
        out.append("oi: Binance keeps about 30 days of open interest history; older bars stay empty")
    for r in request.indicators:
        longest = max((v for k, v in r.params.items() if _LENGTH.search(k) and isinstance(v, int)), default=0)
        if longest >= request.bars:
            out.append(f"{request.bars} bars is not more than {r.definition.name}'s length {longest}: mostly empty")
    return out


def _span_days(request: ChartRequest) -> float:
    try:
        return request.bars * interval_seconds(request.interval) / 86_400
    except (MarketDataError, KeyError):
        return 0.0
