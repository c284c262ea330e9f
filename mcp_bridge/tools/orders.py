"""place_order, place_oco, cancel_order, get_orders, get_positions, get_balance (contract §2.4-2.8).

Each tool is one :class:`~mcp_bridge.tools.unit.ToolUnit`: its argument model reads the wire
arguments once, at the edge (:mod:`brokers.orders.args` holds chartgen's checks and wording),
and the handler hands the parsed request to the order service.  Failures become isError
results with chartgen's text style and, where one applies, the structured error code of the
prompts contract (-32001 rate limited with retry_after_secs, -32002 invalid credentials,
-32003 invalid symbol, -32004 insufficient balance).

Orders belong to the calling principal (the :class:`ToolContext`'s): ``place_order`` records
it as the owner, ``get_orders`` and ``cancel_order`` act on its own orders unless its token
carries ``admin``.  Positions and balances are the exchange account's.  A call without a
principal (an unauthenticated HTTP caller) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

from pydantic import InstanceOf

from brokers import BrokerError, OrderInputError, OrderRequest, OrderService, parse_entry, parse_oco
from mcp_bridge.errors import ToolError
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import AccountReader, OrderPlacer, ToolResult
from mcp_bridge.tools.unit import ToolContext, ToolUnit, WireArgs


@contextmanager
def order_errors(what: str) -> Iterator[None]:
    """Order-layer failures as isError results; ``what`` names the operation ("order failed: …")."""
    try:
        yield
    except OrderInputError as exc:
        raise ToolError(str(exc), code=exc.code) from None
    except BrokerError as exc:
        raise ToolError(f"{what} failed: {exc}", code=exc.code, data=exc.data) from None


def only(tool: str, raw: dict[str, Any], allowed: set[str]) -> None:
    """Refuse arguments ``tool`` does not take, naming them (chartgen's tools ignore them; ours do not)."""
    extra = set(raw) - allowed
    if extra:
        raise ToolError(f"{tool} does not take {sorted(map(str, extra))[:5]}")


class PlaceOrderArgs(WireArgs):
    """place_order's arguments: the order (its owner is set by the service) and its bracket (None without one)."""

    WIRE = tuple(
        "symbol side type quantity price stop_price trailing_delta time_in_force bracket client_order_id".split()
    )
    order: InstanceOf[OrderRequest]
    bracket: dict[str, Decimal | None] | None

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        with order_errors("order"):
            order, bracket = parse_entry(raw)
        return {"order": order, "bracket": bracket}


class PlaceOcoArgs(WireArgs):
    WIRE = tuple("symbol side quantity take_profit_price stop_price stop_limit_price".split())
    oco: dict[str, Any]

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        with order_errors("order"):
            return {"oco": parse_oco(raw)}


class CancelOrderArgs(WireArgs):
    WIRE = ("order_id",)
    order_id: Any
    """Checked by the service (chartgen's wording for a missing or unknown id)."""

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        only("cancel_order", raw, {"order_id"})
        return {"order_id": raw.get("order_id")}


class GetOrdersArgs(WireArgs):
    WIRE = ("filter",)
    filter: str
    """"open" or "all" (default "all", also for null; case-insensitive); anything else is refused (chartgen listed
    every order for it: docs/deviations.md)."""

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        only("get_orders", raw, {"filter"})
        value = raw.get("filter")
        value = "all" if value is None else value  # absent or null: the default
        choice = value.strip().lower() if isinstance(value, str) else None
        if choice not in ("open", "all"):
            raise ToolError(
                f'get_orders: filter must be "open" or "all" (default "all"); got {json.dumps(value, default=str)[:40]}'
            )
        return {"filter": choice}


class AccountArgs(WireArgs):
    """get_positions / get_balance: no arguments."""

    TOOL: ClassVar[str] = ""

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        only(cls.TOOL, raw, set())
        return {}


class GetPositionsArgs(AccountArgs):
    TOOL = "get_positions"


class GetBalanceArgs(AccountArgs):
    TOOL = "get_balance"


def _svc(ctx: ToolContext) -> OrderService:
    assert ctx.services.orders is not None  # the unit's `needs` answered "not running" before
    return ctx.services.orders


async def _answer(what: str, op: Awaitable[Any]) -> ToolResult:
    with order_errors(what):
        return [text(await op)]


def _placer(ctx: ToolContext) -> OrderPlacer:
    placer = ctx.services.order_placer
    assert placer is not None  # the unit's `needs` answered "not running" before
    return placer


async def place_order(ctx: ToolContext, args: PlaceOrderArgs) -> ToolResult:
    return await _answer("order", _placer(ctx).place_parsed(args.order, args.bracket, owner=ctx.principal))


async def place_oco(ctx: ToolContext, args: PlaceOcoArgs) -> ToolResult:
    placer = ctx.services.oco_placer
    assert placer is not None  # the unit's `needs` answered "not running" before
    return await _answer("order", placer.place_parsed_oco(args.oco, owner=ctx.principal))


async def cancel_order(ctx: ToolContext, args: CancelOrderArgs) -> ToolResult:
    return await _answer("cancel", _placer(ctx).cancel_order(args.order_id, actor=ctx.actor()))


def _account(ctx: ToolContext) -> AccountReader:
    reader = ctx.services.account_reader
    assert reader is not None  # the unit's `needs` answered "not running" before
    return reader


async def get_orders(ctx: ToolContext, args: GetOrdersArgs) -> ToolResult:
    return await _answer("orders lookup", _account(ctx).get_orders(args.filter, actor=ctx.actor()))


async def get_positions(ctx: ToolContext, args: GetPositionsArgs) -> ToolResult:
    return await _answer("positions lookup", _account(ctx).get_positions())


async def get_balance(ctx: ToolContext, args: GetBalanceArgs) -> ToolResult:
    return await _answer("balance lookup", _account(ctx).get_balance())


W = TypeVar("W", bound=WireArgs)


def _unit(
    name: str, args: type[W], handler: Callable[[ToolContext, W], Awaitable[ToolResult]], needs: str = "orders"
) -> ToolUnit[W]:
    return ToolUnit(
        name=name, args=args, handler=handler, group="trading", needs=needs, needs_principal=True, **wire(name)
    )


PLACE_ORDER = _unit("place_order", PlaceOrderArgs, place_order, needs="order_placer")
CHARTGEN_UNITS = (
    PLACE_ORDER,
    _unit("cancel_order", CancelOrderArgs, cancel_order, needs="order_placer"),
    _unit("get_orders", GetOrdersArgs, get_orders, needs="account_reader"),
    _unit("get_positions", GetPositionsArgs, get_positions, needs="account_reader"),
    _unit("get_balance", GetBalanceArgs, get_balance, needs="account_reader"),
)
PLACE_OCO = _unit("place_oco", PlaceOcoArgs, place_oco, needs="oco_placer")
