"""The dashboard's JSON API (docs/dashboard.md): what the operator sees and the few things they do.

Every handler runs behind :func:`dashboard.auth.signed_in` (session; CSRF for changes) and uses
the daemon's own services — alerts through the alert service with set_alert's argument parser
(the same validation and wording), orders through the order service as an administrator, tokens
through the token store, OAuth clients through the OAuth store — so the dashboard can do nothing
an MCP client with every scope could not, and says no the same way.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from alerts import Alert, AlertInputError, Firing, notification_payload, recent_fired
from brokers import Actor, Fill
from dashboard.charts import chart_payload
from dashboard.deps import OPERATOR, DashboardDeps
from dashboard.sessions import Session
from mcp_bridge import ALL_SCOPES, SetAlertArgs, TokenError, ToolError, parse_args, parse_scope_list

ADMIN = Actor(principal=None, admin=True)
MAX_BODY = 16 * 1024


def ok(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def bad(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


async def json_body(request: Request) -> dict[str, Any] | Response:
    """A change request's JSON object body (at most ``MAX_BODY`` bytes), else the 413/400 answer to return."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return bad(413, f"body larger than {MAX_BODY} bytes")
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        return bad(400, f"body is not JSON: {exc}")
    return body if isinstance(body, dict) else bad(400, "body must be a JSON object")


async def overview(request: Request, deps: DashboardDeps, session: Session) -> Response:
    engine = deps.services.engine
    markets: list[dict[str, Any]] = []
    if engine is None and deps.cluster is not None:
        markets = await deps.cluster.markets()
    elif engine is not None:
        for m in engine.status()["markets"]:
            price = engine.sync.last_prices.get(m["symbol"])
            markets.append(
                {
                    "symbol": m["symbol"],
                    "interval": m["interval"],
                    "last_price": price[0] if price else None,
                    "live": m["live"],
                    "ready": bool(m["live"] and m["warm"] and m["synced"]),
                }
            )
    halt = deps.services.halt
    trading = {"halted": False, "reason": None, "by": None, "holder_kind": None, "lifted_by": None}
    if halt is not None:
        state = halt.state.public()
        trading = {
            "halted": bool(halt.halted),
            **{k: state.get(k) for k in ("reason", "by", "holder_kind", "lifted_by")},
        }
    return ok(
        {
            "version": deps.version,
            "markets": markets,
            "indicators": list(deps.indicators),
            "trading": trading,
            "operator_principal": OPERATOR,
            "session": session.id,
        }
    )


async def chart(request: Request, deps: DashboardDeps, session: Session) -> Response:
    q = request.query_params
    try:
        bars = int(q.get("bars", "200"))
    except ValueError:
        return bad(400, "bars must be a whole number of bars, e.g. 200")
    try:
        payload = await chart_payload(deps, q.get("symbol", ""), q.get("interval", ""), bars)
    except ToolError as exc:
        return bad(400, str(exc))
    return ok(payload)


async def alerts(request: Request, deps: DashboardDeps, session: Session) -> Response:
    svc = deps.services.alerts
    if svc is None:
        return ok({"alerts": []})
    return ok({"alerts": [a.listing() | {"principal": a.principal} for a in await svc.store.active()]})


async def create_alert(request: Request, deps: DashboardDeps, session: Session) -> Response:
    svc = deps.services.alerts
    if svc is None:
        return bad(409, "alerts need the live engine: run the daemon with --trade")
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    if "action" in body:
        return bad(400, "action: the dashboard sets notification alerts; set alerts that trade through MCP")
    try:
        args = parse_args("set_alert", SetAlertArgs, body, deps.services)
        answer = await svc.set_alert_spec(OPERATOR, args.spec)
    except (ToolError, AlertInputError) as exc:
        return bad(400, str(exc))
    created = next((a for a in await svc.store.of_principal(OPERATOR) if a.id == answer["alert_id"]), None)
    return ok({"alert": created.listing() | {"principal": OPERATOR} if created else answer}, 201)


async def cancel_alert(request: Request, deps: DashboardDeps, session: Session) -> Response:
    svc = deps.services.alerts
    if svc is None:
        return bad(404, "no alerts: the daemon runs without --trade")
    alert_id = request.path_params["alert_id"]
    try:
        await svc.cancel_alert(None, alert_id)
    except AlertInputError as exc:
        return bad(404, str(exc))
    return ok({"cancelled": alert_id})


async def notifications(request: Request, deps: DashboardDeps, session: Session) -> Response:
    svc = deps.services.alerts
    if svc is None:
        return ok({"notifications": []})
    try:
        limit = max(1, min(1000, int(request.query_params.get("limit", "100"))))
    except ValueError:
        return bad(400, "limit must be a whole number from 1 to 1000")
    rows = await recent_fired(svc.store.db, limit)
    out = []
    for r in rows:
        alert = Alert.model_validate_json(r["record"])
        firing = Firing(alert_id=alert.id, value=r["value"] or 0.0, triggered_at=r["at"], bar_time=r["bar_time"])
        action = orjson.loads(r["action"]) if r["action"] else None
        out.append(notification_payload(alert, firing, action) | {"principal": r["principal"]})
    return ok({"notifications": out})


async def orders(request: Request, deps: DashboardDeps, session: Session) -> Response:
    svc = deps.services.orders
    if svc is None and deps.cluster is not None:
        return ok(await deps.cluster.orders())
    if svc is None:
        return ok({"open_orders": [], "order_lists": [], "fills": [], "positions": [], "balances": [], "broker": None})
    open_orders = await svc.get_orders("open", actor=ADMIN)
    fills = await svc.store.fills(svc.broker.name)
    recent = sorted(fills, key=lambda f: f.time_ms, reverse=True)[:100]
    balance = await svc.get_balance()
    lists = sorted({o["list_id"] for o in open_orders if o.get("list_id")})
    return ok(
        {
            "open_orders": open_orders,
            "order_lists": [await svc.lists.describe(list_id) for list_id in lists],
            "fills": [fill_view(f) for f in recent],
            "positions": await svc.get_positions(),
            "balances": [b for b in balance["balances"] if b["total"]],
            "broker": balance["broker"],
        }
    )


def fill_view(f: Fill) -> dict[str, Any]:
    """A fill as the orders page lists it."""
    return {
        "time_ms": f.time_ms,
        "symbol": f.symbol,
        "side": f.side.lower(),
        "quantity": float(f.quantity),
        "price": float(f.price),
        "commission": float(f.commission),
        "commission_asset": f.commission_asset,
        "order_id": f.client_order_id,
    }


async def health(request: Request, deps: DashboardDeps, session: Session) -> Response:
    """The /status document plus each symbol's stream lag and the exchange request weight used."""
    out = await deps.status()
    engine = deps.services.engine
    if engine is not None:
        now = time.time()
        out["lag_s"] = {s: round(max(0.0, now - ms / 1000), 3) for s, (_, ms) in engine.sync.last_prices.items() if ms}
        out["request_weight_used"] = engine.sync.request_weight_used
    return ok(out)


def _token(info: Any) -> dict[str, Any]:
    return {
        "id": info.id,
        "name": info.name,
        "kind": info.kind,
        "principal": info.principal,
        "scopes": sorted(info.scopes),
        "created_at": info.created_at,
        "expires_at": info.expires_at,
        "last_used_at": info.last_used_at,
        "revoked": info.revoked_at is not None,
        "active": info.active,
    }


async def access(request: Request, deps: DashboardDeps, session: Session) -> Response:
    tokens = deps.services.tokens
    return ok(
        {
            "tokens": [_token(t) for t in await tokens.list() if t.active] if tokens is not None else [],
            "oauth_clients": await deps.oauth.clients() if deps.oauth is not None else [],
            "sessions": [
                {
                    "id": s.id,
                    "created_at": s.created_at,
                    "last_seen_at": s.last_seen_at,
                    "client": s.client,
                    "user_agent": s.user_agent,
                    "current": s.id == session.id,
                }
                for s in await deps.sessions.active()
            ],
        }
    )


async def create_token(request: Request, deps: DashboardDeps, session: Session) -> Response:
    tokens = deps.services.tokens
    if tokens is None:
        return bad(409, "this daemon authenticates nobody (no token store)")
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    name, scopes, days = body.get("name"), body.get("scopes"), body.get("expires_days")
    if not isinstance(name, str):
        return bad(400, "name: give the token a name, e.g. 'laptop'")
    if scopes is not None and (not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes)):
        return bad(400, f"scopes: a list among {', '.join(sorted(ALL_SCOPES))}")
    if days is not None and (not isinstance(days, (int, float)) or not 0 < days <= 3650):
        return bad(400, "expires_days: a number of days from 1 to 3650, or omit it for no expiry")
    try:
        chosen = parse_scope_list(scopes) if scopes else None
        ttl_s = days * 86400 if days else None
        if chosen:
            token, info = await tokens.create(name, ttl_s=ttl_s, scopes=chosen)
        else:
            token, info = await tokens.create(name, ttl_s=ttl_s)
    except (TokenError, ValueError) as exc:
        return bad(400, f"{exc}")
    deps.changed()
    return ok({"token": token, "info": _token(info)}, 201)


async def revoke_token(request: Request, deps: DashboardDeps, session: Session) -> Response:
    tokens = deps.services.tokens
    if tokens is None:
        return bad(404, "no token store")
    try:
        revoked = await tokens.revoke(request.path_params["token_id"])
    except TokenError as exc:
        return bad(404, str(exc))
    deps.changed()
    return ok({"revoked": [t.id for t in revoked]})


async def revoke_client(request: Request, deps: DashboardDeps, session: Session) -> Response:
    if deps.oauth is None:
        return bad(404, "OAuth is not enabled")
    client_id = request.path_params["client_id"]
    if not any(c["client_id"] == client_id for c in await deps.oauth.clients()):
        return bad(404, f"no consented OAuth client {client_id!r}")
    await deps.oauth.revoke_grant(client_id)
    deps.changed()
    return ok({"revoked": client_id})


async def revoke_session(request: Request, deps: DashboardDeps, session: Session) -> Response:
    session_id = request.path_params["session_id"]
    if not await deps.sessions.revoke(session_id):
        return bad(404, f"no active session {session_id!r}")
    return ok({"revoked": session_id})
