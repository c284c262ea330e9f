"""Indicator parameters: declaration, defaults, and validation with messages that name the fix.

Each indicator declares its parameters as :class:`Param` records.  :func:`configure` turns
a caller's raw mapping (a tool argument object, a CLI option) into a complete, validated
parameter dict, or raises :class:`IndicatorParamError` naming the indicator, the parameter,
what was given and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ParamType = Literal["integer", "number", "string", "boolean"]

Params = Mapping[str, Any]
"""An indicator's validated parameters, as :func:`configure` returns them."""

MAX_PERIOD = 100_000


class IndicatorError(ValueError):
    """Base of the indicator errors a caller can fix (unknown name, bad parameter)."""


class IndicatorParamError(IndicatorError):
    """A parameter value is missing its type, range or allowed set."""


@dataclass(frozen=True, slots=True)
class Param:
    """One configurable parameter.

    ``minimum``/``maximum`` bound numbers (inclusive; ``exclusive_minimum`` makes the lower
    bound strict).  ``choices`` restricts strings; ``aliases`` maps extra accepted spellings
    onto a choice.  ``nullable`` lets ``null`` stand for "automatic".
    """

    name: str
    type: ParamType
    default: Any
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    nullable: bool = False

    def describe(self) -> dict[str, Any]:
        """The ``configurable_params`` entry of list_indicators."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, "default": self.default}
        if self.description:
            out["description"] = self.description
        return out

    def _bounds_text(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.exclusive_minimum else '≥'} {_fmt(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"≤ {_fmt(self.maximum)}")
        return " and ".join(parts)

    def validate(self, indicator: str, value: Any) -> Any:
        """Return the normalised value or raise IndicatorParamError."""
        where = f"{indicator}: parameter '{self.name}'"
        if value is None:
            if self.nullable:
                return None
            raise IndicatorParamError(f"{where} must not be null; omit it to use the default {self.default!r}")
        if self.type == "boolean":
            if isinstance(value, bool):
                return value
            raise IndicatorParamError(f"{where} must be true or false, got {value!r}")
        if self.type == "string":
            if not isinstance(value, str):
                raise IndicatorParamError(f"{where} must be a string, got {value!r}")
            if self.choices:
                key = value.strip().lower()
                mapped = dict(self.aliases).get(key, key)
                if mapped not in self.choices:
                    raise IndicatorParamError(
                        f"{where} must be one of {', '.join(repr(c) for c in self.choices)}, got {value!r}"
                    )
                return mapped
            return value
        # integer / number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "an integer" if self.type == "integer" else "a number"
            raise IndicatorParamError(f"{where} must be {kind}, got {value!r}")
        if not math.isfinite(value):
            raise IndicatorParamError(f"{where} must be a finite number, got {value!r}")
        if self.type == "integer":
            if isinstance(value, float):
                if not value.is_integer():
                    raise IndicatorParamError(f"{where} must be a whole number, got {value!r}")
                value = int(value)
        else:
            value = float(value)
        low_bad = self.minimum is not None and (
            value <= self.minimum if self.exclusive_minimum else value < self.minimum
        )
        high_bad = self.maximum is not None and value > self.maximum
        if low_bad or high_bad:
            raise IndicatorParamError(f"{where} must be {self._bounds_text()}, got {_fmt(value)}")
        return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def period(name: str, default: int, description: str = "", minimum: int = 1) -> Param:
    """A look-back length in bars (an integer ≥ ``minimum``)."""
    return Param(name, "integer", default, description, minimum=minimum, maximum=MAX_PERIOD)


def configure(indicator: str, params: tuple[Param, ...], raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``raw`` over the defaults and validate every given value.

    The key ``name`` (the indicator's own name in an indicator object) is ignored; any
    other unknown key is an error that lists the valid parameters.
    """
    values = {p.name: p.default for p in params}
    if not raw:
        return values
    by_name = {p.name: p for p in params}
    for key, value in raw.items():
        if key == "name":
            continue
        spec = by_name.get(key)
        if spec is None:
            valid = ", ".join(by_name) if by_name else "none (this indicator takes no parameters)"
            raise IndicatorParamError(f"{indicator}: unknown parameter '{key}'; valid parameters: {valid}")
        values[key] = spec.validate(indicator, value)
    return values
