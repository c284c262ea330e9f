"""construct_chart_config's reader: a sentence → generate_chart arguments, deterministically.

No model, no network: regular expressions over our own word lists
(:mod:`engine.charts.config_vocabulary`), the indicator registry (every indicator phrase maps
to a registry name, every parameter is checked by the registry's own ``Param``), the chart-img
seed's range → interval rule (:mod:`engine.charts.config_time`) and the asset reader
(:mod:`engine.charts.config_assets`).  The sentence is read in a fixed order and each match
consumes its words, so "200-day moving average" is an indicator and not a range:
size → indicators → format and theme → explicit bars → ranges → intervals → exchange words →
assets.  The answer is the config, what was read from which words, and warnings for anything
ambiguous, adapted or defaulted.  Only an unknown asset is an error (:class:`UnknownAsset`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.charts.config_assets import (
    Asset,
    Scan,
    UnknownAsset,
    crypto,
    find_assets,
    from_symbol,
    on_venue,
    unknown_asset,
)
from engine.charts.config_time import (
    INTERVAL_COMPACT,
    INTERVAL_ON,
    INTERVAL_WORDY,
    RANGE_BARE,
    RANGE_LAST,
    RANGE_TODAY,
    RANGE_YTD,
    YAHOO_INTERVALS,
    Span,
    bars_for,
    interval_for,
    interval_of,
    interval_seconds,
    number,
    preference_range,
    span_of,
    unit_name,
    ytd,
)
from engine.charts.config_vocabulary import (
    EMA_STACK_LENGTHS,
    EXCHANGE_WORDS,
    FORMAT_PHRASES,
    INDICATOR_CAPS,
    INDICATOR_PHRASES,
    INTERVAL_WORDS,
    SIZES,
    THEME_WORDS,
)
from engine.indicators.params import IndicatorParamError
from engine.indicators.registry import resolve
from engine.market_data.intervals import BINANCE_INTERVALS

__all__ = ["Built", "UnknownAsset", "build"]

DEFAULT_INTERVAL = "4h"
DEFAULT_BARS = 200
DEFAULT_SIZE = (1920, 1080)
"""generate_chart's own defaults (a test checks them against its wire schema)."""
WIDTH_RANGE, HEIGHT_RANGE = (200, 4096), (150, 4096)


def _phrases(words: list[str]) -> re.Pattern[str]:
    alts = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9])(?:{alts})(?![a-z0-9])")


INDICATOR_RE = _phrases(list(INDICATOR_PHRASES))
INDICATOR_CAPS_RE = re.compile(r"(?<![\w])(" + "|".join(INDICATOR_CAPS) + r")(?![\w])")
FORMAT_RE = _phrases(list(FORMAT_PHRASES))
THEME_RE = _phrases(list(THEME_WORDS))
SIZE_WORDS_RE = _phrases(list(SIZES))
SIZE_RE = re.compile(r"(?<![\d])(\d{3,4})\s*[x×*]\s*(\d{3,4})(?![\d])")
BARS_RE = re.compile(r"(?<![\w.])(\d{1,5})\s*(?:bars|candles|candlesticks)(?![\w])")
INTERVAL_WORDS_RE = _phrases(list(INTERVAL_WORDS))
EXCHANGE_RE = _phrases(list(EXCHANGE_WORDS))
VOLUME_RE = re.compile(r"(?<![a-z0-9])volume(?![a-z0-9])")
_UNITS_AFTER = r"(?:days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?|bars?|candles?|[mhdwy])(?![a-z])"
_GUARD = rf"(?![\d.]|\s*[x×*]\s*\d|\s*-?\s*{_UNITS_AFTER})"
FIRST_NUM = re.compile(
    r"\s*(?:\(|:|-)?\s*(?:(?:with\s+)?(?:a\s+)?(?:length|period|len)\s*(?:=|of)?\s*)?(\d+(?:\.\d+)?)" + _GUARD
)
NEXT_NUM = re.compile(r"\s*(?:,|/|&|and)?\s*(\d+(?:\.\d+)?)" + _GUARD)
PREFIX_NUM = re.compile(r"(?<![\w.])(\d+)(?:\s*-\s*(?:period|day|bar|length)|\s+(?:period|day|bar|length))?\s+$")
_LENGTH_PARAM = re.compile(r"period|length|len$|slow|senkou_b|kijun|stoch_k")
_RANGE_LEAD = re.compile(r"(?:last|past|previous|over\s+the|for\s+the|the)\s*$")


@dataclass(slots=True)
class Built:
    """construct_chart_config's answer: the generate_chart arguments, how they were read, warnings."""

    config: dict[str, Any]
    reasoning: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Indicator:
    name: str
    params: dict[str, Any]


def build(
    text: str,
    *,
    symbol: str | None = None,
    exchange: str | None = None,
    preferences: dict[str, Any] | None = None,
    max_bars: int = 5000,
    now: datetime | None = None,
) -> Built:
    """generate_chart arguments for ``text``; raises :class:`UnknownAsset` for an asset we cannot name."""
    prefs = preferences or {}
    now = now or datetime.now(UTC)
    scan = Scan(text)
    out = Built(config={})
    why, warn = out.reasoning, out.warnings
    size = _size(scan, prefs.get("resolution"), why, warn)
    indicators = _indicators(scan, why, warn)
    fmt = _format_and_theme(scan, prefs.get("theme"), why, warn)
    bars_m = scan.take(BARS_RE)
    named = [*scan.take(INTERVAL_WORDY), *scan.take(INTERVAL_ON)]  # "4 hour candles": an interval, not a range
    span = _range(scan, prefs.get("range"), now, why, warn)
    interval = _interval(scan, named, prefs.get("interval"), why, warn)
    hinted = [EXCHANGE_WORDS[m.group(0)] for m in scan.take(EXCHANGE_RE)]
    venue = exchange.upper() if exchange and exchange.upper() in ("BINANCE", "YAHOO") else exchange
    asset = _asset(scan, symbol, venue or (hinted[0] if hinted else None), why, warn)

    if interval is None and span is not None:
        interval, rule = interval_for(span)
        why.append(f"interval {interval}: the seed's rule, {rule}")
    if interval is not None and asset.source == "yahoo" and interval not in YAHOO_INTERVALS:
        wanted_s = interval_seconds(interval)
        chosen = min(YAHOO_INTERVALS, key=lambda i: abs(interval_seconds(i) - wanted_s))
        warn.append(f"Yahoo has no {interval} bars; {chosen} used")
        interval = chosen
    if interval is None:
        interval = DEFAULT_INTERVAL
        warn.append(f"no time range or interval given: generate_chart's default {DEFAULT_BARS} × {interval} bars used")
    bars = DEFAULT_BARS
    if span is not None:
        bars = bars_for(span, interval, asset.calendar)
        why.append(f"bars {bars}: {span.label} of {interval} bars on a {_calendar(asset.calendar)} market")
    if bars_m:
        asked = int(bars_m[0].group(1))
        if span is not None:
            warn.append(f"'{bars_m[0].group(0)}' and a range were both given: {asked} bars used")
        bars = asked
        why.append(f"bars {asked} from '{bars_m[0].group(0)}'")
    if bars > max_bars:
        warn.append(f"{bars} bars is more than this daemon's max_bars {max_bars}: capped at {max_bars}")
        bars = max_bars
    bars = max(1, bars)
    _warm_up_warning(indicators, bars, warn)

    config: dict[str, Any] = {"ticker": asset.ticker, "timeframe": interval, "bars": bars}
    if indicators:
        config["indicators"] = [{"name": i.name, **i.params} if i.params else i.name for i in indicators]
    else:
        why.append("no indicator named: generate_chart's default set is drawn")
    if fmt in ("png", "both"):
        config["width"], config["height"] = size
    config["format"] = fmt
    if (asset.source == "yahoo" and asset.calendar == "crypto") or venue in ("BINANCE", "YAHOO"):
        config["source"] = asset.source
    out.config = config
    return out


def _size(scan: Scan, pref: Any, why: list[str], warn: list[str]) -> tuple[int, int]:
    size = DEFAULT_SIZE
    found = scan.take(SIZE_RE)
    if found:
        size = (int(found[0].group(1)), int(found[0].group(2)))
        why.append(f"size {size[0]}x{size[1]} from '{found[0].group(0)}'")
    for m in scan.take(SIZE_WORDS_RE):
        if not found:
            size = SIZES[m.group(0)]
            why.append(f"size {size[0]}x{size[1]} from '{m.group(0)}'")
            found = [m]
    if isinstance(pref, str) and pref.strip():
        given = SIZE_RE.fullmatch(pref.strip().lower())
        if given is None:
            warn.append(f"preferences.resolution {pref!r} is not WxH (e.g. 1200x675): ignored")
        else:
            size = (int(given.group(1)), int(given.group(2)))
            why.append(f"size {size[0]}x{size[1]} from preferences.resolution")
    w = min(max(size[0], WIDTH_RANGE[0]), WIDTH_RANGE[1])
    h = min(max(size[1], HEIGHT_RANGE[0]), HEIGHT_RANGE[1])
    if (w, h) != size:
        warn.append(f"size {size[0]}x{size[1]} is outside 200–4096 × 150–4096: {w}x{h} used")
    return w, h


def _indicators(scan: Scan, why: list[str], warn: list[str]) -> list[_Indicator]:
    hits = [(m, INDICATOR_PHRASES[m.group(0)]) for m in scan.take(INDICATOR_RE)]
    hits += [(m, INDICATOR_CAPS[m.group(1)]) for m in scan.take(INDICATOR_CAPS_RE, scan.text)]
    out: list[_Indicator] = []
    for m, name in sorted(hits, key=lambda h: h[0].start()):
        numbers = _numbers_after(scan, m.end()) or _number_before(scan, m.start())
        words = m.group(0)
        params = _params(name, numbers, words, why, warn)
        if words in ("sma", "smas", "simple moving average", "simple moving averages"):
            warn.append(f"'{words}': there is no simple moving average indicator; ema_stack (EMA 8/21/50/200) used")
        item = _Indicator(name, params)
        if item not in out:
            out.append(item)
            shown = f" {params}" if params else ""
            given = " ".join(f"{n:g}" for n in numbers)
            why.append(f"indicator {name}{shown} from '{words}" + (f" {given}'" if given else "'"))
    plain = scan.take(VOLUME_RE)
    if plain:
        why.append("'volume': volume bars are drawn under the candles of every chart (no indicator added)")
    return out


def _numbers_after(scan: Scan, pos: int) -> list[float]:
    nums: list[float] = []
    m = FIRST_NUM.match(scan.low, pos)
    while m is not None and scan.free(m.start(1), m.end(1)):
        nums.append(float(m.group(1)))
        scan.consume(pos, m.end())
        pos = m.end()
        m = NEXT_NUM.match(scan.low, pos)
    if nums and scan.low.startswith(")", pos):
        scan.consume(pos, pos + 1)
    return nums


def _number_before(scan: Scan, start: int) -> list[float]:
    m = PREFIX_NUM.search(scan.low[:start])
    if m is None or not scan.free(m.start(), m.end()) or _RANGE_LEAD.search(scan.low[: m.start()]):
        return []
    scan.consume(m.start(), m.end())
    return [float(m.group(1))]


def _params(name: str, numbers: list[float], words: str, why: list[str], warn: list[str]) -> dict[str, Any]:
    if not numbers:
        return {}
    if name == "ema_stack":
        lengths = [int(n) for n in numbers]
        missing = [n for n in lengths if n not in EMA_STACK_LENGTHS]
        fixed = "/".join(map(str, EMA_STACK_LENGTHS))
        if missing:
            warn.append(f"ema_stack draws fixed EMAs {fixed}; EMA {', '.join(map(str, missing))} cannot be drawn")
        else:
            why.append(f"EMA {', '.join(map(str, lengths))} are among ema_stack's fixed EMAs {fixed}")
        return {}
    numeric = [p for p in resolve(name).params if p.type in ("integer", "number")]
    if not numeric:
        warn.append(f"{name} takes no parameters: the numbers after '{words}' are ignored")
        return {}
    params: dict[str, Any] = {}
    for p, value in zip(numeric, numbers, strict=False):
        raw: Any = int(value) if p.type == "integer" and value.is_integer() else value
        try:
            params[p.name] = p.validate(name, raw)
        except IndicatorParamError as exc:
            warn.append(f"{exc}: the default {p.default} is used")
    if len(numbers) > len(numeric):
        warn.append(f"{name} has {len(numeric)} numeric parameter(s); extra numbers after '{words}' are ignored")
    return params


def _format_and_theme(scan: Scan, theme_pref: Any, why: list[str], warn: list[str]) -> str:
    fmt = "png"
    for m in scan.take(FORMAT_RE):
        chosen = FORMAT_PHRASES[m.group(0)]
        if fmt != "png" and chosen != fmt:
            warn.append(f"several formats named: {fmt} kept, '{m.group(0)}' ignored")
            continue
        fmt = chosen
        why.append(f"format {fmt} from '{m.group(0)}'")
    themes = [(THEME_WORDS[m.group(0)], f"'{m.group(0)}'") for m in scan.take(THEME_RE)]
    if isinstance(theme_pref, str) and theme_pref.strip():
        themes.append((THEME_WORDS.get(theme_pref.strip().lower(), theme_pref), "preferences.theme"))
    for theme, where in themes:
        if theme == "dark":
            why.append(f"theme dark from {where} (our charts are always dark)")
        else:
            warn.append(f"theme {theme!r} from {where}: our PNG charts have one theme, dark; it is used")
    return fmt


def _range(scan: Scan, pref: Any, now: datetime, why: list[str], warn: list[str]) -> Span | None:
    found: list[tuple[int, Span, str]] = []
    for m in scan.take(RANGE_YTD):
        found.append((m.start(), ytd(now), m.group(0)))
    for m in scan.take(RANGE_TODAY):
        found.append((m.start(), span_of(1, "day"), m.group(0)))
    for m in scan.take(RANGE_LAST):
        found.append((m.start(), span_of(number(m.group(1)), unit_name(m.group(2))), m.group(0)))
    for m in scan.take(RANGE_BARE):
        found.append((m.start(), span_of(number(m.group(1)), unit_name(m.group(2))), m.group(0)))
    found.sort(key=lambda f: f[0])
    span = None
    if found:
        _, span, words = found[0]
        why.append(f"range {span.label} from '{words}'")
        if len(found) > 1:
            warn.append(f"several ranges named: '{words}' used, {', '.join(repr(f[2]) for f in found[1:])} ignored")
    if isinstance(pref, str) and pref.strip():
        from_pref = preference_range(pref, now)
        if from_pref is None:
            warn.append(f"preferences.range {pref!r} is not a range like 7D, 1M, 3M, 1Y or YTD: ignored")
        else:
            if span is not None:
                warn.append(f"preferences.range {pref} replaces the range read from the text")
            span = from_pref
            why.append(f"range {span.label} from preferences.range")
    return span


def _interval(scan: Scan, named: list[re.Match[str]], pref: Any, why: list[str], warn: list[str]) -> str | None:
    found: list[tuple[int, str, str]] = []
    for m in named:
        found.append((m.start(), interval_of(m.group(1), m.group(2)), m.group(0).strip()))
    for m in scan.take(INTERVAL_COMPACT):
        found.append((m.start(), interval_of(m.group(1), m.group(2)), m.group(0)))
    for m in scan.take(INTERVAL_WORDS_RE):
        found.append((m.start(), INTERVAL_WORDS[m.group(0)], m.group(0)))
    found = [f for f in found if _known_interval(f[1], f[2], warn)]
    found.sort(key=lambda f: f[0])
    chosen = None
    if found:
        _, chosen, words = found[0]
        why.append(f"interval {chosen} from '{words}'")
        if len({f[1] for f in found}) > 1:
            warn.append(f"several intervals named: {chosen} used")
    if isinstance(pref, str) and pref.strip():
        value = pref.strip()
        if _known_interval(value, "preferences.interval", warn):
            chosen = value
            why.append(f"interval {value} from preferences.interval")
    return chosen


def _known_interval(interval: str, words: str, warn: list[str]) -> bool:
    if interval in BINANCE_INTERVALS:
        return True
    warn.append(f"'{words}': {interval} is not an interval here ({', '.join(BINANCE_INTERVALS)}); ignored")
    return False


def _asset(scan: Scan, symbol: str | None, venue: str | None, why: list[str], warn: list[str]) -> Asset:
    found = find_assets(scan, scan.text)
    if symbol:
        asset = from_symbol(symbol)
        why.append(f"ticker {asset.ticker} from the symbol argument")
        if found:
            why.append(f"(the text also named {', '.join(repr(f[1].words) for f in found)}; symbol wins)")
    elif found:
        _, asset, note = found[0]
        why.append(f"'{asset.words}' → {asset.label}")
        if note:
            warn.append(note)
        others = sorted({f[1].ticker for f in found[1:] if f[1].ticker != asset.ticker})
        if others:
            warn.append(f"several assets named: {asset.ticker} charted, {', '.join(others)} not (one chart per call)")
    else:
        problem = unknown_asset(scan, scan.text)
        if problem is not None:
            raise problem
        asset = crypto("BTC", "(default)")
        warn.append("no asset named: BTCUSDT used (name one, or pass symbol)")
    return on_venue(asset, venue, why, warn)


def _calendar(calendar: str) -> str:
    return {"crypto": "24/7", "fx": "24 h × 5 days", "stock": "6.5 h × 5 days"}.get(calendar, calendar)


def _warm_up_warning(indicators: list[_Indicator], bars: int, warn: list[str]) -> None:
    for ind in indicators:
        d = resolve(ind.name)
        values = {p.name: p.default for p in d.params} | ind.params
        lengths = [values[p.name] for p in d.params if _LENGTH_PARAM.search(p.name) and isinstance(values[p.name], int)]
        longest = max(lengths, default=0)
        if longest >= bars:
            warn.append(f"{bars} bars is not more than {ind.name}'s length {longest}: its line will be mostly empty")
