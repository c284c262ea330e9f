"""set_alert, list_alerts, cancel_alert and the notification tools (contract §2.9-2.15).

Each tool is one :class:`~mcp_bridge.tools.unit.ToolUnit` acting for the calling principal
through the alert service.  Arguments are read once, at the edge, by the argument models
(:mod:`alerts.requests` holds the checks and their wording); input problems become isError
results that name the field and the fix.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import InstanceOf

from alerts import ALERT_KINDS, AlertInputError, AlertService, AlertSpec, parse_filter, parse_set_alert
from config import ANY_SUBSCRIBER
from mcp_bridge.errors import ToolError
from mcp_bridge.scopes import TRADE
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import ToolResult
from mcp_bridge.tools.schedules import refuse_stopped
from mcp_bridge.tools.unit import NoArgs, OneIdArgs, ToolContext, ToolUnit, WireArgs


@contextmanager
def alert_errors() -> Iterator[None]:
    try:
        yield
    except AlertInputError as exc:
        raise ToolError(str(exc)) from None


def _svc(ctx: ToolContext) -> AlertService:
    assert ctx.services.alerts is not None  # the unit's `needs` answered "not running" before
    return ctx.services.alerts


class SetAlertArgs(WireArgs):
    WIRE = tuple("symbol condition interval trigger params expires_at note action".split())
    spec: InstanceOf[AlertSpec]

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        services = context["services"]
        now = services.alerts.now() if services is not None and services.alerts is not None else time.time()
        with alert_errors():
            return {"spec": parse_set_alert(raw, now)}


class ListAlertsArgs(NoArgs):
    TOOL = "list_alerts"


class GetNotificationsArgs(NoArgs):
    TOOL = "get_notifications"


class UnsubscribeArgs(NoArgs):
    TOOL = "unsubscribe_notifications"


class ListSubscriptionsArgs(NoArgs):
    TOOL = "list_subscriptions"


class CancelAlertArgs(OneIdArgs):
    TOOL, ID = "cancel_alert", "alert_id"
    WIRE = ("alert_id",)


class SubscribeArgs(WireArgs):
    WIRE = ("symbols", "alert_types", "channels")
    symbols: tuple[str, ...] | None
    alert_types: tuple[str, ...] | None
    channels: tuple[str, ...] | None

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        unknown = set(raw) - set(cls.WIRE)
        with alert_errors():
            if unknown:
                raise AlertInputError(
                    f"unknown argument(s) {sorted(map(str, unknown))[:5]}; use symbols, alert_types and channels"
                )
            return {
                "symbols": parse_filter("symbols", raw.get("symbols")),
                "alert_types": parse_filter("alert_types", raw.get("alert_types"), allowed=ALERT_KINDS),
                "channels": parse_filter("channels", raw.get("channels")),
            }


async def _answer(op: Awaitable[Any]) -> ToolResult:
    with alert_errors():
        return [text(await op)]


async def set_alert(ctx: ToolContext, args: SetAlertArgs) -> ToolResult:
    if args.spec.order is not None and TRADE not in ctx.scopes:
        raise ToolError(
            f"an alert with an action places orders: that needs the '{TRADE}' scope, which this token "
            "lacks; create a token with it (chartgen token create NAME --scope charts,alerts,trade) or set the "
            "alert without action"
        )
    if args.spec.order is not None:  # a suspended principal's alerts still work, without an action
        await refuse_stopped(ctx, "set_alert with an action")
    return await _answer(_svc(ctx).set_alert_spec(ctx.require_principal(), args.spec))


async def list_alerts(ctx: ToolContext, args: ListAlertsArgs) -> ToolResult:
    return await _answer(_svc(ctx).list_alerts(ctx.require_principal()))


async def cancel_alert(ctx: ToolContext, args: CancelAlertArgs) -> ToolResult:
    return await _answer(_svc(ctx).cancel_alert(ctx.require_principal(), args.id))


async def get_notifications(ctx: ToolContext, args: GetNotificationsArgs) -> ToolResult:
    return await _answer(_svc(ctx).get_notifications(ctx.require_principal()))


async def granting_names(ctx: ToolContext, principal: str, channels: tuple[str, ...]) -> frozenset[str]:
    """The entries of the requested channels' ``subscribers`` that stand for ``principal`` — a token's id or
    name, an OAuth client's id or name, or the principal itself (``TokenStore.principals_named``)."""
    tokens = ctx.services.tokens
    settings = _svc(ctx).channels
    entries = {e for c in channels if c in settings for e in settings[c].subscribers if e != ANY_SUBSCRIBER}
    if tokens is None:
        return frozenset(e for e in entries if e == principal)
    return frozenset([e for e in sorted(entries) if principal in await tokens.principals_named(e)])


async def subscribe(ctx: ToolContext, args: SubscribeArgs) -> ToolResult:
    principal = ctx.require_principal()
    names = await granting_names(ctx, principal, args.channels) if args.channels else frozenset()
    return await _answer(_svc(ctx).subscribe_to(principal, args.symbols, args.alert_types, args.channels, names))


async def unsubscribe(ctx: ToolContext, args: UnsubscribeArgs) -> ToolResult:
    return await _answer(_svc(ctx).unsubscribe(ctx.require_principal()))


async def list_subscriptions(ctx: ToolContext, args: ListSubscriptionsArgs) -> ToolResult:
    return await _answer(_svc(ctx).list_subscriptions(ctx.require_principal()))


W = TypeVar("W", bound=WireArgs)


def _unit(name: str, args: type[W], handler: Callable[[ToolContext, W], Awaitable[ToolResult]]) -> ToolUnit[W]:
    return ToolUnit(
        name=name, args=args, handler=handler, group="alerts", needs="alerts", needs_principal=True, **wire(name)
    )


CHARTGEN_UNITS = (
    _unit("set_alert", SetAlertArgs, set_alert),
    _unit("list_alerts", ListAlertsArgs, list_alerts),
    _unit("cancel_alert", CancelAlertArgs, cancel_alert),
    _unit("get_notifications", GetNotificationsArgs, get_notifications),
    _unit("subscribe_notifications", SubscribeArgs, subscribe),
    _unit("unsubscribe_notifications", UnsubscribeArgs, unsubscribe),
    _unit("list_subscriptions", ListSubscriptionsArgs, list_subscriptions),
)
