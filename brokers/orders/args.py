"""place_order's arguments: chartgen's checks in chartgen's order (and texts), plus ours, as Decimals.

Everything here is pure: no broker, no database.  :func:`parse_order` returns the normalised
fields the order service turns into an :class:`~brokers.models.OrderRequest`;
:func:`parse_entry` also returns the optional ``bracket`` (an OCO attached to the entry) and
:func:`parse_oco` checks place_oco's arguments.

Protective types: ``stop_loss`` / ``take_profit`` (a market order once triggered) and
``stop_loss_limit`` / ``take_profit_limit`` (a limit order at ``price`` once triggered,
time_in_force GTC by default) need ``stop_price`` or ``trailing_delta`` (basis points, Binance
semantics: 1..10000 here, the exchange's TRAILING_DELTA filter narrows it) or both.  The seeds'
``stop`` type is read as ``stop_loss`` (``stop_loss_limit`` when a ``price`` is given).
"""

from __future__ import annotations

import re
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from brokers.models import OrderRequest

CLIENT_ID = re.compile(r"^[.A-Z:/a-z0-9_-]{1,36}$")
STOP_TYPE_NAMES = ("stop_loss", "stop_loss_limit", "take_profit", "take_profit_limit")
LIMIT_TYPE_NAMES = ("limit", "limit_maker", "stop_loss_limit", "take_profit_limit")
MAX_TRAILING_DELTA = 10000
BRACKET_KEYS = ("take_profit", "stop_loss", "stop_limit")


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


def _trailing_delta(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise OrderInputError(f"trailing_delta must be a whole number of basis points; got {type(value).__name__}")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise OrderInputError(
            f"trailing_delta must be a whole number of basis points; got {str(value)[:40]!r}"
        ) from None
    if not d.is_finite() or d != d.to_integral_value() or not 1 <= d <= MAX_TRAILING_DELTA:
        raise OrderInputError(
            f"trailing_delta must be a whole number of basis points from 1 to {MAX_TRAILING_DELTA} (100 = 1%)"
        )
    return int(d)


def parse_bracket(value: Any, side: str, entry_type: str, price: Decimal | None) -> dict[str, Decimal | None]:
    """place_order's ``bracket``: {take_profit, stop_loss[, stop_limit]} — an OCO on the other side."""
    if not isinstance(value, dict):
        raise OrderInputError('bracket must be an object such as {"take_profit": 70000, "stop_loss": 60000}')
    extra = set(value) - set(BRACKET_KEYS)
    if extra:
        raise OrderInputError(
            f"bracket does not take {sorted(map(str, extra))[:5]}; it takes {', '.join(BRACKET_KEYS)}"
        )
    if entry_type not in ("market", "limit", "limit_maker"):
        raise OrderInputError("bracket attaches to market, limit or limit_maker entries; remove it or change type")
    tp = _decimal("bracket.take_profit", value.get("take_profit"), required=True)
    sl = _decimal("bracket.stop_loss", value.get("stop_loss"), required=True)
    limit = _decimal("bracket.stop_limit", value.get("stop_limit"), required=False)
    assert tp is not None and sl is not None
    buy = side == "buy"
    if buy and not tp > sl:
        raise OrderInputError("bracket.take_profit must be above bracket.stop_loss for a buy entry (the exit sells)")
    if not buy and not tp < sl:
        raise OrderInputError("bracket.take_profit must be below bracket.stop_loss for a sell entry (the exit buys)")
    if price is not None and not (min(tp, sl) < price < max(tp, sl)):
        raise OrderInputError("the entry price must lie between bracket.stop_loss and bracket.take_profit")
    return {"take_profit": tp, "stop_loss": sl, "stop_limit": limit}


def parse_entry(args: dict[str, Any]) -> tuple[OrderRequest, dict[str, Decimal | None] | None]:
    """place_order's arguments: the order (no owner yet) and its ``bracket`` (None without one)."""
    if not isinstance(args, dict):
        raise OrderInputError("arguments must be an object")
    rest = {k: v for k, v in args.items() if k != "bracket"}
    order = OrderRequest(**parse_order(rest))
    if args.get("bracket") is None:
        return order, None
    if order.quantity is None:
        raise OrderInputError("a bracket needs quantity (the exit sells what the entry bought); omit quote_quantity")
    return order, parse_bracket(args["bracket"], order.side.lower(), order.type.lower(), order.price)


def parse_oco(args: dict[str, Any]) -> dict[str, Any]:
    """place_oco's arguments: symbol, side, quantity, take_profit_price, stop_price[, stop_limit_price]."""
    known = ("symbol", "side", "quantity", "take_profit_price", "stop_price", "stop_limit_price")
    if not isinstance(args, dict):
        raise OrderInputError("arguments must be an object")
    extra = set(args) - set(known)
    if extra:
        raise OrderInputError(f"unknown argument(s) {sorted(map(str, extra))[:5]}; place_oco takes {', '.join(known)}")
    symbol = args.get("symbol")
    if symbol is None or symbol == "":
        raise OrderInputError("symbol is required")
    if not isinstance(symbol, str) or not symbol.strip().isalnum() or len(symbol) > 20:
        raise OrderInputError("symbol must be an exchange symbol such as BTCUSDT", code=-32003)
    side = args.get("side")
    if not isinstance(side, str) or side.lower() not in ("buy", "sell"):
        raise OrderInputError("side must be 'buy' or 'sell'")
    qty = _decimal("quantity", args.get("quantity"), required=True)
    tp = _decimal("take_profit_price", args.get("take_profit_price"), required=True)
    stop = _decimal("stop_price", args.get("stop_price"), required=True)
    limit = _decimal("stop_limit_price", args.get("stop_limit_price"), required=False)
    assert tp is not None and stop is not None
    if side.lower() == "sell" and not tp > stop:
        raise OrderInputError("take_profit_price must be above stop_price for a sell OCO (it exits a long position)")
    if side.lower() == "buy" and not tp < stop:
        raise OrderInputError("take_profit_price must be below stop_price for a buy OCO (it exits a short position)")
    return {
        "symbol": symbol.strip().upper(),
        "side": side.upper(),
        "quantity": qty,
        "take_profit_price": tp,
        "stop_price": stop,
        "stop_limit_price": limit,
    }


def parse_order(args: dict[str, Any]) -> dict[str, Any]:
    """chartgen's place_order checks, in its order, plus ours; returns normalised fields."""
    known = {"symbol", "side", "type", "quantity", "price", "time_in_force", "client_order_id", "quote_quantity"}
    known |= {"stop_price", "trailing_delta"}
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
    if "bracket" in args:
        raise OrderInputError("bracket is only taken by place_order; remove it")
    otype = args.get("type", "market")
    if isinstance(otype, str) and otype.lower() == "stop":
        otype = "stop_loss_limit" if args.get("price") is not None else "stop_loss"
    if not isinstance(otype, str) or otype.lower() not in ("market", "limit", "limit_maker", *STOP_TYPE_NAMES):
        raise OrderInputError(
            "type must be 'market' or 'limit' (or 'limit_maker', 'stop_loss', 'stop_loss_limit', 'take_profit', "
            "'take_profit_limit')"
        )
    otype = otype.lower()
    price = None
    if otype in LIMIT_TYPE_NAMES:
        if args.get("price") is None or isinstance(args.get("price"), bool):
            raise OrderInputError(
                "price is required for limit orders"
                if otype in ("limit", "limit_maker")
                else f"price (the limit price once triggered) is required for {otype} orders"
            )
        price = _decimal("price", args.get("price"), required=True)
    elif args.get("price") is not None:
        if otype in STOP_TYPE_NAMES:
            raise OrderInputError(
                f"price applies to limit types only: {otype} sends a market order once triggered; omit price, "
                f"or use type {otype}_limit"
            )
        raise OrderInputError("price applies to limit orders only; omit it for a market order")
    stop_price = _decimal("stop_price", args.get("stop_price"), required=False)
    trailing = _trailing_delta(args.get("trailing_delta"))
    if otype in STOP_TYPE_NAMES:
        if stop_price is None and trailing is None:
            raise OrderInputError(
                f"stop_price is required for {otype} orders (or trailing_delta in basis points, or both)"
            )
    elif stop_price is not None or trailing is not None:
        name = "stop_price" if stop_price is not None else "trailing_delta"
        raise OrderInputError(
            f"{name} applies to stop_loss, stop_loss_limit, take_profit and take_profit_limit orders; "
            f"omit it for a {otype} order"
        )
    quote_qty = _decimal("quote_quantity", args.get("quote_quantity"), required=False)
    if quote_qty is not None and otype != "market":
        raise OrderInputError("quote_quantity applies to market orders only")
    qty = _decimal("quantity", args.get("quantity"), required=quote_qty is None)
    if qty is not None and quote_qty is not None:
        raise OrderInputError("give quantity or quote_quantity, not both")
    tif = args.get("time_in_force")
    tif_types = ("limit", "stop_loss_limit", "take_profit_limit")
    if tif is not None:
        if otype not in tif_types or not isinstance(tif, str) or tif.upper() not in ("GTC", "IOC", "FOK"):
            raise OrderInputError("time_in_force must be GTC, IOC or FOK, and only for limit orders")
        tif = tif.upper()
    elif otype in tif_types:
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
        "stop_price": stop_price,
        "trailing_delta": trailing,
    }
