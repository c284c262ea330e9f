"""tools/list entries of schedule_order, list_schedules and cancel_schedule (design.md §8 schedules).

``schedule_order`` takes place_order's own arguments (copied from its schema, so the two never
drift apart) without ``client_order_id`` — each run's id is derived from the schedule id and
its scheduled time — plus the timing: ``cron`` or ``every``, ``start_at``, ``end_at``, ``max_runs``.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

_ORDER = types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
_LOCAL_RO = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_WRITE = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

TIMING: dict[str, Any] = {
    "cron": {
        "type": "string",
        "description": "Five crontab fields in UTC: minute hour day-of-month month day-of-week, e.g. '0 8 * * 1' "
        "(Mondays 08:00; 0 or 7 is Sunday). Give cron or every, not both.",
    },
    "every": {
        "type": "string",
        "pattern": "^[0-9]+[smhdw]$",
        "description": "A fixed interval: 30s, 15m, 4h, 7d, 1w (at least 1s, at most 365d); counted from start_at, "
        "else from now",
    },
    "start_at": {"type": "string", "description": "ISO 8601 time (UTC unless an offset is given) of the first run"},
    "end_at": {"type": "string", "description": "ISO 8601 time after which the schedule stops"},
    "max_runs": {"type": "integer", "minimum": 1, "description": "Stop after this many runs"},
}


def schedule_tools(place_order: types.Tool) -> tuple[types.Tool, ...]:
    """The three schedule tools; ``place_order`` is the place_order tool whose arguments a schedule repeats."""
    order_props = {k: v for k, v in place_order.input_schema.get("properties", {}).items() if k != "client_order_id"}
    required = [r for r in place_order.input_schema.get("required", []) if r != "client_order_id"]
    return (
        types.Tool(
            name="schedule_order",
            description=(
                "Place the same order on a schedule (e.g. buy 0.001 BTCUSDT every Monday 08:00 UTC): place_order's "
                "arguments plus cron or every, and optionally start_at, end_at, max_runs. Each scheduled time places "
                "exactly one order, through the same guard rails as place_order; a time missed while the daemon was "
                "down runs once at start if it is at most a few minutes late (schedule_misfire_grace_s), else it is "
                "skipped. Returns the schedule id and the next run time."
            ),
            input_schema={"type": "object", "properties": {**order_props, **TIMING}, "required": required},
            annotations=_ORDER,
        ),
        types.Tool(
            name="list_schedules",
            description="List your scheduled orders with their status, runs done and next run time (UTC).",
            input_schema={"type": "object", "properties": {}},
            annotations=_LOCAL_RO,
        ),
        types.Tool(
            name="cancel_schedule",
            description="Stop a scheduled order by the schedule_id that schedule_order returned (placed orders stay).",
            input_schema={
                "type": "object",
                "properties": {"schedule_id": {"type": "string"}},
                "required": ["schedule_id"],
            },
            annotations=_WRITE,
        ),
    )
