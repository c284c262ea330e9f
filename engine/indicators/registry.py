"""Name resolution over the catalogue, the list_indicators payload, and which indicator emits which signal.

Resolution is exact and case-sensitive on canonical names and aliases, as chartgen's is,
and additionally accepts the aliases chartgen's README promises but its code never
resolved (bb, kc, dc, st, psar, ichi, wt, cipher, cb).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from engine.indicators.base import IndicatorDef, IndicatorRequest
from engine.indicators.catalog import CATALOG
from engine.indicators.params import IndicatorError
from engine.signals import SIGNAL_LABELS


class UnknownIndicator(IndicatorError):
    """One or more requested names are not indicators."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(f"Unknown indicator(s): {', '.join(names)}. Call list_indicators to see available indicators.")


@cache
def _index() -> tuple[tuple[IndicatorDef, ...], dict[str, IndicatorDef]]:
    by_name: dict[str, IndicatorDef] = {}
    for d in CATALOG:
        for key in (d.name, *d.aliases):
            if key in by_name:
                raise RuntimeError(f"indicator name {key!r} is registered twice")
            by_name[key] = d
    return CATALOG, by_name


def all_indicators() -> tuple[IndicatorDef, ...]:
    """Every indicator in registry (list_indicators) order."""
    return _index()[0]


def lookup(name: str) -> IndicatorDef | None:
    """The indicator for a canonical name or alias, or None."""
    return _index()[1].get(name)


def resolve(name: str) -> IndicatorDef:
    """The indicator for ``name``; raises UnknownIndicator."""
    d = lookup(name)
    if d is None:
        raise UnknownIndicator([name])
    return d


def parse_requests(items: list[Any]) -> list[IndicatorRequest]:
    """Turn a tool's ``indicators`` list (names or ``{"name":…, param: value}`` objects) into requests.

    Unknown names are collected and reported together; invalid parameters raise
    IndicatorParamError naming the indicator and parameter.
    """
    unknown: list[str] = []
    resolved: list[tuple[str, IndicatorDef, Mapping[str, Any] | None]] = []
    for pos, item in enumerate(items):
        if isinstance(item, str):
            name, raw = item, None
        elif isinstance(item, Mapping):
            given = item.get("name")
            if not isinstance(given, str) or not given:
                raise IndicatorError(
                    f"indicators[{pos}]: an indicator object needs a string 'name', "
                    'e.g. {"name": "rsi", "length": 21}'
                )
            name = given
            raw = item
        else:
            raise IndicatorError(
                f"indicators[{pos}]: expected an indicator name or an object with 'name', got {type(item).__name__}"
            )
        d = lookup(name)
        if d is None:
            if name not in unknown:
                unknown.append(name)
            continue
        resolved.append((name, d, raw))
    if unknown:
        raise UnknownIndicator(unknown)
    return [IndicatorRequest(key, d, d.configure(raw)) for key, d, raw in resolved]


def list_indicators_payload() -> dict[str, Any]:
    """The list_indicators tool payload (contract §3.1)."""
    defs = all_indicators()
    return {"total": len(defs), "indicators": [d.describe() for d in defs]}


def emitters() -> dict[str, tuple[str, ...]]:
    """For each signal label (engine.signals), the canonical names of the indicators that can emit it."""
    table: dict[str, list[str]] = {label: [] for label in SIGNAL_LABELS}
    for d in all_indicators():
        for label in d.signals:
            table[label].append(d.name)
    return {label: tuple(names) for label, names in table.items()}


def labels_of(indicator: str) -> tuple[str, ...]:
    """Labels the named indicator (canonical name or alias) can emit; empty if none or unknown."""
    d = lookup(indicator)
    return d.signals if d is not None else ()
