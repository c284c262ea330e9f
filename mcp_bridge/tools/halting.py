"""halt_trading: the operator's halt switch as a tool (``trade`` scope; design.md §8).

``{"reason"?, "cancel_open"?: bool}`` halts: every order path refuses with "trading is halted by
the operator" until resumed, and with ``cancel_open`` every open order and order list is
cancelled before the answer returns (its result is in the answer).  ``{"resume": true}``
resumes.  The answer is the halt state (halted, reason, by, since, the last cancel-open).
The halt is recorded as by ``mcp:<principal>``; a call without a principal is refused.
"""

from __future__ import annotations

from typing import Any

from mcp_bridge.errors import ToolError
from mcp_bridge.identity import current_principal
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import Handler, Services, ToolResult
from mcp_bridge.tools.trading import ENGINE_NOT_RUNNING

MAX_REASON = 200
ARGS = {"cancel_open", "resume", "reason"}


def _flag(args: dict[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise ToolError(f"{name} must be true or false")
    return value


async def halt_trading(services: Services, args: dict[str, Any]) -> ToolResult:
    if services.halt is None:
        raise ToolError(ENGINE_NOT_RUNNING)
    principal = current_principal()
    if principal is None:
        raise ToolError("this tool needs an authenticated client: send Authorization: Bearer <token>")
    extra = set(args) - ARGS
    if extra:
        raise ToolError(f"halt_trading does not take {sorted(map(str, extra))[:5]}")
    cancel_open, resume = _flag(args, "cancel_open"), _flag(args, "resume")
    reason = args.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise ToolError(f"reason must be text of at most {MAX_REASON} characters")
    by = f"mcp:{principal}"
    if resume:
        if cancel_open or reason is not None:
            raise ToolError("resume takes no cancel_open or reason: call halt_trading with resume=true alone")
        return [text(await services.halt.resume(by=by))]
    return [text(await services.halt.halt(reason=reason, by=by, cancel_open=cancel_open))]


HALT_HANDLERS: dict[str, Handler] = {"halt_trading": halt_trading}
