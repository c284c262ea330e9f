"""place_order, cancel_order, get_orders, get_positions, get_balance (contract §2.4-2.8), for real.

Thin adapters over the order service; failures become isError results with chartgen's
text style and, where one applies, the structured error code of the prompts contract
(-32001 rate limited with retry_after_secs, -32002 invalid credentials, -32003 invalid
symbol, -32004 insufficient balance).

Orders belong to the calling principal (:mod:`mcp_bridge.identity`): ``place_order``
records it as the owner, ``get_orders`` and ``cancel_order`` act on its own orders unless
its token carries ``admin``.  Positions and balances are the exchange account's.  A call
without a principal (an unauthenticated HTTP caller) is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from brokers.models import Actor, BrokerError
from brokers.service import OrderInputError, OrderService
from mcp_bridge.errors import ToolError
from mcp_bridge.identity import current_principal, current_scopes
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import Handler, Services, ToolResult
from mcp_bridge.tools.trading import ENGINE_NOT_RUNNING

Operation = Callable[[OrderService, Actor, dict[str, Any]], Awaitable[Any]]
ADMIN_SCOPE = "admin"


def _actor() -> Actor:
    """The calling principal, and whether its scopes let it act on every principal's orders."""
    principal = current_principal()
    if principal is None:
        raise ToolError("this tool needs an authenticated client: send Authorization: Bearer <token>")
    return Actor(principal, admin=ADMIN_SCOPE in current_scopes())


def _handler(op: Operation, what: str) -> Handler:
    """``what`` names the operation in an exchange failure ("order failed: …", "balance failed: …")."""

    async def handler(services: Services, args: dict[str, Any]) -> ToolResult:
        if services.orders is None:
            raise ToolError(ENGINE_NOT_RUNNING)
        actor = _actor()
        try:
            return [text(await op(services.orders, actor, args))]
        except OrderInputError as exc:
            raise ToolError(str(exc), code=exc.code) from None
        except BrokerError as exc:
            raise ToolError(f"{what} failed: {exc}", code=exc.code, data=exc.data) from None

    return handler


def _only(name: str, args: dict[str, Any], allowed: set[str]) -> None:
    extra = set(args) - allowed
    if extra:
        raise OrderInputError(f"{name} does not take {sorted(map(str, extra))[:5]}")


async def _place(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    return await svc.place_order(args, owner=actor.principal)


async def _place_oco(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    return await svc.lists.place_oco(args, owner=actor.principal)


async def _cancel(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    _only("cancel_order", args, {"order_id"})
    return await svc.cancel_order(args.get("order_id"), actor=actor)


async def _orders(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    _only("get_orders", args, {"filter"})
    return await svc.get_orders(args.get("filter", "all"), actor=actor)


async def _positions(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    _only("get_positions", args, set())
    return await svc.get_positions()


async def _balance(svc: OrderService, actor: Actor, args: dict[str, Any]) -> Any:
    _only("get_balance", args, set())
    return await svc.get_balance()


ORDER_HANDLERS: dict[str, Handler] = {
    "place_order": _handler(_place, "order"),
    "place_oco": _handler(_place_oco, "order"),
    "cancel_order": _handler(_cancel, "cancel"),
    "get_orders": _handler(_orders, "orders lookup"),
    "get_positions": _handler(_positions, "positions lookup"),
    "get_balance": _handler(_balance, "balance lookup"),
}
