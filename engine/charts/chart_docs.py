"""fetch_chart_documentation's catalogue, generated from the indicator registry (never kept by hand).

Indicators: every registry entry with its display name, kind (overlay, panel, external), a
family read from the words of its registry description (:func:`family_of`; null when the
description names none), every parameter with type, default, description and bounds,
aliases and signal labels.  Chart parameters and limits come from the caller (the tool
layer passes generate_chart's own schema and constants, so the two cannot drift); the
examples are construct_chart_config's answers to :data:`EXAMPLE_PHRASES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.charts.config_builder import build
from engine.charts.config_time import YAHOO_INTERVALS
from engine.charts.config_vocabulary import EXAMPLE_PHRASES
from engine.charts.gate import DEFAULT_MAX_QUEUED
from engine.indicators.base import IndicatorDef
from engine.indicators.params import Param
from engine.indicators.registry import all_indicators
from engine.indicators.warmup import MAX_WARMUP_BARS
from engine.market_data.intervals import BINANCE_INTERVALS

WARMUP_DOC_INTERVAL = "4h"
"""The interval the catalogue's warmupBars are given for (only session indicators such as vwap depend on it)."""

KINDS = {
    "overlay": "overlay: drawn on the price pane",
    "panel": "panel: its own pane under the price",
    "external": "external: its own pane, data fetched from the network (Binance futures, alternative.me)",
}

_FAMILY_WORDS: tuple[tuple[str, str], ...] = (
    ("volume", "Volume"),
    ("money flow", "Volume"),
    ("volatility", "Volatility"),
    ("bands", "Volatility"),
    ("channels", "Volatility"),
    ("momentum", "Momentum"),
    ("oscillator", "Momentum"),
    ("rsi", "Momentum"),
    ("stochastic", "Momentum"),
    ("trend", "Trend"),
    ("support/resistance", "Support/Resistance"),
    ("sentiment", "Sentiment"),
    ("futures", "Derivatives"),
)
FAMILY_RULE = (
    "family: the first of these words in the registry description's opening (before 'Formula:'): "
    + ", ".join(f"{w} → {f}" for w, f in _FAMILY_WORDS)
    + "; null when none appears"
)


def family_of(d: IndicatorDef) -> str | None:
    """The family the registry's description names first (see :data:`FAMILY_RULE`), or None."""
    head = d.description.split("Formula:", 1)[0].lower()
    best: tuple[int, str] | None = None
    for word, family in _FAMILY_WORDS:
        m = re.search(rf"(?<![a-z]){re.escape(word)}(?![a-z])", head)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), family)
    return best[1] if best else None


def display_name(d: IndicatorDef) -> str:
    """The registry description's title (``Bollinger Bands — …`` → ``Bollinger Bands``)."""
    return d.description.split(" — ", 1)[0].strip() or d.name


def param_doc(p: Param) -> dict[str, Any]:
    out: dict[str, Any] = {"type": p.type, "default": p.default, "description": p.description or p.name}
    if p.minimum is not None:
        out["min"] = p.minimum
        if p.exclusive_minimum:
            out["exclusiveMin"] = True
    if p.maximum is not None:
        out["max"] = p.maximum
    if p.choices:
        out["choices"] = list(p.choices)
    if p.nullable:
        out["nullable"] = True
    return out


def indicator_doc(d: IndicatorDef) -> dict[str, Any]:
    return {
        "name": d.name,
        "displayName": display_name(d),
        "category": d.kind,
        "family": family_of(d),
        "description": d.description,
        "inputs": {p.name: param_doc(p) for p in d.params},
        "aliases": list(d.aliases),
        "signals": list(d.signals),
        "warmupBars": d.warmup_bars(d.configure(None), WARMUP_DOC_INTERVAL),
    }


@dataclass(frozen=True, slots=True)
class ChartSurface:
    """What generate_chart accepts, as the tool layer knows it (its schema and constants)."""

    max_bars: int
    max_indicators: int
    formats: tuple[str, ...]
    sources: tuple[str, ...]
    default_indicators: tuple[str, ...]
    defaults: dict[str, Any]
    width_range: tuple[int, int]
    height_range: tuple[int, int]


def chart_parameters(surface: ChartSurface) -> dict[str, Any]:
    return {
        "intervals": {"binance": list(BINANCE_INTERVALS), "yahoo": list(YAHOO_INTERVALS)},
        "formats": {
            "png": "the chart image",
            "summary": "a compact JSON digest: last values, levels, recent signals (no image; width/height ignored)",
            "both": "image and digest",
            "series": "every bar and every indicator value as JSON (width/height ignored)",
        },
        "formatOrder": list(surface.formats),
        "sources": {
            "auto": "Binance for tickers ending in a crypto quote (USDT, BTC, ...), Yahoo otherwise",
            "binance": "Binance spot klines",
            "yahoo": "Yahoo Finance charts (stocks, indices, ^GSPC, EURUSD=X, GC=F)",
        },
        "sourceOrder": list(surface.sources),
        "bars": {"min": 1, "max": surface.max_bars, "default": surface.defaults.get("bars")},
        "width": {
            "min": surface.width_range[0],
            "max": surface.width_range[1],
            "default": surface.defaults.get("width"),
        },
        "height": {
            "min": surface.height_range[0],
            "max": surface.height_range[1],
            "default": surface.defaults.get("height"),
        },
        "timeframeDefault": surface.defaults.get("timeframe"),
        "defaultIndicators": list(surface.default_indicators),
        "themes": ["dark"],
        "themeNote": "our PNG charts have one theme, dark (TradingView-like); there is no light theme",
        "styles": ["candle"],
        "styleNote": "candles with volume bars under them; Heikin Ashi is an overlay indicator (heikin_ashi)",
        "noTicker": "without a ticker the chart uses seeded sample data",
        "warmUp": (
            "bars is what is shown: each indicator is computed over the shown bars plus the history it needs "
            f"before the first one (warmupBars of each indicator, at its default parameters on {WARMUP_DOC_INTERVAL} "
            f"bars; at most {MAX_WARMUP_BARS}), so every line is defined from the left edge where that history "
            "exists; signals and values cover the shown bars only; payloads report warmup_bars"
        ),
    }


def limits(surface: ChartSurface) -> dict[str, Any]:
    return {
        "maxBars": surface.max_bars,
        "maxIndicatorsPerRequest": surface.max_indicators,
        "maxResolution": f"{surface.width_range[1]}x{surface.height_range[1]}",
        "render": {
            "perClient": "each client renders at most max_renders_per_principal charts at once (daemon setting)",
            "queuedPerClient": DEFAULT_MAX_QUEUED,
            "whenFull": "refused at once with RATE_LIMITED and a retry hint (retry_after_secs)",
        },
        "plans": "none: every caller has the same limits (planLevel is ignored)",
    }


def examples(surface: ChartSurface, now: datetime) -> list[dict[str, Any]]:
    """construct_chart_config's answers to the example phrases (each passes validate_chart_config)."""
    out = []
    for phrase in EXAMPLE_PHRASES:
        built = build(phrase, max_bars=surface.max_bars, now=now)
        out.append({"description": phrase, "config": built.config})
    return out


def documentation(surface: ChartSurface, section: str, now: datetime) -> dict[str, Any]:
    """The catalogue's ``section`` (indicators, parameters, exchanges is the caller's, or all)."""
    out: dict[str, Any] = {}
    if section in ("indicators", "all"):
        out["indicators"] = [indicator_doc(d) for d in all_indicators()]
        out["categories"] = KINDS
        out["familyRule"] = FAMILY_RULE
    if section in ("parameters", "all"):
        out["chartParameters"] = chart_parameters(surface)
        out["limits"] = limits(surface)
    if section == "all":
        out["examples"] = examples(surface, now)
    return out
