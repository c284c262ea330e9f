"""Orders, fills and balances as the brokers and the order tracker see them.

Statuses are Binance's (NEW, PARTIALLY_FILLED, FILLED, CANCELED, REJECTED, EXPIRED,
EXPIRED_IN_MATCH) plus two of our own for the time before the exchange answered:
PENDING_SUBMIT (recorded, being sent) and UNKNOWN (sent, answer lost — must be queried
before anything is retried).  :func:`state_name` maps them to chartgen's tool words.
Quantities and prices are Decimal throughout.

Ownership: an order intent carries the principal it acts for (``OrderRequest.owner``);
:class:`Actor` is whoever asks to list or cancel orders — its own, or every one with ``admin``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, cast, get_args

Side = Literal["BUY", "SELL"]
OrderType = Literal[
    "MARKET", "LIMIT", "LIMIT_MAKER", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"
]
STOP_TYPES = frozenset({"STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"})
"""Conditional orders: they wait for their ``stop_price`` (or trailing delta) before working."""
LIMIT_PRICED = frozenset({"LIMIT", "LIMIT_MAKER", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"})
"""Types that carry a limit ``price``."""
ListKind = Literal["OCO", "OTOCO"]
TimeInForce = Literal["GTC", "IOC", "FOK"]


def side_of(text: str) -> Side:
    """A side read back from storage, checked (ValueError naming it when it is not BUY or SELL)."""
    if text not in get_args(Side):
        raise ValueError(f"stored order side {text!r} is not one of {get_args(Side)}")
    return cast(Side, text)


def order_type_of(text: str) -> OrderType:
    """An order type read back from storage, checked (ValueError naming it when it is not one we send)."""
    if text not in get_args(OrderType):
        raise ValueError(f"stored order type {text!r} is not one of {get_args(OrderType)}")
    return cast(OrderType, text)


def time_in_force_of(text: str | None) -> TimeInForce | None:
    """A time in force read back from storage (None stays None), checked like :func:`side_of`."""
    if text is None:
        return None
    if text not in get_args(TimeInForce):
        raise ValueError(f"stored time in force {text!r} is not one of {get_args(TimeInForce)}")
    return cast(TimeInForce, text)


TERMINAL = frozenset({"FILLED", "CANCELED", "REJECTED", "EXPIRED", "EXPIRED_IN_MATCH"})
OPEN = frozenset({"NEW", "PARTIALLY_FILLED"})
_STATE_NAMES = {
    "PENDING_SUBMIT": "Pending",
    "UNKNOWN": "Pending",
    "NEW": "Open",
    "PARTIALLY_FILLED": "Open",
    "FILLED": "Filled",
    "CANCELED": "Cancelled",
    "EXPIRED": "Cancelled",
    "EXPIRED_IN_MATCH": "Cancelled",
    "REJECTED": "Rejected",
}


def state_name(status: str) -> str:
    """chartgen's state word for a status (Pending, Open, Filled, Cancelled, Rejected)."""
    return _STATE_NAMES.get(status, "Pending")


@dataclass(frozen=True, slots=True)
class OrderRequest:
    """A validated order to place; ``client_order_id`` is ours and recorded before sending."""

    symbol: str
    side: Side
    type: OrderType
    client_order_id: str
    quantity: Decimal | None = None
    quote_quantity: Decimal | None = None
    price: Decimal | None = None
    time_in_force: TimeInForce | None = None
    owner: str | None = None
    """The principal the order acts for (it alone may list and cancel it); None: the account's,
    for admin only (orders placed elsewhere, orders from before ownership was recorded)."""
    stop_price: Decimal | None = None
    """The trigger price of a STOP_LOSS / TAKE_PROFIT (…_LIMIT) order (Binance ``stopPrice``)."""
    trailing_delta: int | None = None
    """Binance ``trailingDelta`` in basis points (10..2000 on Binance; the TRAILING_DELTA filter)."""
    list_client_id: str | None = None
    """Set on the legs of an order list: the list's ``listClientOrderId``."""


@dataclass(frozen=True, slots=True)
class ListRequest:
    """An order list to place: an OCO pair, or an OTOCO (a LIMIT/LIMIT_MAKER ``working`` order
    whose fill places the OCO pair).  ``take_profit`` is the LIMIT_MAKER / TAKE_PROFIT(_LIMIT)
    leg and ``stop`` the STOP_LOSS(_LIMIT) leg; each leg has its own client order id and
    carries ``list_client_id``.  The broker maps the legs to Binance's above/below orders by
    side (a SELL OCO's take-profit is the above order, a BUY OCO's the below order)."""

    kind: ListKind
    symbol: str
    list_client_id: str
    take_profit: OrderRequest
    stop: OrderRequest
    working: OrderRequest | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asks to list or cancel orders: a principal, and whether it may act on everyone's (``admin``)."""

    principal: str | None
    admin: bool = False

    def may_act_on(self, owner: str | None) -> bool:
        """Whether this actor may see and cancel an order owned by ``owner``."""
        return self.admin or (self.principal is not None and owner == self.principal)


@dataclass(frozen=True, slots=True)
class Fill:
    """One trade of an order (Binance ``myTrades`` / executionReport ``x=TRADE``)."""

    trade_id: int
    symbol: str
    side: Side
    client_order_id: str
    quantity: Decimal
    price: Decimal
    commission: Decimal
    commission_asset: str
    time_ms: int


@dataclass(frozen=True, slots=True)
class ExchangeOrder:
    """What the exchange says about an order."""

    symbol: str
    client_order_id: str
    status: str
    side: Side
    type: str
    orig_qty: Decimal
    executed_qty: Decimal
    cumulative_quote: Decimal
    price: Decimal | None = None
    exchange_order_id: str | None = None
    time_in_force: str | None = None
    update_time_ms: int | None = None
    reject_reason: str | None = None
    fills: tuple[Fill, ...] = field(default_factory=tuple)
    stop_price: Decimal | None = None
    trailing_delta: int | None = None
    list_client_id: str | None = None
    """The order list this order belongs to (None: a single order)."""
    triggered: bool = False
    """A conditional order whose stop has triggered (Binance: ``workingTime`` set); an untriggered
    stop is open but not on the book."""


@dataclass(frozen=True, slots=True)
class ExchangeList:
    """What the exchange says about an order list (Binance ``listStatus``)."""

    symbol: str
    list_client_id: str
    contingency_type: str
    """"OCO" or "OTO" (an OTOCO is reported as OTO while its working order works)."""
    list_status_type: str
    """RESPONSE, EXEC_STARTED, ALL_DONE."""
    list_order_status: str
    """EXECUTING, ALL_DONE, REJECT."""
    orders: tuple[ExchangeOrder, ...] = field(default_factory=tuple)
    exchange_list_id: str | None = None
    transaction_time_ms: int | None = None

    @property
    def done(self) -> bool:
        return self.list_status_type == "ALL_DONE" or self.list_order_status in ("ALL_DONE", "REJECT")


@dataclass(frozen=True, slots=True)
class Balance:
    asset: str
    free: Decimal
    locked: Decimal

    @property
    def total(self) -> Decimal:
        return self.free + self.locked


class BrokerError(Exception):
    """A broker failure the caller can act on; ``code`` is the MCP error code (see mcp_bridge)."""

    def __init__(self, message: str, *, code: int | None = None, data: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data or {}


class OrderRejected(BrokerError):
    """The exchange refused the order (filters, balance, duplicate): it was not placed."""


class RateLimitedError(BrokerError):
    """The exchange asked us to wait (429/418) longer than a tool call may wait."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message, code=-32001, data={"retry_after_secs": int(retry_after_s + 0.999)})
        self.retry_after_s = retry_after_s


class InsufficientBalance(OrderRejected):
    def __init__(self, message: str) -> None:
        super().__init__(message, code=-32004)


class OutcomeUnknown(BrokerError):
    """The request was sent but its answer was lost (timeout, 5xx): query before any retry."""
