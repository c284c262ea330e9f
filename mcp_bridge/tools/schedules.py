"""schedule_order, list_schedules and cancel_schedule over the schedule service.

A schedule belongs to the calling principal: ``list_schedules`` and ``cancel_schedule`` act on
its own schedules unless its token carries ``admin`` (the same :class:`~brokers.models.Actor`
rule as orders); another's schedule answers exactly like an unknown one.  Input problems are
isError results naming the field.  schedule_order's timing and order are read by the schedule
service (:mod:`brokers.schedules.spec`), which also re-checks a stored schedule at start.
A principal the operator suspended (or whose access was revoked) cannot create schedules
(:func:`refuse_stopped`, also used by set_alert for an alert with an action).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from brokers import PrincipalStopped, ScheduleService
from mcp_bridge.errors import ToolError
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import ToolResult
from mcp_bridge.tools.orders import order_errors
from mcp_bridge.tools.unit import NoArgs, OneIdArgs, ToolContext, ToolUnit, WireArgs


def _svc(ctx: ToolContext) -> ScheduleService:
    assert ctx.services.schedules is not None  # the unit's `needs` answered "not running" before
    return ctx.services.schedules


class ScheduleOrderArgs(WireArgs):
    WIRE = tuple(
        (
            "symbol side type quantity price stop_price trailing_delta time_in_force bracket "
            "cron every start_at end_at max_runs"
        ).split()
    )
    order: dict[str, Any]
    """place_order's arguments plus the timing, read by the schedule service."""

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        return {"order": dict(raw)}


class ListSchedulesArgs(NoArgs):
    TOOL = "list_schedules"


class CancelScheduleArgs(OneIdArgs):
    TOOL, ID = "cancel_schedule", "schedule_id"
    WIRE = ("schedule_id",)


async def _answer(op: Awaitable[Any]) -> ToolResult:
    with order_errors("schedule check"):
        return [text(await op)]


async def refuse_stopped(ctx: ToolContext, what: str) -> None:
    """Refuse to create ``what`` (a schedule, an alert's action) for a principal the operator suspended
    or whose access was revoked (brokers/suspensions.py), in both modes; a suspensions table that
    cannot be read refuses too.  No suspensions here (trading off): nothing could act on it anyway."""
    suspensions = ctx.services.suspensions
    if suspensions is None:
        return
    try:
        await suspensions.refuse_stopped(ctx.principal, what)
    except PrincipalStopped as exc:
        raise ToolError(str(exc)) from None


async def schedule_order(ctx: ToolContext, args: ScheduleOrderArgs) -> ToolResult:
    await refuse_stopped(ctx, "schedule_order")
    return await _answer(_svc(ctx).create(ctx.principal, args.order))


async def list_schedules(ctx: ToolContext, args: ListSchedulesArgs) -> ToolResult:
    return await _answer(_svc(ctx).listing(ctx.actor()))


async def cancel_schedule(ctx: ToolContext, args: CancelScheduleArgs) -> ToolResult:
    return await _answer(_svc(ctx).cancel(ctx.actor(), args.id))


W = TypeVar("W", bound=WireArgs)


def _unit(name: str, args: type[W], handler: Callable[[ToolContext, W], Awaitable[ToolResult]]) -> ToolUnit[W]:
    return ToolUnit(
        name=name, args=args, handler=handler, group="trading", needs="schedules", needs_principal=True, **wire(name)
    )


UNITS = (
    _unit("schedule_order", ScheduleOrderArgs, schedule_order),
    _unit("list_schedules", ListSchedulesArgs, list_schedules),
    _unit("cancel_schedule", CancelScheduleArgs, cancel_schedule),
)
