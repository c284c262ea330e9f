"""Name resolution and the list_indicators payload.

Resolution is exact and case-sensitive on canonical names and aliases, as chartgen's is,
and additionally accepts the aliases chartgen's README promises but its code never
resolved (bb, kc, dc, st, psar, ichi, wt, cipher, cb).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from engine.indicators.base import IndicatorDef
from engine.indicators.params import IndicatorError


class UnknownIndicator(IndicatorError):
    """One or more requested names are not indicators."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(f"Unknown indicator(s): {', '.join(names)}. Call list_indicators to see available indicators.")


@cache
def _index() -> tuple[tuple[IndicatorDef, ...], dict[str, IndicatorDef]]:
    from engine.indicators.catalog import CATALOG

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


@dataclass(frozen=True, slots=True)
class IndicatorRequest:
    """One requested indicator: the key it was asked by, its definition, validated params."""

    key: str
    definition: IndicatorDef
    params: Mapping[str, Any]


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
