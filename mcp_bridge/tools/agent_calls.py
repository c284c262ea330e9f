"""The agent tools' convention (seeds' trading-tool-signatures): tool_call_id, source_refs, error codes, cache.

Every tool of the agent set (quotes, history, portfolio, simulation, execution, journal and
the chart-config tools) takes an optional ``tool_call_id`` (one is minted when absent) and
answers ``{"tool_call_id": id, "data": {..., "source_refs": [id, ...]}}``; ``source_refs``
starts with the call's own id and then names what the answer was built from: earlier calls
(an answer served from cache cites the call that fetched it), the engine window, or the REST
request and its time (``binance:GET /api/v3/ticker/24hr?symbol=BTCUSDT@2026-11-23T21:00:00Z``).

Failures are isError results whose text and structuredContent are
``{"tool_call_id": id, "error": {"code": CODE, "message": ...}}`` with the seed's codes
(:class:`Code`), mapped from the daemon's own errors in :func:`agent_error_of`.  The published
``outputSchema`` (:func:`output_schema_of`) declares both shapes — ``data`` or ``error``, exactly
one — because clients that validate structuredContent against it (the MCP Inspector, the
TypeScript SDK) check error results too (MCP 2025-06-18: structuredContent, when present, must
conform to the outputSchema).

Identical read calls (same tool, caller and arguments apart from ``tool_call_id``) are
answered from a small in-process cache for the smaller of the tool's own ``cache_ttl_s`` and
the ``agent_cache_ttl_s`` setting (0 turns it off): the seed's "avoid duplicate calls".  The
answer cites ``cache:<id>`` and the call that fetched it.  Writes (trade_execute, log_event)
are never cached.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

import mcp_types as types
import structlog
from pydantic import BaseModel, ConfigDict, Field

from brokers import BrokerError, LimitExceeded, OrderInputError, TradingHalted
from engine import MarketDataError, RateLimited, RenderBusy
from mcp_bridge.errors import ToolError
from mcp_bridge.tools.unit import ToolContext, ToolUnit, input_schema_of, parse_args

log = structlog.get_logger(__name__)

A = TypeVar("A", bound="AgentArgs")
D = TypeVar("D", bound="SourcedData")


class Code(StrEnum):
    """The seed's error codes, plus the two an agent also needs (bad arguments, a part not running)."""

    RATE_LIMITED = "RATE_LIMITED"
    INVALID_SYMBOL = "INVALID_SYMBOL"
    INSUFFICIENT_FUNDS = "INSUFFICIENT_FUNDS"
    RISK_LIMIT_EXCEEDED = "RISK_LIMIT_EXCEEDED"
    MARKET_CLOSED = "MARKET_CLOSED"
    NETWORK_ERROR = "NETWORK_ERROR"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_AVAILABLE = "NOT_AVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class AgentError(Exception):
    """A failure of an agent tool with the seed's code; the message names the cause and the fix."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code


CALL_ID_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
"""A usable tool_call_id; a malformed one is refused (INVALID_ARGUMENT) under a minted id, never echoed."""

TOOL_CALL_ID = Field(
    default=None,
    min_length=1,
    max_length=64,
    pattern=r"^[A-Za-z0-9_.:\-]+$",
    description="Your id for this call (returned, and first in data.source_refs); one is minted when absent",
)


class AgentArgs(BaseModel):
    """Base of every agent tool's arguments: unknown arguments are refused, ``tool_call_id`` is optional."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str | None = TOOL_CALL_ID


class SourcedData(BaseModel):
    """Base of every agent tool's ``data``: ``source_refs`` is filled in by the convention."""

    source_refs: list[str] = Field(default_factory=list, description="This call's id, then what the answer used")


class Envelope(BaseModel, Generic[D]):
    tool_call_id: str
    data: D


class ErrorBody(BaseModel):
    """The ``error`` of a failed call (isError results)."""

    code: Code
    message: str = Field(description="What went wrong, naming the field or cause, and the fix")


def output_schema_of(data: type[SourcedData]) -> dict[str, Any]:
    """The outputSchema of an agent tool: ``{tool_call_id, data}`` for an answer, ``{tool_call_id, error}``
    for an isError result — an object with exactly one of ``data`` and ``error``."""
    envelope = Envelope[data].model_json_schema(mode="serialization")  # type: ignore[valid-type]  # pydantic generic made at run time
    error = ErrorBody.model_json_schema(mode="serialization")
    defs = {**envelope.pop("$defs", {}), **error.pop("$defs", {}), "ErrorBody": error}
    envelope["properties"]["error"] = {"$ref": "#/$defs/ErrorBody", "description": "Only in an isError result"}
    envelope["properties"]["data"]["description"] = "The answer (absent in an isError result)"
    envelope["required"] = ["tool_call_id"]
    envelope["oneOf"] = [{"required": ["data"]}, {"required": ["error"]}]
    envelope["$defs"] = defs
    return envelope


@dataclass(slots=True)
class AgentCall:
    """One call of an agent tool: its id and the sources the handler cites."""

    id: str
    refs: list[str] = field(default_factory=list)

    def cite(self, ref: str) -> None:
        if ref not in self.refs:
            self.refs.append(ref)

    def cite_rest(self, venue: str, request: str, at: float | None = None) -> None:
        """Cite a REST request (``binance``, ``GET /api/v3/klines?symbol=…``) and when it was made."""
        self.cite(f"{venue}:{request}@{iso(time.time() if at is None else at)}")


def iso(ts: float) -> str:
    """UTC ISO-8601 with a Z and millisecond precision."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def mint_id(tool: str) -> str:
    return f"{tool}_{secrets.token_hex(6)}"


def agent_error_of(exc: BaseException) -> AgentError | None:
    """The seed's code for one of the daemon's own errors (None: not a known failure)."""
    if isinstance(exc, AgentError):
        return exc
    if isinstance(exc, RateLimited | RenderBusy):
        return AgentError(Code.RATE_LIMITED, str(exc))
    if isinstance(exc, LimitExceeded | TradingHalted):
        return AgentError(Code.RISK_LIMIT_EXCEEDED, str(exc))
    if isinstance(exc, OrderInputError):
        code = {-32003: Code.INVALID_SYMBOL, -32004: Code.INSUFFICIENT_FUNDS}.get(exc.code or 0)
        return AgentError(code or Code.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, BrokerError):
        code = {
            -32001: Code.RATE_LIMITED,
            -32003: Code.INVALID_SYMBOL,
            -32004: Code.INSUFFICIENT_FUNDS,
        }.get(exc.code or 0, Code.NETWORK_ERROR)
        return AgentError(code, str(exc))
    if isinstance(exc, MarketDataError):
        if exc.status in (400, 404):
            return AgentError(Code.INVALID_SYMBOL, str(exc))
        return AgentError(Code.NETWORK_ERROR, str(exc))
    if isinstance(exc, ToolError):
        return AgentError(Code.INVALID_ARGUMENT, str(exc))
    return None


def error_result(call_id: str, err: AgentError) -> types.CallToolResult:
    body = {"tool_call_id": call_id, "error": {"code": str(err.code), "message": str(err)}}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body))], structured_content=body, is_error=True
    )


def success_result(call_id: str, data: dict[str, Any], refs: list[str]) -> types.CallToolResult:
    """The answer: ``data`` (a dumped :class:`SourcedData`) with ``source_refs`` = [call_id, *refs]."""
    body = {"tool_call_id": call_id, "data": {**data, "source_refs": [call_id, *[r for r in refs if r != call_id]]}}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body)


class ResultCache:
    """Answers of identical read calls for a short time (bounded, least recently used evicted).

    Entries hold the answer's JSON form (never mutated after it is stored), so a hit costs no copy.
    """

    def __init__(self, max_entries: int = 512) -> None:
        self._entries: OrderedDict[str, tuple[float, str, dict[str, Any], list[str]]] = OrderedDict()
        self._max = max_entries

    def get(self, key: str) -> tuple[str, dict[str, Any], list[str]] | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        expires, origin, data, refs = hit
        if time.monotonic() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return origin, data, list(refs)

    def put(self, key: str, ttl_s: float, origin: str, data: dict[str, Any], refs: list[str]) -> None:
        self._entries[key] = (time.monotonic() + ttl_s, origin, data, list(refs))
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


RESULT_CACHE = ResultCache()
"""The process's cache of agent read results (keys include the tool, the principal and the arguments)."""

AgentHandler = Callable[[ToolContext, A, AgentCall], Awaitable[SourcedData]]


def agent_unit(
    *,
    name: str,
    description: str,
    args: type[A],
    data: type[D],
    handler: Callable[[ToolContext, A, AgentCall], Awaitable[D]],
    group: str,
    annotations: types.ToolAnnotations | None = None,
    cache_ttl_s: float | None = None,
) -> ToolUnit[Any]:
    """A :class:`ToolUnit` that follows the convention around ``handler``."""

    class Raw(BaseModel):
        """Anything: arguments are validated inside so even bad ones are answered with a tool_call_id."""

        model_config = ConfigDict(extra="allow")

    async def run(ctx: ToolContext, raw: Raw) -> types.CallToolResult:
        given = raw.model_extra or {}
        tid = given.get("tool_call_id")
        call_id = tid if isinstance(tid, str) and CALL_ID_RE.fullmatch(tid) else mint_id(name)
        call = AgentCall(call_id)
        try:
            parsed = parse_args(name, args, dict(given))
            if parsed.tool_call_id:
                call.id = parsed.tool_call_id
            key = None
            ttl = min(cache_ttl_s, ctx.services.agent.cache_ttl_s) if cache_ttl_s else 0.0
            if ttl > 0:
                body = parsed.model_dump(mode="json", exclude={"tool_call_id"})
                key = f"{name}\x00{ctx.principal}\x00{json.dumps(body, sort_keys=True)}"
                hit = RESULT_CACHE.get(key)
                if hit is not None:
                    origin, cached, refs = hit
                    return success_result(call.id, cached, [f"cache:{origin}", origin, *refs[1:]])
            out = (await handler(ctx, parsed, call)).model_dump(mode="json", exclude={"source_refs"})
            if key is not None:
                RESULT_CACHE.put(key, ttl, call.id, out, [call.id, *call.refs])
            return success_result(call.id, out, call.refs)
        except Exception as exc:
            err = agent_error_of(exc)
            if err is None:
                log.exception("agent_tool_failed")
                err = AgentError(Code.INTERNAL_ERROR, f"internal error in {name}; see the daemon log (call {call.id})")
            else:
                log.info("agent_tool_refused", code=str(err.code))
            return error_result(call.id, err)

    return ToolUnit(
        name=name,
        description=description,
        args=Raw,
        handler=run,
        group=group,
        annotations=annotations,
        wire_schema=input_schema_of(args),
        output_schema=output_schema_of(data),
    )
