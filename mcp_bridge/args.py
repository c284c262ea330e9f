"""Reading tool arguments: chartgen's aliases and defaults, with clear errors for bad values.

chartgen parses leniently (a negative ``bars`` silently becomes the default); we keep its
names, aliases and defaults but refuse values that cannot be right, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp_bridge.errors import ToolError

_SYMBOL_RE = re.compile(r"^\^?[A-Za-z0-9][A-Za-z0-9.\-^=_/]{0,31}$")
_INTERVAL_RE = re.compile(r"^[0-9]{1,4}[a-zA-Z]{1,3}$")


def pick(args: Mapping[str, Any], *names: str) -> Any:
    """The first present (non-None) value among alias ``names``, in preference order."""
    for n in names:
        v = args.get(n)
        if v is not None:
            return v
    return None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def symbol_arg(value: Any, field: str, *, required: bool = False) -> str | None:
    """A ticker such as BTCUSDT, AAPL or ^GSPC (1-32 characters), or None if absent."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise ToolError(f"{field} is required")
        return None
    if not isinstance(value, str) or not _SYMBOL_RE.match(value.strip()):
        raise ToolError(
            f"{field} must be a ticker like BTCUSDT or AAPL (1-32 letters, digits or .-^=_/), got {_show(value)}"
        )
    return value.strip()


def interval_arg(value: Any, field: str, default: str = "4h") -> str:
    """An interval string such as 1m, 4h, 1d, 1w or 1wk (checked against the source when fetching)."""
    if value is None:
        return default
    if not isinstance(value, str) or not _INTERVAL_RE.match(value.strip()):
        raise ToolError(f"{field} must be an interval like 1m, 15m, 1h, 4h, 1d or 1w, got {_show(value)}")
    return value.strip()


def int_arg(value: Any, field: str, *, default: int, minimum: int, maximum: int) -> int:
    """A whole number within [minimum, maximum]; floats with an integral value are accepted."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"{field} must be a whole number between {minimum} and {maximum}, got {_show(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ToolError(f"{field} must be a whole number between {minimum} and {maximum}, got {_show(value)}")
        value = int(value)
    if not minimum <= value <= maximum:
        raise ToolError(f"{field} must be between {minimum} and {maximum}, got {value}")
    return value


def bool_arg(value: Any, field: str, *, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"{field} must be true or false, got {_show(value)}")
    return value


def choice_arg(value: Any, field: str, choices: tuple[str, ...], *, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise ToolError(f"{field} must be one of {', '.join(choices)}, got {_show(value)}")
    return value.strip().lower()
