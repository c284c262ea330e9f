"""trade_execute's real legs: each leg placed once through the order path, and how it stands.

A leg's client order id comes from (principal, ``tool_call_id``) when the caller names the call
(:func:`leg_client_ids`), so a retried call finds its legs instead of placing them twice.
:func:`place_leg` is the one flow (replay, listing, send, read back) over a :class:`LegDesk`:

- a single node's :class:`ServiceLegs`: :meth:`brokers.orders.service.OrderService.place_parsed` (guard,
  record, send), the order read back from the order store;
- a cluster front's desk (cluster/front_desk.py): an order intent for the account's order leader,
  which applies the guard rails and sends it; the leg reads the leader's answer.

Either way the leg is reported the same (:class:`Placed`, :func:`standing`): the status as
trade_execute names it, the average fill price (else the limit or stop price), the commissions valued
in the pair's quote asset (:func:`quote_fees`) and the total cost.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

import structlog

from brokers.filters import SymbolRules
from brokers.models import BrokerError, OrderRequest
from brokers.orders.args import OrderInputError, parse_order
from brokers.orders.service import OrderService
from brokers.orders.store import OrderRow
from brokers.trade_simulation import Code, refusal_code, unlisted
from storage import StorageUnavailable

log = structlog.get_logger(__name__)

STATUS = {"FILLED": "filled", "PARTIALLY_FILLED": "partial", "NEW": "open", "REJECTED": "rejected"}
"""An order's exchange status as trade_execute reports it; CANCELED/EXPIRED: partial when it traded,
else expired; PENDING_SUBMIT/UNKNOWN (or not answered yet): pending."""


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    price: float | None
    fees: float
    total_cost: float
    filled: float
    reject_reason: str | None


@dataclass(frozen=True, slots=True)
class Placed:
    """A real leg after :meth:`LegDesk.place`: its client order id and the exchange's status (None:
    refused before it was recorded), how it stands, the refusal's code and message, and whether an
    earlier call had placed it (``replayed``)."""

    client_order_id: str | None
    exchange_status: str | None = None
    outcome: Outcome | None = None
    code: Code | None = None
    message: str | None = None
    replayed: bool = False


class LegDesk(Protocol):
    """Where trade_execute places its legs (:func:`place_leg` over its order path)."""

    @property
    def venue(self) -> str: ...

    async def owner_of(self, client_order_id: str) -> tuple[str | None] | None:
        """``(owner,)`` of the order recorded under this id, None when there is none (StorageUnavailable:
        it cannot be read)."""
        ...

    async def rules(self, symbol: str) -> SymbolRules | None: ...

    async def send(self, req: OrderRequest, owner: str) -> None:
        """Place ``req`` through the order path (OrderInputError / BrokerError: refused or rejected)."""
        ...

    async def placed(
        self, client_order_id: str, *, code: Code | None = None, message: str | None = None, replayed: bool = False
    ) -> Placed:
        """How the order recorded under this id stands (refused before recording: no id)."""
        ...


async def place_leg(desk: LegDesk, args: dict[str, Any], owner: str, quotes: Any | None) -> Placed:
    """Place one leg (place_order's ``args`` with its ``client_order_id``) for ``owner``; a client order id
    already recorded for ``owner`` is not placed again: its order is returned as it stands.  ``quotes``
    (the quote source, or None) tells a closed stock market from a misspelt pair."""
    cid = args["client_order_id"]
    try:
        existing = await desk.owner_of(cid)
    except StorageUnavailable as exc:
        return Placed(None, code="NETWORK_ERROR", message=str(exc))
    if existing is not None:
        if existing[0] != owner:
            why = f"client order id {cid} is another's; use a new tool_call_id"
            return Placed(None, code="INVALID_ARGUMENT", message=why)
        return await desk.placed(cid, replayed=True)
    try:
        if await desk.rules(args["symbol"]) is None:
            code, why = await unlisted(args["symbol"], desk.venue, quotes)
            return Placed(None, code=code, message=why)
        await desk.send(OrderRequest(**parse_order(args)), owner)
    except (OrderInputError, BrokerError, StorageUnavailable) as exc:
        code = "NETWORK_ERROR" if isinstance(exc, StorageUnavailable) else refusal_code(exc)
        return await desk.placed(cid, code=code, message=str(exc))
    except Exception:  # reported on the leg (its record says how far it got), never hiding the other legs
        log.exception("trade_leg_failed", client_order_id=cid)
        why = f"internal error while placing {cid}; see the daemon's log and get_orders for its state"
        return await desk.placed(cid, code="INTERNAL_ERROR", message=why)
    return await desk.placed(cid)


def leg_client_ids(principal: str, tool_call_id: str | None, n: int) -> list[str]:
    """Each leg's client order id: from (principal, tool_call_id) when the caller named the call, so a
    retried call finds its legs instead of placing them twice; random otherwise."""
    seed = hashlib.sha256(f"{principal}\x00{tool_call_id}".encode()).hexdigest() if tool_call_id else None
    stem = (seed or secrets.token_hex(16))[:24]
    return [f"ag-{stem}-{i}" for i in range(n)]


class Commission(Protocol):
    @property
    def price(self) -> Decimal: ...
    @property
    def commission(self) -> Decimal: ...
    @property
    def commission_asset(self) -> str: ...


async def quote_fees(
    fills: Iterable[Commission], base: str, quote: str, last_price: Callable[[str], Awaitable[Decimal | None]]
) -> float:
    """The fills' commissions valued in the quote asset: a quote-asset commission as it is, a
    base-asset one at its fill price, another asset (such as BNB) at the venue's price of
    <ASSET><QUOTE> (0 when it has none)."""
    total = 0.0
    for f in fills:
        if f.commission_asset == quote:
            total += float(f.commission)
        elif f.commission_asset == base:
            total += float(f.commission * f.price)
        elif f.commission:
            try:
                price = await last_price(f"{f.commission_asset}{quote}")
            except BrokerError:
                price = None
            total += float(f.commission * price) if price else 0.0
    return total


def standing(
    *,
    status: str,
    side: str,
    executed: Decimal,
    cumulative_quote: Decimal,
    price: Decimal | None,
    fees: float,
    reject_reason: str | None,
) -> Outcome:
    """How an order stands: status, average fill price (else ``price``, its limit or stop price), fees,
    total cost (buy: traded value + fees; sell: −(traded value − fees); 0 while nothing traded)."""
    named = STATUS.get(status)
    if named is None:
        terminal = status in ("CANCELED", "EXPIRED", "EXPIRED_IN_MATCH")
        named = ("partial" if executed > 0 else "expired") if terminal else "pending"
    traded = float(cumulative_quote)
    avg = cumulative_quote / executed if executed > 0 else price
    cost = (traded + fees if side == "BUY" else -(traded - fees)) if executed > 0 else 0.0
    return Outcome(named, None if avg is None else float(avg), fees, cost, float(executed), reject_reason)


class ServiceLegs:
    """A single node's legs: the order service's one path (guard, record, send)."""

    def __init__(self, orders: OrderService) -> None:
        self.orders = orders
        self.venue = orders.broker.name

    async def owner_of(self, client_order_id: str) -> tuple[str | None] | None:
        row = await self.orders.store.get(client_order_id)
        return None if row is None else (row.owner,)

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self.orders.broker.rules(symbol)

    async def send(self, req: OrderRequest, owner: str) -> None:
        await self.orders.place_parsed(req, None, owner=owner)

    async def placed(
        self, client_order_id: str, *, code: Code | None = None, message: str | None = None, replayed: bool = False
    ) -> Placed:
        row = await self.orders.store.get(client_order_id)
        if row is None:
            return Placed(None, code=code, message=message, replayed=replayed)
        outcome = await self._outcome(row)
        return Placed(row.client_order_id, row.status, outcome, code=code, message=message, replayed=replayed)

    async def _outcome(self, row: OrderRow) -> Outcome:
        fees = 0.0
        if row.executed_qty > 0:
            broker = self.orders.broker
            rules = await broker.rules(row.symbol)
            base, quote = (rules.base_asset, rules.quote_asset) if rules else ("", "")
            fills = await self.orders.store.fills(broker.name, row.symbol)
            fills = [f for f in fills if f.client_order_id == row.client_order_id]
            fees = await quote_fees(fills, base, quote, broker.last_price)
        return standing(
            status=row.status, side=row.side, executed=row.executed_qty, cumulative_quote=row.cumulative_quote,
            price=row.price or row.stop_price, fees=fees, reject_reason=row.reject_reason,
        )  # fmt: skip
