"""The WS-API ``executionReport`` event of a simulator order (user-data-stream.md's shape).

Includes the stop price ``P``, the order list ``g``, the execution id ``I``, the working time
``W`` (only once the order is on the book: an untriggered stop or a pending list leg has none),
``w``, ``M`` (true on a trade, as Binance's samples show), ``Q`` (``quoteOrderQty``), ``V``, the
expiry reason ``eR`` of an expired order and, for trailing stops, ``d`` and ``D``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.accounts import SimOrder


def _s(x: Decimal) -> str:
    return f"{x:.8f}"


def execution_report(
    order: SimOrder, exec_type: str, now: int, fill: dict[str, Any] | None, exec_id: int
) -> dict[str, Any]:
    """The report of ``order`` after an ``exec_type`` change (``fill``: the trade, for TRADE)."""
    on_book = order.status in ("NEW", "PARTIALLY_FILLED") and order.working != -1
    if order.type == "MARKET":
        on_book = exec_type == "NEW"  # Binance's samples: a MARKET order's NEW says w=true, its trades false
    report: dict[str, Any] = {
        "e": "executionReport",
        "E": now,
        "s": order.symbol,
        "c": order.client_order_id,
        "S": order.side,
        "o": order.type,
        "f": order.time_in_force or "GTC",
        "q": _s(order.orig_qty),
        "p": _s(order.price),
        "P": _s(order.stop_price or Decimal(0)),
        "F": "0.00000000",
        "g": order.order_list_id,
        "C": order.client_order_id if exec_type == "CANCELED" else "",
        "x": exec_type,
        "X": order.status,
        "r": "NONE",
        "i": order.order_id,
        "l": fill["qty"] if fill else "0.00000000",
        "z": _s(order.executed_qty),
        "L": fill["price"] if fill else "0.00000000",
        "n": fill["commission"] if fill else "0",
        "N": fill["commissionAsset"] if fill else None,
        "T": now,
        "t": fill["id"] if fill else -1,
        "I": exec_id,
        "w": on_book,
        "m": bool(fill and fill["isMaker"]),
        "M": fill is not None,
        "O": order.time_ms,
        "Z": _s(order.cumulative_quote),
        "Y": (fill and _s(Decimal(fill["qty"]) * Decimal(fill["price"]))) or "0.00000000",
        "Q": _s(order.quote_qty or Decimal(0)),
        "V": order.stp_mode,
    }
    if order.working != -1:
        report["W"] = order.working
    if order.trailing_delta is not None:
        report["d"] = order.trailing_delta
        report["D"] = order.trailing_time
    if exec_type == "EXPIRED" and order.expiry_reason is not None:
        report["eR"] = order.expiry_reason
    return report
