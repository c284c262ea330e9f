"""schedule_order, list_schedules and cancel_schedule: thin adapters over the schedule service.

A schedule belongs to the calling principal: ``list_schedules`` and ``cancel_schedule`` act on
its own schedules unless its token carries ``admin`` (the same :class:`~brokers.models.Actor`
rule as orders); another's schedule answers exactly like an unknown one.  Input problems are
isError results naming the field; nothing here raises anything else to the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from brokers.models import Actor, BrokerError
from brokers.order_args import OrderInputError
from brokers.schedules.service import ScheduleService
from mcp_bridge.errors import ToolError
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import Handler, Services, ToolResult
from mcp_bridge.tools.orders import _actor
from mcp_bridge.tools.trading import ENGINE_NOT_RUNNING

Operation = Callable[[ScheduleService, Actor, dict[str, Any]], Awaitable[Any]]


def _handler(op: Operation) -> Handler:
    async def handler(services: Services, args: dict[str, Any]) -> ToolResult:
        if services.schedules is None:
            raise ToolError(ENGINE_NOT_RUNNING)
        actor = _actor()
        try:
            return [text(await op(services.schedules, actor, args))]
        except OrderInputError as exc:
            raise ToolError(str(exc), code=exc.code) from None
        except BrokerError as exc:
            raise ToolError(f"schedule check failed: {exc}", code=exc.code, data=exc.data) from None

    return handler


async def _schedule(svc: ScheduleService, actor: Actor, args: dict[str, Any]) -> Any:
    return await svc.create(actor.principal, args)


async def _list(svc: ScheduleService, actor: Actor, args: dict[str, Any]) -> Any:
    if args:
        raise OrderInputError(f"list_schedules takes no arguments; got {sorted(map(str, args))[:5]}")
    return await svc.listing(actor)


async def _cancel(svc: ScheduleService, actor: Actor, args: dict[str, Any]) -> Any:
    extra = set(args) - {"schedule_id"}
    if extra:
        raise OrderInputError(f"cancel_schedule takes only schedule_id; got {sorted(map(str, extra))[:5]}")
    return await svc.cancel(actor, args.get("schedule_id"))


SCHEDULE_HANDLERS: dict[str, Handler] = {
    "schedule_order": _handler(_schedule),
    "list_schedules": _handler(_list),
    "cancel_schedule": _handler(_cancel),
}
