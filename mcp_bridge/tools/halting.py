"""halt_trading: the operator's halt switch as a tool (``trade`` scope; docs/design.md §8).

``{"reason"?, "cancel_open"?: bool}`` halts: every order path refuses with "trading is halted by
the operator" until resumed, and with ``cancel_open`` the caller's own open orders and order lists
(every principal's for an ``admin`` token) are cancelled before the answer returns (its result is
in the answer).  ``{"resume": true}`` resumes — only a halt the caller set itself, unless its token
has ``admin`` (brokers/halt_authority.py); a refused resume names the holder and how to lift it.
The answer is the halt state (halted, reason, by, holder_kind, lifted_by, since, the last
cancel-open).  The halt is recorded as by ``mcp:<principal>``; a call without a principal is refused.
"""

from __future__ import annotations

from typing import Any

from brokers import HaltAuthority, HaltRefused
from mcp_bridge.errors import ToolError
from mcp_bridge.tool_specs import wire
from mcp_bridge.tools.charting import text
from mcp_bridge.tools.context import ToolResult
from mcp_bridge.tools.unit import ToolContext, ToolUnit, WireArgs

MAX_REASON = 200


def _flag(raw: dict[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise ToolError(f"{name} must be true or false")
    return value


class HaltArgs(WireArgs):
    WIRE = ("cancel_open", "reason", "resume")
    cancel_open: bool
    resume: bool
    reason: str | None

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        extra = set(raw) - set(cls.WIRE)
        if extra:
            raise ToolError(f"halt_trading does not take {sorted(map(str, extra))[:5]}")
        cancel_open, resume = _flag(raw, "cancel_open"), _flag(raw, "resume")
        reason = raw.get("reason")
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
            raise ToolError(f"reason must be text of at most {MAX_REASON} characters")
        if resume and (cancel_open or reason is not None):
            raise ToolError("resume takes no cancel_open or reason: call halt_trading with resume=true alone")
        return {"cancel_open": cancel_open, "resume": resume, "reason": reason}


async def halt_trading(ctx: ToolContext, args: HaltArgs) -> ToolResult:
    halt = ctx.services.halt
    assert halt is not None  # the unit's `needs` answered "not running" before
    by = HaltAuthority.token(ctx.require_principal(), admin=ctx.admin)
    if args.resume:
        try:
            return [text(await halt.resume(by=by))]
        except HaltRefused as exc:
            raise ToolError(str(exc)) from None
    return [text(await halt.halt(reason=args.reason, by=by, cancel_open=args.cancel_open))]


HALT_TRADING = ToolUnit(
    name="halt_trading",
    args=HaltArgs,
    handler=halt_trading,
    group="trading",
    needs="halt",
    needs_principal=True,
    **wire("halt_trading"),
)
