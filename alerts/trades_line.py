"""chartgen's trades.log line for a fired alert (contract §5.8): ``ALERT_TRIGGERED`` and its condition.

The format only (chartgen's spelling of floats and conditions), apart from the writer that
reads fired alerts and appends their lines (alerts.audit_log).
"""

from __future__ import annotations

import time


def rust_float(x: float | None) -> str:
    """Rust's ``{:?}`` of an f64 (``50000.0``, ``0.85``, ``1e20``), as chartgen writes it."""
    if x is None:
        return "NaN"
    text = repr(float(x))
    return text.replace("e+", "e")


def trades_line(
    alert_id: str,
    fired_at: float,
    kind: str,
    threshold: float | None,
    indicator: str | None,
    signal: str | None,
    symbol: str,
    interval: str,
) -> str:
    """The line for the alert ``alert_id`` that fired at ``fired_at`` (Unix seconds)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fired_at))
    if kind == "price_above":
        cond = f"PriceAbove({rust_float(threshold)})"
    elif kind == "price_below":
        cond = f"PriceBelow({rust_float(threshold)})"
    else:
        cond = f'IndicatorSignal {{ indicator: "{indicator}", signal: "{signal}" }}'
    return f"{stamp} ALERT_TRIGGERED id={alert_id} {cond} {symbol} {interval}"
