"""log_event and get_events: the client's own journal of signals, suggestions, trades and errors.

Both follow the agent convention (:mod:`mcp_bridge.tools.agent_calls`).  Events are stored
per principal (:mod:`mcp_bridge.journal_store`), survive restarts and are visible only to
the principal that logged them.  ``log_event`` is idempotent per ``tool_call_id``: a retried
call answers with the event the first call wrote.  The journal is bounded by count and bytes,
oldest first out; ``get_events`` says in ``dropped`` how much of the caller's journal the limits
removed, so a client never mistakes a pruned journal for a complete one.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field, field_validator

from mcp_bridge.journal_store import EventFilter, Journal
from mcp_bridge.tools.agent_calls import (
    AgentArgs,
    AgentCall,
    AgentError,
    Code,
    SourcedData,
    agent_unit,
    iso,
)
from mcp_bridge.tools.unit import LOG_LOCAL, READ_LOCAL, ToolContext

EventType = Literal["signal", "suggestion", "trade", "error", "alert"]
Severity = Literal["low", "medium", "high", "critical"]
SEVERITY_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
MAX_DATA_BYTES = 16 * 1024


class LogEventArgs(AgentArgs):
    event_type: EventType = Field(description="signal, suggestion, trade, error or alert")
    data: dict[str, Any] = Field(description="Any JSON object (at most 16 KiB), e.g. the signal and its source_refs")
    severity: Severity = Field(default="low", description="low (default), medium, high or critical")

    @field_validator("data")
    @classmethod
    def _small(cls, v: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(v, separators=(",", ":")).encode())
        if size > MAX_DATA_BYTES:
            raise ValueError(f"is {size} bytes as JSON; at most {MAX_DATA_BYTES} — log a summary and source_refs")
        return v


class LogEventData(SourcedData):
    logged: bool = Field(description="True: stored (or already stored by an earlier call with this tool_call_id)")
    event_id: str
    duplicate: bool = Field(default=False, description="True when this tool_call_id was logged before")


class GetEventsArgs(AgentArgs):
    event_type: list[EventType] | None = Field(default=None, description="Only these types (default: all)")
    severity: list[Severity] | None = Field(default=None, description="Only these severities (default: all)")
    min_severity: Severity | None = Field(default=None, description="Only this severity or higher")
    since: AwareDatetime | None = Field(default=None, description="ISO-8601 time with offset, e.g. 2026-11-23T00:00Z")
    until: AwareDatetime | None = Field(default=None, description="ISO-8601 time with offset")
    limit: int = Field(default=100, ge=1, le=1000, description="Newest first, at most this many (1-1000)")


class EventOut(BaseModel):
    event_id: str
    event_type: str
    severity: str
    data: dict[str, Any]
    logged_at: str
    tool_call_id: str


class DroppedOut(BaseModel):
    events: int = Field(description="How many of your oldest events the journal's limits removed")
    bytes: int = Field(description="Their size in bytes (data as JSON plus tool_call_id)")
    newest_logged_at: str | None = Field(description="When the newest removed event was logged: older is incomplete")
    reason: str


class GetEventsData(SourcedData):
    events: list[EventOut]
    count: int
    dropped: DroppedOut | None = Field(
        default=None, description="null: nothing of yours was removed; else what the size limits removed, oldest first"
    )


def _journal(ctx: ToolContext) -> Journal:
    journal = ctx.services.journal
    if journal is None:
        raise AgentError(
            Code.NOT_AVAILABLE, "the journal needs the daemon's database; run the daemon (chartgen --serve)"
        )
    return journal


async def log_event(ctx: ToolContext, args: LogEventArgs, call: AgentCall) -> LogEventData:
    principal = ctx.require_principal()
    event, created = await _journal(ctx).log(principal, call.id, args.event_type, args.severity, args.data)
    call.cite(f"journal:{event.event_id}")
    return LogEventData(logged=True, event_id=event.event_id, duplicate=not created)


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


async def get_events(ctx: ToolContext, args: GetEventsArgs, call: AgentCall) -> GetEventsData:
    principal = ctx.require_principal()
    severities: tuple[str, ...] = tuple(args.severity or ())
    if args.min_severity is not None:
        floor = SEVERITY_RANK[args.min_severity]
        allowed = {s for s, rank in SEVERITY_RANK.items() if rank >= floor}
        severities = tuple(s for s in (severities or tuple(SEVERITY_RANK)) if s in allowed) or ("none",)
    flt = EventFilter(
        event_types=tuple(args.event_type or ()),
        severities=severities,
        since=_ts(args.since),
        until=_ts(args.until),
        limit=args.limit,
    )
    journal = _journal(ctx)
    events = await journal.events(principal, flt)
    for e in events:
        call.cite(e.tool_call_id)
    out = [
        EventOut(
            event_id=e.event_id,
            event_type=e.event_type,
            severity=e.severity,
            data=e.data,
            logged_at=iso(e.at),
            tool_call_id=e.tool_call_id,
        )
        for e in events
    ]
    gone = await journal.dropped(principal)
    dropped = None
    if gone.events:
        dropped = DroppedOut(
            events=gone.events,
            bytes=gone.bytes,
            newest_logged_at=None if gone.newest_at is None else iso(gone.newest_at),
            reason=(
                "the journal keeps at most a number of events and bytes per principal and in all; the oldest go "
                "first — log summaries and source_refs rather than bulk data"
            ),
        )
    return GetEventsData(events=out, count=len(out), dropped=dropped)


UNITS = (
    agent_unit(
        name="log_event",
        description=(
            "Write an event to your journal (kept by the daemon across restarts, visible only to your token's "
            "principal): event_type signal | suggestion | trade | error | alert, data (any JSON object up to 16 KiB "
            "— include the source_refs of the calls it rests on), severity low (default) | medium | high | critical. "
            "Returns event_id. Retrying with the same tool_call_id returns the first event instead of logging twice. "
            "Each principal keeps its newest 100,000 events within a byte budget (64 MiB by default); the "
            "oldest go first and get_events reports what was dropped."
        ),
        args=LogEventArgs,
        data=LogEventData,
        handler=log_event,
        group="journal",
        annotations=LOG_LOCAL,
    ),
    agent_unit(
        name="get_events",
        description=(
            "Read back your journal (log_event), newest first: filter by event_type (list), severity (list) or "
            "min_severity, since / until (ISO-8601 with offset), limit (default 100, at most 1000). source_refs "
            "lists the tool_call_id of each log_event call returned. dropped (null when nothing was) says how "
            "many of your oldest events the journal's size limits removed."
        ),
        args=GetEventsArgs,
        data=GetEventsData,
        handler=get_events,
        group="journal",
        annotations=READ_LOCAL,
    ),
)
