"""Turning ``set_alert`` and ``subscribe_notifications`` arguments into validated specs.

The checks follow chartgen's order and texts where chartgen has them (``symbol is
required`` → ``condition is required`` → the condition's keys) and add what chartgen
lacks: finite positive numbers, a real indicator with a label it can emit (the error lists
the valid labels), a Binance interval, ``trigger``, ``expires_at`` in the future, a bounded
``note``, and no unknown keys.  Every message names the field and how to fix it.
Exchange-side checks (is the symbol listed?) happen later, in the alert service.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from alerts.models import AlertKind, Trigger, is_alert_kind
from engine import (
    SIGNAL_LABELS,
    IndicatorError,
    IndicatorRequest,
    MarketDataError,
    emitters,
    lookup,
    parse_requests,
    to_binance,
)

MAX_PRICE = 1e15
MAX_NOTE = 500
SET_ALERT_KEYS = frozenset({"symbol", "condition", "interval", "trigger", "expires_at", "note", "params", "action"})
CONDITION_KEYS = ("price_above", "price_below", "indicator_signal")


class AlertInputError(ValueError):
    """Arguments the caller must correct; the message says which and how."""


@dataclass(frozen=True, slots=True)
class AlertSpec:
    """A validated ``set_alert`` request (before the exchange check)."""

    symbol: str
    kind: AlertKind
    interval: str | None
    threshold: float | None = None
    indicator: str | None = None
    request: IndicatorRequest | None = None
    signal: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    trigger: Trigger = "touch"
    expires_at: float | None = None
    note: str | None = None
    order: dict[str, Any] | None = None
    """The ``action.place_order`` arguments as given (checked later by the order path)."""


def parse_action(value: Any, symbol: str) -> dict[str, Any] | None:
    """``action``: ``{"place_order": {...place_order arguments...}}``; the symbol defaults to the alert's."""
    if value is None:
        return None
    example = '{"place_order": {"side": "buy", "type": "market", "quantity": 0.01}}'
    if not isinstance(value, dict) or set(value) != {"place_order"}:
        raise AlertInputError(f"action must be an object with one key, place_order, e.g. {example}")
    order = value["place_order"]
    if not isinstance(order, dict):
        raise AlertInputError(f"action.place_order must be an object of place_order arguments, e.g. {example}")
    order = dict(order)
    given = order.setdefault("symbol", symbol)
    if isinstance(given, str) and given.strip().upper() != symbol:
        raise AlertInputError(
            f"action.place_order.symbol must be the alert's symbol {symbol} (or omitted); got {_short(given)}"
        )
    return order


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_price(name: str, value: Any) -> float:
    """A price level: a finite number > 0 and ≤ 1e15 (a numeric string is accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AlertInputError(
            f'{name} must be a number (the price level), e.g. {{"{name}": 70000}}; got {_short(value)}'
        )
    if isinstance(value, str):
        try:
            number = float(Decimal(value.strip()))
        except (InvalidOperation, ValueError):
            raise AlertInputError(f"{name} must be a number, e.g. 70000; got the string {_short(value)}") from None
    else:
        number = float(value)
    if not math.isfinite(number):
        raise AlertInputError(f"{name} must be a finite number; got {_short(value)}")
    if number <= 0:
        raise AlertInputError(f"{name} must be greater than 0; got {_short(value)}")
    if number > MAX_PRICE:
        raise AlertInputError(f"{name} must be at most {MAX_PRICE:g}; got {_short(value)}")
    return number


def parse_symbol(value: Any) -> str:
    if value is None or value == "":
        raise AlertInputError("symbol is required")
    if not isinstance(value, str):
        raise AlertInputError(f'symbol must be a string such as "BTCUSDT"; got {_short(value)}')
    symbol = value.strip().upper()
    if not symbol.isascii() or not symbol.isalnum() or len(symbol) > 20:
        raise AlertInputError(f'symbol must be 1-20 letters or digits such as "BTCUSDT"; got {_short(value)}')
    return symbol


def parse_interval(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 8:
        raise AlertInputError(f'interval must be a string such as "4h"; got {_short(value)}')
    try:
        return to_binance(value.strip())
    except MarketDataError as exc:
        raise AlertInputError(str(exc)) from None


def parse_expiry(value: Any, now: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise AlertInputError('expires_at must be an RFC 3339 time such as "2026-12-01T00:00:00Z" or unix seconds')
    if isinstance(value, (int, float)):
        ts = float(value)
    elif isinstance(value, str) and len(value) <= 40:
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise AlertInputError(
                f'expires_at must be an RFC 3339 time such as "2026-12-01T00:00:00Z"; got {_short(value)}'
            ) from None
        ts = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    else:
        raise AlertInputError('expires_at must be an RFC 3339 time such as "2026-12-01T00:00:00Z" or unix seconds')
    if not math.isfinite(ts) or ts <= now:
        raise AlertInputError("expires_at must be in the future")
    if ts > now + 366 * 86400 * 5:
        raise AlertInputError("expires_at must be within 5 years")
    return ts


def _parse_indicator(body: Any, top_params: Any) -> tuple[str, IndicatorRequest, str, dict[str, Any]]:
    if not isinstance(body, dict):
        raise AlertInputError("indicator_signal requires 'indicator' and 'signal' fields")
    unknown = set(body) - {"indicator", "signal", "params"}
    if unknown:
        raise AlertInputError(
            f"indicator_signal has unknown field(s) {sorted(map(str, unknown))}; allowed: indicator, signal, params"
        )
    indicator, signal = body.get("indicator"), body.get("signal")
    if not isinstance(indicator, str) or not indicator or not isinstance(signal, str) or not signal:
        raise AlertInputError("indicator_signal requires 'indicator' and 'signal' fields")
    params = body.get("params", top_params)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise AlertInputError(
            f'params must be an object of indicator parameters, e.g. {{"length": 14}}; got {_short(params)}'
        )
    definition = lookup(indicator)
    if definition is None:
        raise AlertInputError(f"unknown indicator {_short(indicator)}; call list_indicators for the names")
    if not definition.signals:
        has = sorted({name for names in emitters().values() for name in names})
        raise AlertInputError(
            f"indicator {definition.name!r} emits no signals; indicators with signals: {', '.join(has)}"
        )
    if signal not in definition.signals:
        hint = ""
        if signal in SIGNAL_LABELS:
            hint = f" ({signal!r} comes from {', '.join(emitters()[signal]) or 'no indicator'})"
        raise AlertInputError(
            f"{definition.name} cannot emit signal {_short(signal)}{hint}; "
            f"valid labels: {', '.join(definition.signals)}"
        )
    try:
        (request,) = parse_requests([{"name": definition.name, **params}])
    except IndicatorError as exc:
        raise AlertInputError(str(exc)) from None
    return indicator, request, signal, dict(params)


def parse_set_alert(args: dict[str, Any], now: float) -> AlertSpec:
    """Validate ``set_alert`` arguments (see the module docstring for the rules)."""
    symbol = parse_symbol(args.get("symbol"))
    condition = args.get("condition")
    if condition is None:
        raise AlertInputError("condition is required")
    unknown = set(args) - SET_ALERT_KEYS
    if unknown:
        raise AlertInputError(
            f"unknown argument(s) {sorted(map(str, unknown))[:5]}; set_alert takes {', '.join(sorted(SET_ALERT_KEYS))}"
        )
    if not isinstance(condition, dict):
        raise AlertInputError("condition must contain one of: price_above, price_below, or indicator_signal")
    present = [k for k in CONDITION_KEYS if k in condition]
    extra = set(condition) - set(CONDITION_KEYS)
    if not present or extra:
        raise AlertInputError("condition must contain one of: price_above, price_below, or indicator_signal")
    if len(present) > 1:
        raise AlertInputError(
            f"condition must contain exactly one of price_above, price_below, indicator_signal; got {present}"
        )
    kind = present[0]
    interval = parse_interval(args.get("interval"))
    trigger = args.get("trigger", "touch")
    if trigger not in ("touch", "close"):
        raise AlertInputError(
            'trigger must be "touch" (any trade reaching the level) or "close" (a closed bar\'s close); '
            f"got {_short(trigger)}"
        )
    note = args.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
        raise AlertInputError(f"note must be a string of at most {MAX_NOTE} characters")
    expires_at = parse_expiry(args.get("expires_at"), now)
    order = parse_action(args.get("action"), symbol)
    if kind == "indicator_signal":
        if "trigger" in args:
            raise AlertInputError(
                "trigger applies to price alerts only; an indicator_signal alert fires on a closed bar"
            )
        indicator, request, signal, params = _parse_indicator(condition[kind], args.get("params"))
        return AlertSpec(
            symbol,
            "indicator_signal",
            interval,
            indicator=indicator,
            request=request,
            signal=signal,
            params=params,
            expires_at=expires_at,
            note=note,
            order=order,
        )
    if "params" in args:
        raise AlertInputError("params applies to indicator_signal alerts only")
    threshold = parse_price(kind, condition[kind])
    assert is_alert_kind(kind)
    return AlertSpec(
        symbol,
        kind,
        interval,
        threshold=threshold,
        trigger=trigger,
        expires_at=expires_at,
        note=note,
        order=order,
    )


def parse_filter(name: str, value: Any, *, allowed: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """A subscription filter: a list of strings, or None/empty for "all" (chartgen drops non-strings)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise AlertInputError(f"{name} must be an array of strings (omit it for all)")
    if len(value) > 1000:
        raise AlertInputError(f"{name} may list at most 1000 entries")
    items = [v.strip() for v in value if isinstance(v, str) and v.strip()]
    if name == "symbols":
        items = [parse_symbol(v) for v in items]
    if allowed is not None:
        bad = [v for v in items if v not in allowed]
        if bad:
            raise AlertInputError(f"{name} has unknown value(s) {bad[:5]}; allowed: {', '.join(allowed)}")
    return tuple(dict.fromkeys(items)) or None
