"""The order tracker's output shapes (place_order's answer, get_orders' entries) and a recorded
intent turned back into the request it stands for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from brokers.models import OrderRequest, order_type_of, side_of, state_name, time_in_force_of
from brokers.orders.args import plain_decimal as plain
from brokers.orders.store import OrderRow


def request_of(row: OrderRow) -> OrderRequest:
    """The order request a recorded intent stands for (to send it after a restart)."""
    extra = {k: getattr(row, k) for k in ("stop_price", "trailing_delta", "list_client_id") if hasattr(row, k)}
    return OrderRequest(
        symbol=row.symbol,
        side=side_of(row.side),
        type=order_type_of(row.type),
        client_order_id=row.client_order_id,
        quantity=row.quantity,
        quote_quantity=row.quote_quantity,
        price=row.price,
        time_in_force=time_in_force_of(row.time_in_force),
        owner=row.owner,
        **extra,
    )


def order_details(row: OrderRow) -> dict[str, Any]:
    """The fields place_order answers with besides its order id and state."""
    avg = row.avg_price
    return {
        "client_order_id": row.client_order_id,
        "exchange_status": row.status,
        "filled_quantity": float(row.executed_qty),
        "fill_price": None if avg is None else float(avg),
    }


def order_listing(row: OrderRow) -> dict[str, Any]:
    """One get_orders entry (chartgen's fields first)."""
    kind = "market" if row.type == "MARKET" else row.type.lower()
    kind += f"@{plain(row.price)}" if row.type != "MARKET" and row.price is not None else ""
    return {
        "id": row.client_order_id,
        "symbol": row.symbol,
        "side": row.side.lower(),
        "type": kind,
        "quantity": float(row.quantity) if row.quantity is not None else None,
        "state": state_name(row.status),
        "status": row.status,
        "time_in_force": row.time_in_force,
        "filled_quantity": float(row.executed_qty),
        "fill_price": None if row.avg_price is None else float(row.avg_price),
        "exchange_order_id": row.exchange_order_id,
        "reject_reason": row.reject_reason,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()
