"""The process modes: one-shot render, MCP over stdio, MCP over Streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import structlog

from config import Settings
from daemon.front.dashboard import front_dashboard
from daemon.front.runtime import Front, front_services
from daemon.heap import freeze_startup_heap
from daemon.http_server import BindError, DaemonServer, bind_socket, make_server, stop_on_signals
from daemon.metrics import DaemonMetrics
from daemon.parts.dashboard import dashboard_setup
from daemon.parts.oauth import oauth_setup, public_base_url, public_host
from daemon.parts.orders import broker_readiness
from daemon.parts.services import chart_service, daemon_services, describe_endpoints
from daemon.sd_notify import Notifier, keep_alive, watchdog_interval_s
from daemon.supervisor import Supervisor
from engine import ChartRequest, IndicatorError, MarketDataError, parse_requests
from mcp_bridge import (
    ALL_SCOPES,
    Authenticate,
    Caller,
    PassphraseAttempts,
    PgTokenStore,
    Services,
    TokenError,
    TokenStore,
    build_http_app,
    build_server,
    serve_stdio,
)

DEMO_TOKEN_NAME = "sim-demo"
DEMO_PRINCIPAL = "demo"
NOT_READY_BANNER_S = 60.0
"""``--serve --trade``: print why the engine is not ready if it is not ready this long after start."""

log = structlog.get_logger(__name__)


class ModeError(Exception):
    """A start-up problem the operator must fix; the CLI prints it and exits non-zero."""


async def render_once(
    settings: Settings,
    *,
    symbol: str | None,
    interval: str,
    panels: list[str],
    output: Path,
    width: int,
    height: int,
    bars: int,
    source: str,
) -> None:
    """chartgen's default mode: fetch (or sample) data, render one PNG to ``output``."""
    try:
        requests = parse_requests(list(panels))
    except IndicatorError as exc:
        raise ModeError(str(exc)) from exc
    if not 1 <= bars <= settings.max_bars:
        raise ModeError(f"--bars must be between 1 and {settings.max_bars}, got {bars}")
    if not (200 <= width <= 4096 and 150 <= height <= 4096):
        raise ModeError(f"--width must be 200-4096 and --height 150-4096, got {width}x{height}")
    async with chart_service(settings, render_in_pool=False) as charts:
        req = ChartRequest(
            symbol=symbol, interval=interval, indicators=requests, bars=bars, width=width, height=height, source=source
        )
        try:
            out = await charts.chart(req)
        except MarketDataError as exc:
            raise ModeError(f"Failed to fetch data: {exc}") from exc
    assert out.png is not None
    png = out.png

    def write() -> None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(png)

    await asyncio.to_thread(write)
    print(f"Done: {output}")


async def run_stdio(settings: Settings, *, sim: bool, trade: bool = False) -> None:
    """``--mcp``: serve one client over stdin/stdout (with ``--trade`` the engine runs too)."""
    async with daemon_services(settings, sim=sim, trade=trade) as (settings, services):
        server, router = build_server(services)
        log.info("mcp_stdio_started", trade=trade, **describe_endpoints(settings))
        freeze_startup_heap()
        serving = asyncio.create_task(serve_stdio(server), name="mcp-stdio")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, serving.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serving  # ends when stdin closes, or on SIGTERM/SIGINT; cleanup follows in order
        if router.session_push is not None:
            await router.session_push.close()


@contextlib.asynccontextmanager
async def serving_services(
    settings: Settings, *, sim: bool, trade: bool, cluster: bool, address: str
) -> AsyncIterator[tuple[Settings, Services, Front | None]]:
    """The single node's services, or with ``cluster`` a front's on the cluster's PostgreSQL."""
    if cluster:
        async with front_services(settings, address=address) as (settings, services, front):
            yield settings, services, front
    else:
        async with daemon_services(settings, sim=sim, trade=trade) as (settings, services):
            yield settings, services, None


async def run_http(settings: Settings, *, sim: bool, trade: bool, cluster: bool = False) -> None:
    """``--serve`` (and ``--trade``): MCP over Streamable HTTP on ``settings.host:port``; with
    ``cluster`` a stateless front of the cluster (daemon/front/runtime.py)."""
    if not settings.host_is_loopback() and not (settings.base_url or "").startswith("https://"):
        raise ModeError(
            f"refusing to listen on {settings.host} without TLS in front: bearer tokens would cross the network in "
            "clear. Bind 127.0.0.1 behind a TLS proxy, or set base_url (CHARTGEN_BASE_URL) to the https:// URL "
            "that terminates TLS for this server."
        )
    try:
        sock = bind_socket(settings.host, settings.port)
    except BindError as exc:
        raise ModeError(str(exc)) from exc
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}"
    async with serving_services(settings, sim=sim, trade=trade, cluster=cluster, address=address) as (
        settings,
        services,
        front,
    ):
        server, router = build_server(services)
        engine = services.engine
        extra: dict[str, Any] = {}
        guesses = PassphraseAttempts()  # one limiter for the operator passphrase on every page that asks for it
        if settings.oauth_enabled and services.tokens is not None:
            oauth = oauth_setup(settings, services.tokens, public_base_url(settings, host, port), guesses)
            extra = {"extra_routes": oauth.routes, "www_authenticate": oauth.www_authenticate}
        if front is None:
            ui = dashboard_setup(settings, services, lambda: daemon_status_with_channels(services), guesses)
        else:
            ui = front_dashboard(
                settings, services, front, lambda: daemon_status_with_channels(services, front), guesses
            )
        extra["extra_routes"] = [*extra.get("extra_routes", []), *ui]
        if front is not None:
            readiness: Any = front.readiness
        else:
            readiness = (lambda: daemon_readiness(services)) if engine is not None else None
        allowed = public_host(settings)
        metrics = DaemonMetrics(services)
        router.observers.append(metrics.observe_tool)
        app = build_http_app(
            server,
            metrics=metrics.render,
            direct=router.direct,
            host=settings.host,
            allowed_hosts=[allowed] if allowed else None,
            **extra,
            readiness=readiness,
            authenticate=token_authenticator(services.tokens),
            push_hub=services.push,
            push_store=services.alerts.store if services.alerts is not None else None,
            keepalive_s=settings.sse_keepalive_s,
            status=(lambda: daemon_status_with_channels(services, front)),
            max_unauthenticated_body_bytes=settings.max_unauthenticated_body_bytes,
            max_streams_per_principal=settings.max_streams_per_principal,
            metrics_require_token=settings.metrics_require_token,
        )
        http = make_server(app, trusted_proxies=settings.trusted_proxies)
        stop_on_signals(http)
        print(f"MCP server listening on http://{shown}:{port}/mcp", flush=True)
        if front is not None:
            print(
                f"Cluster front {front.member_id}: tokens, OAuth, alerts, notifications, orders and dashboard"
                " sessions in the cluster's PostgreSQL (docs/cluster.md)",
                flush=True,
            )
        if ui:
            print(f"Dashboard: http://{shown}:{port}/ui (sign in with the operator passphrase)", flush=True)
        if sim:
            print(f"Exchange simulator at {settings.binance_rest_url} (control API: /sim/v1/...)", flush=True)
            if services.tokens is not None:
                token = await demo_token(services.tokens)
                print(f"Demo bearer token (this run only): {token}", flush=True)
        banner = Supervisor()
        if engine is not None:
            markets = ", ".join(f"{s} {i}" for s in settings.symbols for i in settings.intervals)
            print(f"Live engine following {markets}; readiness at http://{shown}:{port}/readyz", flush=True)
            banner.start("not-ready-banner", lambda: announce_not_ready(services, f"http://{shown}:{port}/readyz"))
        log.info("mcp_http_started", host=host, port=port, trade=trade, **describe_endpoints(settings))
        freeze_startup_heap()
        notifier = Notifier()
        systemd = asyncio.create_task(_tell_systemd(notifier, http, services, front), name="sd-notify")
        try:
            await http.serve(sockets=[sock])
        finally:
            notifier.stopping()
            systemd.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await systemd
            await banner.close()
            if router.session_push is not None:
                await router.session_push.close()
            notifier.close()


def daemon_readiness(services: Services) -> tuple[bool, list[str]]:
    """/readyz and STATUS=: the engine's readiness plus the broker's degraded states."""
    if services.engine is None:
        return True, []
    ready, reasons = services.engine.readiness()
    broker = broker_readiness(services.orders)
    note = halt_note(services)  # a halt is shown, but the daemon stays ready (it serves; orders are refused)
    return ready and not broker, [*reasons, *broker, *([note] if note else [])]


def halt_note(services: Services) -> str | None:
    """The "HALTED by operator: …" note while the operator's halt switch is on, else None."""
    halt = getattr(services, "halt", None)
    return None if halt is None else halt.note()


def status_line(services: Services, front: Front | None = None) -> str:
    """The one-line state for systemd's STATUS= (a halt first, then degraded reasons)."""
    if front is not None:
        ready, reasons = front.readiness()
        return f"cluster front: {'ready' if ready else 'degraded: ' + '; '.join(reasons)}"
    engine = services.engine
    if engine is None:
        return "serving (charts only)"
    ready, reasons = daemon_readiness(services)
    note = halt_note(services)
    reasons = [r for r in reasons if r != note]
    alerts = services.alerts.evaluator.active_count if services.alerts is not None else 0
    more = f"; +{len(reasons) - 3} more (see /readyz)" if len(reasons) > 3 else ""
    head = "ready" if ready else "degraded: " + "; ".join(reasons[:3]) + more
    line = f"{head} | {len(engine.markets)} markets, {alerts} alerts active"
    return f"{note} | {line}" if note else line


async def announce_not_ready(
    services: Services, readyz_url: str, *, after_s: float = NOT_READY_BANNER_S, out: TextIO | None = None
) -> None:
    """The start-up banner's follow-up: if the engine is not ready ``after_s`` after start, say why.

    Prints one line pointing at ``/readyz`` and then the current reasons (each naming the last
    error of a stream or warm-up), so a user whose exchange refuses them sees it without
    reading the log.  Prints nothing when the engine becomes ready in time.
    """
    engine = services.engine
    if engine is None:
        return
    try:
        async with asyncio.timeout(after_s):
            await engine.wait_ready()
        return
    except TimeoutError:
        pass
    ready, reasons = daemon_readiness(services)
    if ready:
        return
    lines = [f"Live engine not ready after {after_s:g} s (details: {readyz_url}):"]
    lines += [f"  {reason}" for reason in reasons[:5]]
    if len(reasons) > 5:
        lines.append(f"  … and {len(reasons) - 5} more")
    print("\n".join(lines), file=out or sys.stdout, flush=True)


async def _tell_systemd(notifier: Notifier, http: DaemonServer, services: Services, front: Front | None = None) -> None:
    """READY=1 once the server listens; then STATUS= updates and watchdog pings while the loop is healthy."""
    if not notifier.enabled:
        return
    await http.listening.wait()
    notifier.ready(status_line(services, front))
    await keep_alive(notifier, lambda: status_line(services, front), watchdog_interval_s() or 10.0)


def daemon_status(services: Services) -> dict[str, Any]:
    """GET /status: readiness and its reasons, the engine's markets and connections (with their last
    errors), the alert engine's counters, and every periodic job of the daemon's scheduler."""
    out: dict[str, Any] = {}
    if services.engine is not None:
        ready, reasons = daemon_readiness(services)
        out["ready"], out["reasons"] = ready, reasons
        out["engine"] = services.engine.status()
    if services.alerts is not None:
        out["alerts"] = services.alerts.evaluator.status()
    if services.push is not None:
        out["push_streams"] = services.push.stream_count()
    scheduler = getattr(services, "scheduler", None)
    if scheduler is not None:
        out["scheduler"] = scheduler.status()  # every periodic job: trigger, next run, last outcome
    halt = getattr(services, "halt", None)
    if halt is not None:
        out["trading"] = halt.state.public()
    return out


async def daemon_status_with_channels(services: Services, front: Front | None = None) -> dict[str, Any]:
    """GET /status: :func:`daemon_status` plus every notification channel's delivery state (and a
    front's cluster state)."""
    out = daemon_status(services)
    if front is not None:
        out["cluster"] = front.status()
    channels = getattr(services, "channels", None)
    if channels is not None:
        out["channels"] = await channels.status()
    return out


def token_authenticator(tokens: TokenStore | PgTokenStore | None) -> Authenticate | None:
    """Bearer token → the caller (principal and scopes) through the token store (None: nothing authenticates)."""
    if tokens is None:
        return None

    async def authenticate(token: str) -> Caller | None:
        info = await tokens.verify(token)
        return None if info is None else Caller(info.principal, info.scopes)

    return authenticate


async def demo_token(tokens: TokenStore | PgTokenStore) -> str:
    """A fresh token for the offline demo (--sim); the previous demo token is revoked.

    Every run's demo token has the same principal, so the demo's alerts, notifications and
    orders are still its own after a restart; it holds every scope (the demo is the operator's).
    The new token is made before the old ones are revoked (by id): the principal never stands
    without a credential, so the revocation stops nothing it armed (mcp_bridge/revocation.py) —
    a restart of the demo is not a revocation of the demo.
    """
    previous = [info.id for info in await tokens.list() if info.name == DEMO_TOKEN_NAME and info.revoked_at is None]
    token, _ = await tokens.create(DEMO_TOKEN_NAME, principal=DEMO_PRINCIPAL, scopes=ALL_SCOPES)
    for token_id in previous:
        with contextlib.suppress(TokenError):
            await tokens.revoke(token_id)
    return token


def fail(message: str) -> int:
    """Print a one-line reason to stderr and return the exit status."""
    print(f"chartgen: error: {message}", file=sys.stderr)
    return 1
