"""place_order's arguments: chartgen's checks in chartgen's order (and texts), plus ours, as Decimals.

Everything here is pure: no broker, no database.  :func:`parse_order` returns the normalised
fields the order service turns into an :class:`~brokers.models.OrderRequest`.
"""

from __future__ import annotations

import re
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

CLIENT_ID = re.compile(r"^[.A-Z:/a-z0-9_-]{1,36}$")


class OrderInputError(ValueError):
    """Arguments the caller must correct; ``code`` is an MCP error code when one applies."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def plain_decimal(x: Decimal | float) -> str:
    """A number as plain decimal text without exponent or trailing zeros (60000, 0.001)."""
    d = x if isinstance(x, Decimal) else Decimal(str(x))
    return format(d.normalize(), "f")


def _decimal(name: str, value: Any, *, required: bool) -> Decimal | None:
    if value is None:
        if required:
            raise OrderInputError(f"{name} must be > 0")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise OrderInputError(f"{name} must be a number; got {type(value).__name__}")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise OrderInputError(f"{name} must be a number; got {str(value)[:40]!r}") from None
    if not d.is_finite():
        raise OrderInputError(f"{name} must be a finite number")
    if d <= 0:
        raise OrderInputError(f"{name} must be > 0")
    if d > Decimal("1e15"):
        raise OrderInputError(f"{name} is too large (at most 1e15)")
    return d


def parse_order(args: dict[str, Any]) -> dict[str, Any]:
    """chartgen's place_order checks, in its order, plus ours; returns normalised fields."""
    known = {"symbol", "side", "type", "quantity", "price", "time_in_force", "client_order_id", "quote_quantity"}
    symbol = args.get("symbol")
    if symbol is None or symbol == "":
        raise OrderInputError("symbol is required")
    if not isinstance(symbol, str) or not symbol.strip().isalnum() or len(symbol) > 20:
        raise OrderInputError("symbol must be an exchange symbol such as BTCUSDT", code=-32003)
    side = args.get("side")
    if not isinstance(side, str) or side.lower() not in ("buy", "sell"):
        raise OrderInputError("side must be 'buy' or 'sell'")
    unknown = set(args) - known
    if unknown:
        raise OrderInputError(
            f"unknown argument(s) {sorted(map(str, unknown))[:5]}; place_order takes {', '.join(sorted(known))}"
        )
    otype = args.get("type", "market")
    if not isinstance(otype, str) or otype.lower() not in ("market", "limit", "limit_maker"):
        raise OrderInputError("type must be 'market' or 'limit' (or 'limit_maker')")
    otype = otype.lower()
    price = None
    if otype in ("limit", "limit_maker"):
        if args.get("price") is None or isinstance(args.get("price"), bool):
            raise OrderInputError("price is required for limit orders")
        price = _decimal("price", args.get("price"), required=True)
    elif args.get("price") is not None:
        raise OrderInputError("price applies to limit orders only; omit it for a market order")
    quote_qty = _decimal("quote_quantity", args.get("quote_quantity"), required=False)
    if quote_qty is not None and otype != "market":
        raise OrderInputError("quote_quantity applies to market orders only")
    qty = _decimal("quantity", args.get("quantity"), required=quote_qty is None)
    if qty is not None and quote_qty is not None:
        raise OrderInputError("give quantity or quote_quantity, not both")
    tif = args.get("time_in_force")
    if tif is not None:
        if otype != "limit" or not isinstance(tif, str) or tif.upper() not in ("GTC", "IOC", "FOK"):
            raise OrderInputError("time_in_force must be GTC, IOC or FOK, and only for limit orders")
        tif = tif.upper()
    elif otype == "limit":
        tif = "GTC"
    client_id = args.get("client_order_id")
    if client_id is not None and (not isinstance(client_id, str) or not CLIENT_ID.match(client_id)):
        raise OrderInputError("client_order_id must be 1-36 characters of letters, digits and . : / _ -")
    return {
        "symbol": symbol.strip().upper(),
        "side": side.upper(),
        "type": otype.upper(),
        "quantity": qty,
        "quote_quantity": quote_qty,
        "price": price,
        "time_in_force": tif,
        "client_order_id": client_id or str(uuid.uuid4()),
    }
