"""The dashboard's Trading panel API (docs/dashboard.md): the halt switch, per-principal suspensions,
and the active schedules of every principal.

The operator acts here with the operator's authority (:data:`OPERATOR_BY`): the halt it sets is
the operator's, it may lift any halt, its cancel-open covers every principal's open orders, and it
may cancel any principal's schedule.  Every change goes through the daemon's own services — the
halt switch (:mod:`brokers.halt_switch` on a single node, cluster/halt.py's ``ClusterHalt`` at a
cluster front), the suspensions (:mod:`brokers.suspensions`), the schedule service
(:mod:`brokers.schedules.service`) — so the panel does nothing the CLI or an admin token could not,
and says no the same way.  A part that does not run here (no ``--trade``) answers 409 naming how to
start it; a database that cannot be reached answers 503 (routes.py) with nothing done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from brokers import Actor, HaltAuthority, HaltRefused, ScheduleInputError, ScheduleService, iso
from dashboard.api import bad, json_body, ok
from dashboard.deps import OPERATOR, DashboardDeps
from dashboard.sessions import Session
from storage import UNREACHABLE, StorageUnavailable

OPERATOR_BY = "dashboard"
"""Who the suspensions record as acting: the operator, through the dashboard."""

OPERATOR_HALT = HaltAuthority.operator(OPERATOR_BY)
"""The operator's authority on the halt switch (brokers/halt_authority.py): lifts any halt, and its
cancel-open covers every principal's open orders."""

OPERATOR_ACTOR = Actor(principal=OPERATOR, admin=True)
"""The operator as the schedule service sees it: it may cancel every principal's schedule."""

NOT_TRADING = "trading is not running in this daemon: start it with --serve --trade (a cluster: a --cluster front)"
NO_SUSPENSIONS = "suspensions are not available in this daemon: start it with --serve --trade"
MAX_REASON = 200


class HaltBody(BaseModel):
    """``POST /ui/api/trading/halt``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    cancel_open: bool = False


class SuspendBody(BaseModel):
    """``POST /ui/api/trading/suspensions``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    principal: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    cancel_open: bool = False


def _invalid(exc: ValidationError) -> str:
    """The first problem of a body, naming the field and the fix."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    if err["type"] == "extra_forbidden":
        return f"{field}: not a field of this request; send only the documented fields (docs/dashboard.md)"
    return f"{field}: {err['msg']}"


BodyT = TypeVar("BodyT", bound=BaseModel)


async def _read_body(request: Request, model: type[BodyT]) -> BodyT | Response:
    """The request's JSON body as ``model``, or the 400 answer naming the field and the fix."""
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        return bad(400, _invalid(exc))


@contextlib.contextmanager
def _reachable(what: str) -> Iterator[None]:
    """A lost database connection (a cluster front's PostgreSQL away) as :class:`StorageUnavailable`:
    routes.py answers 503 naming what was not done."""
    try:
        yield
    except UNREACHABLE as exc:
        raise StorageUnavailable(f"{what}: the database cannot be reached ({exc!r})") from exc


def _halt_view(state: dict[str, Any]) -> dict[str, Any]:
    """The halt state as the panel shows it, plus ``holder``: who holds the halt in words (None
    while trading runs) — ``by`` and ``holder_kind`` are the recorded name and kind."""
    if not state.get("halted"):
        return state | {"holder": None}
    return state | {"holder": HaltAuthority.holder(state.get("holder_kind"), state.get("by")).describe()}


async def _halt_state(deps: DashboardDeps) -> dict[str, Any] | None:
    halt = deps.services.halt
    if halt is None:
        return None
    refresh = getattr(halt, "refresh", None)  # both switches have it: read afresh (another process may have halted)
    if refresh is not None:
        with _reachable("halt state not read"):
            await refresh()
    return _halt_view(halt.state.public())


async def _schedules(svc: ScheduleService | None) -> list[dict[str, Any]] | None:
    if svc is None:
        return None
    with _reachable("schedules not read"):
        return await svc.active_listing()


async def _principals(deps: DashboardDeps) -> dict[str, dict[str, Any]]:
    """Every principal the operator may suspend: active tokens' and consented OAuth clients'."""
    out: dict[str, dict[str, Any]] = {}
    tokens = deps.services.tokens
    with _reachable("principals not read"):
        infos = await tokens.list() if tokens is not None else []
        clients = await deps.oauth.clients() if deps.oauth is not None else []
    names = {f"oauth:{c['client_id']}": c.get("client_name") or c["client_id"] for c in clients}
    for info in infos:
        if not info.active:
            continue
        if info.kind == "oauth":
            out.setdefault(info.principal, {"principal": info.principal, "name": names.get(info.principal, info.name),
                                            "kind": "oauth"})  # fmt: skip
        else:
            out.setdefault(info.principal, {"principal": info.principal, "name": info.name, "kind": "token"})
    for principal, name in names.items():
        out.setdefault(principal, {"principal": principal, "name": name, "kind": "oauth"})
    return out


async def trading(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``GET /ui/api/trading``: everything the panel shows, in one document."""
    services = deps.services
    halt = await _halt_state(deps)
    schedules = await _schedules(services.schedules)
    principals = await _principals(deps)
    suspensions_svc = deps.services.suspensions
    suspensions: list[dict[str, Any]] | None = None
    if suspensions_svc is not None:
        with _reachable("suspensions not read"):
            rows = await suspensions_svc.list()
        suspensions = []
        for s in rows:
            known = principals.get(s.principal)
            suspensions.append(
                {
                    "principal": s.principal,
                    "name": known["name"] if known else None,
                    "by": s.by,
                    "reason": s.reason,
                    "since": iso(datetime.fromtimestamp(s.since, UTC)),
                }
            )
    suspended = {s["principal"] for s in suspensions or []}
    if halt is not None and str(halt.get("by") or "").startswith("mcp:"):  # a token's halt: its name too
        known = principals.get(str(halt["by"])[4:])
        halt["holder_name"] = known["name"] if known else None
    for schedule in schedules or []:
        known = principals.get(schedule["owner"] or "")
        schedule["owner_name"] = known["name"] if known else None
    running = halt is not None or schedules is not None or suspensions is not None
    return ok(
        {
            "running": running,
            "note": None if running else NOT_TRADING,
            "halt": halt,
            "suspensions": suspensions,
            "principals": [p | {"suspended": p["principal"] in suspended} for p in principals.values()],
            "schedules": schedules,
        }
    )


async def halt(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``POST /ui/api/trading/halt`` ``{"reason"?, "cancel_open"?}``: halt as the operator."""
    switch = deps.services.halt
    if switch is None:
        return bad(409, NOT_TRADING)
    args = await _read_body(request, HaltBody)
    if isinstance(args, Response):
        return args
    with _reachable("trading not halted"):
        state = await switch.halt(reason=args.reason, by=OPERATOR_HALT, cancel_open=args.cancel_open)
    return ok({"halt": _halt_view(state)})


async def resume(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``POST /ui/api/trading/resume``: lift the halt as the operator (who may lift any halt)."""
    switch = deps.services.halt
    if switch is None:
        return bad(409, NOT_TRADING)
    try:
        with _reachable("trading not resumed"):
            state = await switch.resume(by=OPERATOR_HALT)
    except HaltRefused as exc:  # not for the operator today; its message names the holder and the fix
        return bad(409, str(exc))
    return ok({"halt": _halt_view(state)})


async def suspend(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``POST /ui/api/trading/suspensions`` ``{"principal", "reason"?, "cancel_open"?}``."""
    svc = deps.services.suspensions
    if svc is None:
        return bad(409, NO_SUSPENSIONS)
    args = await _read_body(request, SuspendBody)
    if isinstance(args, Response):
        return args
    if args.principal not in await _principals(deps):
        return bad(
            404,
            f"principal: no active token or OAuth client acts as {args.principal[:64]!r};"
            " pick one of the access page's tokens or OAuth clients",
        )
    try:
        with _reachable("principal not suspended"):
            done = await svc.suspend(args.principal, by=OPERATOR_BY, reason=args.reason, cancel_open=args.cancel_open)
    except ValueError as exc:
        return bad(400, str(exc))
    return ok({"suspended": done}, 201)


async def unsuspend(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``DELETE /ui/api/trading/suspensions/{principal}``."""
    svc = deps.services.suspensions
    if svc is None:
        return bad(409, NO_SUSPENSIONS)
    principal = request.path_params["principal"]
    with _reachable("principal not unsuspended"):
        if not any(s.principal == principal for s in await svc.list()):
            return bad(404, f"principal {principal[:64]!r} is not suspended")
        done = await svc.unsuspend(principal, by=OPERATOR_BY)
    return ok({"unsuspended": done})


async def cancel_schedule(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """``DELETE /ui/api/trading/schedules/{schedule_id}``: cancel any principal's schedule."""
    svc = deps.services.schedules
    if svc is None:
        return bad(409, NOT_TRADING)
    schedule_id = request.path_params["schedule_id"]
    try:
        with _reachable("schedule not cancelled"):
            done = await svc.cancel(OPERATOR_ACTOR, schedule_id)
    except ScheduleInputError as exc:
        return bad(404 if "not found" in str(exc) else 409, str(exc))
    return ok({"cancelled": done})
