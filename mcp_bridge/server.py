"""The MCP server: one low-level SDK ``Server`` with our tool table, shared by stdio and HTTP.

The low-level server is used (not MCPServer's decorators) because the tool schemas and
the argument handling must follow chartgen's wire contract: lenient aliases, chartgen's
exact isError texts, and our own validation messages rather than the SDK's.
Every tool call is logged with a request id, its duration and outcome (never the argument
values, which may be large or private).

Scopes (:mod:`mcp_bridge.scopes`): ``tools/list`` with a bearer offers only the tools the
token's scopes allow (without one — chartgen's clients list tools unauthenticated — all of
them); a call outside the scopes is refused with an isError result naming the missing scope,
on the SDK path and the session-less fast path alike, before the handler runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import mcp_types as types
import structlog
from mcp.server.lowlevel import Server
from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_bridge.errors import ToolError
from mcp_bridge.identity import (
    Caller,
    bind_principal,
    principal_of,
    reset_principal,
    scopes_of,
)
from mcp_bridge.prompts import PROMPTS, get_prompt
from mcp_bridge.scopes import ADMIN, ALL_SCOPES, allows, refusal
from mcp_bridge.session_push import SessionPush
from mcp_bridge.tokens import STDIO_PRINCIPAL
from mcp_bridge.tools import Services
from mcp_bridge.tools.catalog import offered
from mcp_bridge.tools.unit import ToolContext
from storage import StorageError

log = structlog.get_logger(__name__)

SERVER_NAME = "chartgen"
SERVER_VERSION = "0.1.0"
INSTRUCTIONS = (
    "chartgen draws trading charts and computes technical indicators (generate_chart, get_indicators, "
    "list_indicators). Prefer format=summary when you need numbers rather than a picture."
)


def storage_message(tool: str, exc: StorageError, request_id: str) -> str:
    """What a user is told when the daemon's database (SQLite, or a cluster's PostgreSQL) refused a read or write."""
    return f"{tool} failed: {exc}; nothing was changed. To do: {exc.advice} (request {request_id})."


UNAUTHENTICATED_SCOPES = ALL_SCOPES - {ADMIN}
"""The scopes of an HTTP call without a bearer: only possible on an app built without
authentication (the daemon always authenticates tools/call), which serves anyone alike."""


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def tools_for(scopes: frozenset[str] | None, tools: list[types.Tool]) -> list[types.Tool]:
    """tools/list for a caller: every offered tool without a bearer (None), else those its scopes allow."""
    if scopes is None or ADMIN in scopes:
        return list(tools)
    return [t for t in tools if allows(scopes, t.name)]


class ToolRouter:
    """Dispatches tools/call to the tool units and turns failures into isError results.

    Only the units of the configured ``tool_groups`` are listed and callable.
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self.units = {u.name: u for u in offered(services.agent.tool_groups)}
        self.tools = [u.listing() for u in self.units.values()]
        self.session_push: SessionPush | None = None
        self.observers: list[Callable[[str, str, float], None]] = []
        """Called with (tool, outcome, seconds) after every known tool's call (metrics)."""
        if services.alerts is not None and services.push is not None:
            self.session_push = SessionPush(services.push, services.alerts.store)

    def attach_session(self, ctx: Any) -> None:
        """A stdio session's first request: start pushing its notifications on it."""
        if self.session_push is not None and getattr(ctx, "request", None) is None:
            self.session_push.attach(ctx, STDIO_PRINCIPAL)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        principal: str | None = STDIO_PRINCIPAL,
        scopes: frozenset[str] = ALL_SCOPES,
    ) -> types.CallToolResult:
        unit = self.units.get(name)
        if unit is None:
            return _error(f"Unknown tool: {name}")
        request_id = uuid.uuid4().hex[:12]
        started = time.perf_counter()
        outcome = "ok"
        bound = bind_principal(principal)
        with structlog.contextvars.bound_contextvars(request_id=request_id, tool=name):
            try:
                if not allows(scopes, name):
                    outcome = "forbidden"
                    return _error(refusal(name, scopes))
                result = await unit.run(ToolContext(self.services, principal, scopes), dict(arguments or {}))
                if isinstance(result, types.CallToolResult):
                    if result.is_error:
                        outcome = "tool_error"
                    return result
                return types.CallToolResult(content=list(result))
            except ToolError as exc:
                outcome = "tool_error"
                result = _error(str(exc))
                structured = exc.structured()
                if structured is not None:
                    result.structured_content = structured
                return result
            except StorageError as exc:
                # the database could not be written or read (disk full, I/O error, another writer
                # holding it, a cluster's PostgreSQL away): the transaction was rolled back
                outcome = "storage_error"
                log.error("tool_storage_failed", error=str(exc), kind=type(exc).__name__)
                return _error(storage_message(name, exc, request_id))
            except Exception:
                outcome = "internal_error"
                log.exception("tool_failed")
                return _error(f"Internal error in {name} (request {request_id}); see the daemon log.")
            finally:
                reset_principal(bound)
                elapsed = time.perf_counter() - started
                log.info("tool_call", principal=principal, outcome=outcome, duration_ms=round(elapsed * 1000, 2))
                for observe in self.observers:
                    observe(name, outcome, elapsed)

    async def direct(self, message: Any, caller: Caller | None, version: str) -> dict[str, Any] | None:
        """Answer a session-less ``tools/call`` without an SDK session; None: let the SDK answer it.

        chartgen's clients send bare ``tools/call`` requests without initializing; the SDK's
        stateless manager would build and tear down a whole session for each.  Only a
        well-formed call to a known tool under a handshake-era protocol version takes this
        path (same router, and the SDK's own per-version result shaping); anything else —
        other methods, odd params, batches, 2026-era envelopes — goes through the SDK.
        """
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "tools/call":
            return None
        req_id = message.get("id")
        if isinstance(req_id, bool) or not isinstance(req_id, str | int):
            return None
        params = message.get("params")
        if not isinstance(params, dict) or set(params) - {"name", "arguments"}:
            return None
        name, args = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or name not in self.units or not isinstance(args, dict):
            return None
        if caller is None:
            result = await self.call(name, args, None, UNAUTHENTICATED_SCOPES)
        else:
            result = await self.call(name, args, caller.principal, caller.scopes)
        raw = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {"jsonrpc": "2.0", "id": req_id, "result": serialize_server_result("tools/call", version, raw)}


def build_server(services: Services) -> tuple[Server[Any], ToolRouter]:
    """The SDK server with tools/list and tools/call wired to our router."""
    router = ToolRouter(services)

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        router.attach_session(ctx)
        return types.ListToolsResult(tools=tools_for(scopes_of(ctx), router.tools))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        router.attach_session(ctx)
        scopes = scopes_of(ctx)
        return await router.call(
            params.name, params.arguments, principal_of(ctx), UNAUTHENTICATED_SCOPES if scopes is None else scopes
        )

    prompt_handlers: dict[str, Any] = {}
    data = services.prompts
    if data is not None:

        async def on_list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
            return types.ListPromptsResult(prompts=list(PROMPTS))

        async def on_get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
            return await get_prompt(params.name, params.arguments, data)

        prompt_handlers = {"on_list_prompts": on_list_prompts, "on_get_prompt": on_get_prompt}

    server: Server[Any] = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        **prompt_handlers,
    )
    return server, router
