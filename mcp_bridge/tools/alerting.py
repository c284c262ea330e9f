"""set_alert, list_alerts, cancel_alert and the notification tools (contract §2.9-2.15).

Each handler acts for the calling principal (see :mod:`mcp_bridge.identity`) through the
alert service; input problems become isError results that name the field and the fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from alerts.requests import AlertInputError
from alerts.service import AlertService
from mcp_bridge.errors import ToolError
from mcp_bridge.identity import current_principal, current_scopes
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import Handler, Services, ToolResult
from mcp_bridge.tools.trading import ENGINE_NOT_RUNNING

TRADE_SCOPE = "trade"
Operation = Callable[[AlertService, str, dict[str, Any]], Awaitable[Any]]


def _handler(op: Operation) -> Handler:
    async def handler(services: Services, args: dict[str, Any]) -> ToolResult:
        if services.alerts is None:
            raise ToolError(ENGINE_NOT_RUNNING)
        principal = current_principal()
        if principal is None:
            raise ToolError("this tool needs an authenticated client: send Authorization: Bearer <token>")
        try:
            return [text(await op(services.alerts, principal, args))]
        except AlertInputError as exc:
            raise ToolError(str(exc)) from None

    return handler


def _no_args(name: str, args: dict[str, Any]) -> None:
    if args:
        raise AlertInputError(f"{name} takes no arguments; got {sorted(map(str, args))[:5]}")


async def _set(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    if args.get("action") is not None and TRADE_SCOPE not in current_scopes():
        raise ToolError(
            f"an alert with an action places orders: that needs the '{TRADE_SCOPE}' scope, which this token "
            "lacks; create a token with it (chartgen token create NAME --scope charts,alerts,trade) or set the "
            "alert without action"
        )
    return await svc.set_alert(principal, args)


async def _list(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    _no_args("list_alerts", args)
    return await svc.list_alerts(principal)


async def _cancel(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    extra = set(args) - {"alert_id"}
    if extra:
        raise AlertInputError(f"cancel_alert takes only alert_id; got {sorted(map(str, extra))[:5]}")
    return await svc.cancel_alert(principal, args.get("alert_id"))


async def _notifications(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    _no_args("get_notifications", args)
    return await svc.get_notifications(principal)


async def _subscribe(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    return await svc.subscribe(principal, args)


async def _unsubscribe(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    _no_args("unsubscribe_notifications", args)
    return await svc.unsubscribe(principal)


async def _subscriptions(svc: AlertService, principal: str, args: dict[str, Any]) -> Any:
    _no_args("list_subscriptions", args)
    return await svc.list_subscriptions(principal)


ALERT_HANDLERS: dict[str, Handler] = {
    "set_alert": _handler(_set),
    "list_alerts": _handler(_list),
    "cancel_alert": _handler(_cancel),
    "get_notifications": _handler(_notifications),
    "subscribe_notifications": _handler(_subscribe),
    "unsubscribe_notifications": _handler(_unsubscribe),
    "list_subscriptions": _handler(_subscriptions),
}
