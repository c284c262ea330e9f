"""Sign-in, sessions on requests, CSRF, and the headers every /ui response carries.

The sign-in page is server-rendered HTML that works without JavaScript.  The passphrase is the
operator's (``chartgen passphrase set`` or the systemd credential), checked with scrypt off the
event loop; attempts are limited per client address with a global budget
(:class:`~mcp_bridge.oauth.attempts.PassphraseAttempts`, the same instance as the OAuth consent
page's, so a guesser gets one budget for both pages).  A browser that signed in before carries a
device cookie (dashboard/device_cookies.py): its attempts are limited per device instead, so a
guesser on rotating addresses cannot keep the operator out; every successful sign-in gets a fresh
one.  The sign-in form is accepted only from the daemon's own origin: ``base_url``'s, or the
loopback origin with the port this server listens on (not any loopback port: another local
program's page must not post to it).  ``/ui/link?token=…`` opens a one-time sign-in link
(``chartgen dashboard link``).  A session cookie is HttpOnly, SameSite=Strict, Path=/ui, and
Secure when ``base_url`` is https; state-changing requests must also send the session's CSRF
token in ``X-CSRF-Token``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from html import escape

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from dashboard.deps import DashboardDeps
from dashboard.device_cookies import DEVICE_COOKIE, device_of, set_device_cookie
from dashboard.sessions import Session, SignInState
from mcp_bridge import TooManyAttempts, check_passphrase_async, origin_of

COOKIE = "chartgen_session"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
MAX_FORM_BYTES = 4096
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})

Handler = Callable[[Request, DashboardDeps, Session], Awaitable[Response]]


def secured(resp: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        resp.headers.setdefault(name, value)
    return resp


def client_of(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


async def current_session(request: Request, deps: DashboardDeps) -> Session | None:
    return await deps.sessions.verify(request.cookies.get(COOKIE))


def problem(status: int, message: str) -> Response:
    return secured(JSONResponse({"error": message}, status_code=status))


def signed_in(deps: DashboardDeps, handler: Handler, *, changes: bool) -> Callable[[Request], Awaitable[Response]]:
    """A route that needs a session (401 without), and for ``changes`` the session's CSRF token (403 without)."""

    async def endpoint(request: Request) -> Response:
        session = await current_session(request, deps)
        if session is None:
            return problem(401, "not signed in: sign in at /ui with the operator passphrase")
        if changes:
            sent = request.headers.get("x-csrf-token", "")
            if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                return problem(403, "missing or wrong X-CSRF-Token header: reload the page and try again")
        return secured(await handler(request, deps, session))

    return endpoint


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>chartgen — sign in</title><link rel="icon" href="/favicon.svg">
<style>
body{{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:#131722;
color:#d1d4dc;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}}
main{{width:min(92vw,360px);padding:28px;border:1px solid #2a2e39;border-radius:8px;background:#1e222d}}
h1{{font-size:20px;margin:0 0 16px}} label{{display:block;margin-bottom:6px}}
input{{box-sizing:border-box;width:100%;padding:10px;border-radius:4px;border:1px solid #434651;background:#131722;
color:#d1d4dc;font-size:16px}}
button{{margin-top:14px;width:100%;padding:10px;border:0;border-radius:4px;background:#26a69a;color:#fff;
font-size:16px;cursor:pointer}}
input:focus-visible,button:focus-visible{{outline:2px solid #f0b90b;outline-offset:2px}}
#login-error{{color:#ef5350;min-height:1.5em;margin:12px 0 0}} p.hint{{color:#787b86;font-size:14px}}
</style></head>
<body><main><h1>chartgen dashboard</h1>
<form method="post" action="/ui/login">
<label for="passphrase">Operator passphrase</label>
<input type="password" id="passphrase" name="passphrase" autocomplete="current-password" required autofocus>
<button id="sign-in" type="submit">Sign in</button>
<p id="login-error" role="alert">{error}</p>
</form><p class="hint">The passphrase set with <code>chartgen passphrase set</code>.</p></main></body></html>
"""


def sign_in_page(error: str = "", status: int = 200) -> Response:
    return secured(Response(_PAGE.format(error=escape(error)), status_code=status, media_type="text/html"))


async def _form_passphrase(request: Request) -> str | None:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    from urllib.parse import parse_qs

    values = parse_qs(body.decode("utf-8", "replace")).get("passphrase")
    return values[0] if values else None


def own_origins(request: Request, base_url: str | None) -> set[str]:
    """The origins a sign-in form may come from: ``base_url``'s, and the loopback names with the port
    this server listens on (``scope["server"]``: the socket's, whatever Host the request names)."""
    origins = {origin_of(base_url)} if base_url else set()
    server = request.scope.get("server")
    if server and server[1] is not None:
        origins |= {f"http://{name}:{server[1]}" for name in LOOPBACK_NAMES}
    return origins


def cross_origin_problem(request: Request, base_url: str | None) -> str | None:
    """Why a sign-in post is not from this daemon's own page (None: it is, or it is no browser's post).

    A browser names the page's origin in ``Origin`` (and ``Sec-Fetch-Site``); a post without
    either is not a browser's, so no other site can have sent it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ALLOWED_FETCH_SITES:
        return f"Sec-Fetch-Site is {site!r}"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    try:
        sent = origin_of(origin) if origin != "null" else "null"
    except ValueError:  # an unparsable port
        sent = origin
    allowed = own_origins(request, base_url)
    if sent in allowed:
        return None
    return f"origin {origin!r} is not this server's ({', '.join(sorted(allowed)) or 'none'})"


def _signed_in(deps: DashboardDeps, state: SignInState, secret: str) -> Response:
    """The answer to a successful sign-in: to the dashboard, with the session and a fresh device cookie."""
    resp = RedirectResponse("/ui", status_code=303)
    resp.set_cookie(
        COOKIE, secret, httponly=True, samesite="strict", path="/ui", secure=deps.secure_cookie,
        max_age=int(deps.sessions.max_s),
    )  # fmt: skip
    set_device_cookie(resp, state, secure=deps.secure_cookie)  # Path=/: the consent page gets it too
    return secured(resp)


def login_route(deps: DashboardDeps) -> Callable[[Request], Awaitable[Response]]:
    async def login(request: Request) -> Response:
        refused = cross_origin_problem(request, deps.base_url)
        if refused is not None:
            return sign_in_page(f"Refused: sign in from this server's own page ({refused}).", 403)
        passphrase = await _form_passphrase(request)
        if not passphrase:
            return sign_in_page("Type the operator passphrase.", 400)
        state = await deps.sessions.sign_in_state()  # before the passphrase: a change in between ends this sign-in
        stored = await deps.passphrase()
        if stored is None:
            return sign_in_page("No operator passphrase is set: run `chartgen passphrase set` on the server.", 403)
        address = client_of(request)
        device = device_of(request.cookies.get(DEVICE_COOKIE), state)
        try:
            attempt = deps.attempts.begin(address, device)
        except TooManyAttempts as exc:
            resp = sign_in_page(f"{exc} Or run `chartgen dashboard link` on the server for a sign-in link.", 429)
            resp.headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
            return resp
        if not await check_passphrase_async(passphrase, stored):
            deps.attempts.failed(attempt)
            return sign_in_page("Wrong passphrase.", 401)
        deps.attempts.succeeded(attempt)
        secret, _ = await deps.sessions.create(address, request.headers.get("user-agent", ""), state.generation)
        return _signed_in(deps, state, secret)

    return login


def link_route(deps: DashboardDeps) -> Callable[[Request], Awaitable[Response]]:
    """``GET /ui/link?token=…``: a one-time sign-in link (``chartgen dashboard link``) opens a session."""

    async def link(request: Request) -> Response:
        state = await deps.sessions.sign_in_state()
        address = client_of(request)
        redeemed = await deps.sessions.redeem_link(
            request.query_params.get("token"), address, request.headers.get("user-agent", "")
        )
        if redeemed is None:
            return sign_in_page(
                "This sign-in link is unknown, used or expired: run `chartgen dashboard link` again.", 400
            )
        secret, session = redeemed
        return _signed_in(deps, state.model_copy(update={"generation": session.generation}), secret)

    return link


async def logout(request: Request, deps: DashboardDeps, session: Session) -> Response:
    await deps.sessions.revoke(session.id)
    resp = Response(status_code=204)
    resp.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict", secure=deps.secure_cookie)
    return resp
