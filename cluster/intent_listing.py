"""One get_orders entry at a cluster front: an order (or an order list's leg) as recorded in its
intent and last seen by the leader's mirror, in the single node's listing (brokers/orders/views.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from brokers import OPEN, BinanceBroker, ExchangeOrder, OrderRequest, OrderRow, order_listing


def intent_listing(
    req: OrderRequest, seen: ExchangeOrder | None, status: str, r: Any, body: dict[str, Any]
) -> dict[str, Any]:
    """``req`` as the exchange was last seen to have it (``seen``, ``status``); ``r`` the intent's row
    (state, times, the mirror's ``refreshed_at``), ``body`` its answer.  An order still open was
    current as of the mirror's last refresh; otherwise as of its answer."""
    mirrored = seen is not None and seen.status in OPEN and r["refreshed_at"] is not None
    updated = r["refreshed_at"] if mirrored else (r["answered_at"] or r["created_at"])
    row = OrderRow(
        client_order_id=req.client_order_id,
        broker=BinanceBroker.name,
        symbol=req.symbol,
        side=req.side,
        type=req.type,
        time_in_force=req.time_in_force,
        quantity=req.quantity,
        quote_quantity=req.quote_quantity,
        price=req.price,
        status=status,
        exchange_order_id=seen.exchange_order_id if seen is not None else None,
        executed_qty=seen.executed_qty if seen is not None else Decimal(0),
        cumulative_quote=seen.cumulative_quote if seen is not None else Decimal(0),
        reject_reason=body.get("error") if r["state"] == "rejected" else None,
        created_at=r["created_at"].timestamp(),
        updated_at=updated.timestamp(),
        owner=req.owner,
    )
    return order_listing(row)
