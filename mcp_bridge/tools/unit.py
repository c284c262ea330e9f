"""A tool as one typed unit: its name, description, argument model, handler and output model.

Every tool the daemon offers is one :class:`ToolUnit`, declared next to its handler in
``mcp_bridge/tools/<group>.py`` and collected in :mod:`mcp_bridge.tools.catalog`.  The unit
owns the whole edge:

- ``args`` — a pydantic model.  The JSON schema ``tools/list`` shows is generated from it,
  except for chartgen's tools, whose wire schema is kept by hand (``wire_schema``: it must
  stay byte-identical to what chartgen's clients know, see docs/chartgen-contract.md) and is
  *checked* against the model by tests (same properties, same required ones).
- ``handler(ctx, args)`` — receives a :class:`ToolContext` (the caller's principal and
  scopes, the services) and the validated model; never a raw dict, never a ContextVar.
- ``output`` — the model of a successful result, when the tool returns structured data;
  its schema is published as ``outputSchema`` so a client can validate the answer.

The scope a tool needs is not part of the unit: the security policy stays in one table,
:data:`mcp_bridge.scopes.TOOL_SCOPES`, where a tool that is missing needs ``admin``.

Argument problems are answered once, here: a pydantic ``ValidationError`` becomes an
isError result naming each field, what is wrong with it and the accepted form.  Models of
chartgen's tools parse leniently with chartgen's own wording (their validators raise
:class:`~mcp_bridge.errors.ToolError`, which pydantic lets through unchanged).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator

from brokers import Actor
from mcp_bridge.errors import ToolError
from mcp_bridge.scopes import ADMIN
from mcp_bridge.tools.context import ENGINE_NOT_RUNNING as ENGINE_NOT_RUNNING
from mcp_bridge.tools.context import Services, ToolResult

A = TypeVar("A", bound=BaseModel)

READ_LOCAL = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
"""Reads the daemon's own state or computes (journal, chart configs)."""
READ_REMOTE = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
"""Reads markets or the exchange account (quotes, history, symbols, portfolio, simulation)."""
LOG_LOCAL = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
"""Writes the daemon's own state, idempotently (log_event)."""
TRADE_REMOTE = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
)
"""Places orders on the exchange (trade_execute)."""

NEEDS_PRINCIPAL = "this tool needs an authenticated client: send Authorization: Bearer <token>"

GROUPS: tuple[str, ...] = ("chart", "alerts", "trading", "portfolio", "journal")
"""The tool groups ``tool_groups`` chooses from (docs/design.md §9)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a handler knows about its call: who calls, with which scopes, and the services."""

    services: Services
    principal: str | None
    scopes: frozenset[str]

    @property
    def admin(self) -> bool:
        return ADMIN in self.scopes

    def require_principal(self) -> str:
        """The calling principal; an unauthenticated caller is refused with the fix."""
        if self.principal is None:
            raise ToolError(NEEDS_PRINCIPAL)
        return self.principal

    def actor(self) -> Actor:
        """The caller as the order layer sees it: its principal and whether it acts on everyone's orders."""
        return Actor(self.require_principal(), admin=self.admin)


Handler = Callable[[ToolContext, Any], Awaitable["ToolResult | types.CallToolResult"]]


@dataclass(frozen=True, slots=True)
class ToolUnit(Generic[A]):
    """One tool: everything ``tools/list`` shows and ``tools/call`` runs."""

    name: str
    description: str
    args: type[A]
    handler: Callable[[ToolContext, A], Awaitable[ToolResult | types.CallToolResult]]
    group: str
    annotations: types.ToolAnnotations | None = None
    output: type[BaseModel] | None = None
    wire_schema: dict[str, Any] | None = None
    """chartgen's hand-kept input schema (None: generated from ``args``)."""
    output_schema: dict[str, Any] | None = field(default=None)
    """An explicit output schema (None: generated from ``output`` when there is one)."""
    needs: str | None = None
    """The :class:`Services` attribute the tool cannot work without (None there: chartgen's
    "Trading engine not running" answer, before the arguments are read, as chartgen does)."""
    needs_principal: bool = False
    """Refuse an unauthenticated caller before reading the arguments."""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"tool {self.name}: unknown group {self.group!r}; one of {GROUPS}")

    def input_schema(self) -> dict[str, Any]:
        if self.wire_schema is not None:
            return self.wire_schema
        return input_schema_of(self.args)

    def listing(self) -> types.Tool:
        """The tools/list entry."""
        out = self.output_schema
        if out is None and self.output is not None:
            out = self.output.model_json_schema(mode="serialization")
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema(),
            output_schema=out,
            annotations=self.annotations,
        )

    def parse(self, raw: dict[str, Any], services: Services | None = None) -> A:
        """The validated argument model; bad input is a ToolError naming the field and the fix."""
        return parse_args(self.name, self.args, raw, services)

    async def run(self, ctx: ToolContext, raw: dict[str, Any]) -> ToolResult | types.CallToolResult:
        if self.needs is not None and getattr(ctx.services, self.needs) is None:
            raise ToolError(ctx.services.not_running_note())
        if self.needs_principal:
            ctx.require_principal()
        return await self.handler(ctx, self.parse(raw, ctx.services))


def parse_args(tool: str, model: type[A], raw: dict[str, Any], services: Services | None = None) -> A:
    """``raw`` validated by ``model``; bad input is a ToolError naming each field and the fix."""
    try:
        return model.model_validate(raw, context=parse_context(services))
    except ValidationError as exc:
        raise ToolError(argument_errors(tool, exc)) from None


def parse_context(services: Services | None, **extra: Any) -> dict[str, Any]:
    """What argument models may read while parsing: the services and the daemon's bar limit."""
    return {"services": services, "max_bars": services.max_bars if services is not None else 5000, **extra}


class WireArgs(BaseModel):
    """Arguments of one of chartgen's tools (and of ours that keep its style).

    The wire names (``WIRE``: every argument the hand-kept schema lists, aliases included) are
    read leniently by :meth:`read`, with chartgen's defaults and our error wording, into the
    model's typed fields; tests check ``WIRE`` against the wire schema's properties.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    WIRE: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        """The typed fields from the raw arguments; raises ToolError naming the field and the fix.

        ``context`` is :func:`parse_context`'s (``services``, ``max_bars``)."""
        return {}

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, raw: Any, info: ValidationInfo) -> Any:
        if not isinstance(raw, dict):
            raise ToolError("arguments must be an object")
        return cls.read(raw, info.context or parse_context(None))


class OneIdArgs(WireArgs):
    """A tool taking one id (``ID``; the service words a missing or unknown one); anything else is refused."""

    TOOL: ClassVar[str] = "this tool"
    ID: ClassVar[str] = "id"
    id: Any

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        extra = set(raw) - {cls.ID}
        if extra:
            raise ToolError(f"{cls.TOOL} takes only {cls.ID}; got {sorted(map(str, extra))[:5]}")
        return {"id": raw.get(cls.ID)}


class NoArgs(WireArgs):
    """A tool without arguments (anything given is refused, naming it)."""

    TOOL: ClassVar[str] = "this tool"

    @classmethod
    def read(cls, raw: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        if raw:
            raise ToolError(f"{cls.TOOL} takes no arguments; got {sorted(map(str, raw))[:5]}")
        return {}


def input_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """An argument model's JSON schema as tools/list shows it (no pydantic title noise at the top)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "arguments"


def argument_errors(tool: str, exc: ValidationError) -> str:
    """One line per wrong field: where it is, what is wrong, and (pydantic's) expected form."""
    parts: list[str] = []
    for err in exc.errors(include_url=False)[:5]:
        where = _where(tuple(err.get("loc", ())))
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            parts.append(f"{where}: {tool} does not take this argument (remove it; see the tool's input schema)")
        elif kind == "missing":
            parts.append(f"{where}: required, give it (see the tool's input schema)")
        else:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            parts.append(f"{where}: {msg}")
    more = len(exc.errors()) - len(parts)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{tool}: invalid arguments — " + "; ".join(parts) + tail
