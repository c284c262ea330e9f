"""The consent page: the operator approves (or refuses) a client's authorization with the passphrase.

Server-rendered HTML with one form; it works without JavaScript.  The consent request id
in the form is a 256-bit secret bound to the parked authorization, so it doubles as the
CSRF token; on top of it a POST whose ``Origin`` is not this server's own, or whose
``Sec-Fetch-Site`` is neither ``same-origin`` nor ``none``, is refused before anything is
read.  The page cannot be framed (``frame-ancestors 'none'``) and runs no script.

The scopes the client asked for are checkboxes the operator may untick (:func:`.provider.consent_choices`
says which are offered and pre-ticked); the page names the bare host the code will be sent
to.  Passphrase attempts are limited per client address and globally (:mod:`.attempts`, the
limiter the dashboard's sign-in shares).  A browser that gave the right passphrase before — here
or at the dashboard's sign-in — carries a device cookie (dashboard/device_cookies.py, Path=/ so
both pages receive it); the page's :class:`DeviceVerifier` checks it, and a valid one's attempts
are limited per device instead, so a guesser on rotating addresses cannot keep the global budget
spent and the operator from approving.  A right passphrase refreshes the cookie.  The verifier is
given by the daemon (it reads the signing key from the database): this package does not know
the dashboard.
"""

from __future__ import annotations

import html
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse

import structlog
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from mcp_bridge.oauth.attempts import PassphraseAttempts, TooManyAttempts
from mcp_bridge.oauth.passphrase import check_passphrase_async
from mcp_bridge.oauth.provider import ChartgenOAuthProvider, consent_choices
from mcp_bridge.scopes import DESCRIPTIONS, TRADE

log = structlog.get_logger(__name__)

PassphraseHash = Callable[[], Awaitable[str | None]]


class CheckedDevice(Protocol):
    """A request's device cookie, checked (dashboard/device_cookies.py ``DeviceCheck``)."""

    @property
    def device(self) -> str | None:
        """The verified device's id (None: no valid device cookie)."""
        ...

    def remember(self, response: Response) -> None:
        """The passphrase was right: set a fresh device cookie on ``response``."""
        ...


class DeviceVerifier(Protocol):
    """Checks the device cookie a consent POST carries (dashboard/device_cookies.py ``DeviceCookieJar``)."""

    async def check(self, request: Request) -> CheckedDevice: ...


_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    # not no-referrer: under it browsers send "Origin: null" with the form's POST; same-origin
    # still keeps the page's URL (with its request id) from every other site
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>chartgen — authorize {client}</title>
<style>
body{{font:16px system-ui,sans-serif;background:#131722;color:#d1d4dc;
display:flex;justify-content:center;padding:3em 1em}}
main{{max-width:28em;background:#1e222d;padding:2em;border-radius:8px}}
h1{{font-size:1.3em;margin-top:0}} .warn{{color:#ef5350}}
fieldset{{border:1px solid #363a45;margin:0 0 1em}} fieldset label{{display:block;margin:.3em 0}}
input[type=password]{{width:100%;padding:.5em;margin:.5em 0 1em;box-sizing:border-box}}
button{{padding:.6em 1.2em;margin-right:.5em}} code{{color:#26a69a}}
</style></head><body><main>
<h1>Authorize <code>{client}</code>?</h1>
<p>This client asks to use the chartgen tools on this server.
After approval it will be sent back to <code>{redirect_host}</code>.</p>
{error}
<form method="post" action="{action}">
<input type="hidden" name="request" value="{request}">
<fieldset><legend>Allow it to use</legend>
{scopes}
</fieldset>
<label for="passphrase">Operator passphrase</label>
<input type="password" id="passphrase" name="passphrase" autocomplete="current-password" autofocus>
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></main></body></html>
"""

_SCOPE_BOX = (
    '<label><input type="checkbox" name="scope" value="{name}" id="scope-{name}"{checked}> '
    "<b>{name}</b> — {description}</label>"
)


@dataclass(frozen=True, slots=True)
class Pending:
    """A parked authorization as the page shows it."""

    client: str
    redirect_uri: str
    offered: list[str]
    prechecked: frozenset[str]


def redirect_host(uri: str) -> str:
    """The bare host (and port) the code goes to: no user name, path or query to mislead the reader."""
    try:
        parsed = urlparse(uri)
        host, port = parsed.hostname or "", parsed.port
    except ValueError:
        return "(invalid redirect URI)"
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _page(p: Pending, request_id: str, action: str, error: str | None, status: int, ticked: frozenset[str]) -> Response:
    boxes = "\n".join(
        _SCOPE_BOX.format(
            name=html.escape(name),
            checked=" checked" if name in ticked else "",
            description=html.escape(DESCRIPTIONS.get(name, name))
            + (" <b>(places real orders)</b>" if name == TRADE else ""),
        )
        for name in p.offered
    )
    body = _PAGE.format(
        client=html.escape(p.client),
        redirect_host=html.escape(redirect_host(p.redirect_uri)),
        request=html.escape(request_id),
        action=html.escape(action),
        scopes=boxes,
        error=f'<p class="warn">{html.escape(error)}</p>' if error else "",
    )
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _message(text: str, status: int, headers: dict[str, str] | None = None) -> Response:
    body = f'<!doctype html><meta charset="utf-8"><title>chartgen</title><p>{html.escape(text)}</p>'
    return HTMLResponse(body, status_code=status, headers={**_HEADERS, **(headers or {})})


def client_ip(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, the default port left out (how browsers send ``Origin``)."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    host = (parsed.hostname or "").lower()
    shown = f"[{host}]" if ":" in host else host
    port = parsed.port
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{shown}"
    return f"{scheme}://{shown}:{port}"


def cross_site_problem(request: Request, own_origin: str) -> str | None:
    """Why a consent POST looks cross-site (None: it does not): a foreign Origin or Sec-Fetch-Site.

    ``Origin: null`` (a browser hiding the origin, or a sandboxed frame) passes only when the
    browser also says ``Sec-Fetch-Site: same-origin``.
    """
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ALLOWED_FETCH_SITES:
        return f"Sec-Fetch-Site is {site!r}"
    if origin is None:
        return None
    if origin == "null":
        return None if site is not None and site.lower() == "same-origin" else "origin 'null' without Sec-Fetch-Site"
    try:
        same = origin_of(origin) == own_origin
    except ValueError:  # an unparsable port
        same = False
    return None if same else f"origin {origin!r} is not this server ({own_origin})"


class ConsentPage:
    """GET shows the form; POST checks the passphrase and redirects back with a code (or an error)."""

    def __init__(
        self,
        provider: ChartgenOAuthProvider,
        passphrase_hash: PassphraseHash,
        *,
        attempts: PassphraseAttempts | None = None,
        devices: DeviceVerifier | None = None,
        action: str = "/oauth/consent",
    ) -> None:
        self.provider = provider
        self.passphrase_hash = passphrase_hash
        self.attempts = attempts or PassphraseAttempts()
        self.devices = devices
        """None: no device cookies (every attempt an unknown client's)."""
        self.action = action
        self.own_origin = origin_of(provider.base_url)

    async def _pending(self, request_id: str) -> Pending | None:
        pending = await self.provider.store.consent(request_id)
        if pending is None:
            return None
        client_id, params = pending
        client = await self.provider.get_client(client_id)
        if client is None:  # evicted or expired while the page was open
            return None
        offered, prechecked = consent_choices(params.get("scopes"))
        return Pending(client.client_name or client_id, params["redirect_uri"], offered, prechecked)

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            request_id = request.query_params.get("request", "")
            found = await self._pending(request_id) if request_id else None
            if found is None:
                return _message("This authorization request is unknown or expired. Start again from your client.", 400)
            return _page(found, request_id, self.action, None, 200, found.prechecked)
        problem = cross_site_problem(request, self.own_origin)
        if problem is not None:
            log.warning("oauth_consent_cross_site_refused", reason=problem, ip=client_ip(request))
            return _message(f"Refused: this form may only be sent from this server's own page ({problem}).", 403)
        form = await request.form()
        request_id = str(form.get("request", ""))
        found = await self._pending(request_id) if request_id else None
        if found is None:
            return _message("This authorization request is unknown, expired or already answered.", 400)
        if form.get("decision") == "deny":
            target = await self.provider.deny(request_id)
            return RedirectResponse(target, status_code=303) if target else _message("Already answered.", 400)
        ticked = frozenset(str(v) for v in form.getlist("scope")) & frozenset(found.offered)
        if not ticked:
            return _page(found, request_id, self.action, "Tick at least one scope to approve, or Deny.", 400, ticked)
        ip = client_ip(request)
        checked = await self.devices.check(request) if self.devices is not None else None
        device = checked.device if checked is not None else None
        try:
            attempt = self.attempts.begin(ip, device)
        except TooManyAttempts as exc:
            carried = device is not None  # a valid device cookie, but the device on the untrusted list
            log.warning("oauth_consent_attempts_limited", ip=ip, everyone=exc.everyone, device_cookie=carried)
            resp = _page(found, request_id, self.action, str(exc), 429, ticked)
            resp.headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_s)))
            return resp
        stored = await self.passphrase_hash()
        if stored is None:
            self.attempts.succeeded(attempt)  # nothing was checked: give the attempt back
            return _page(
                found,
                request_id,
                self.action,
                "No operator passphrase is set on this server: run `chartgen passphrase set` first.",
                503,
                ticked,
            )
        if not await check_passphrase_async(str(form.get("passphrase", "")), stored):
            self.attempts.failed(attempt)
            log.warning("oauth_consent_wrong_passphrase", ip=ip, trusted_device=attempt.device is not None)
            return _page(found, request_id, self.action, "Wrong passphrase.", 401, ticked)
        self.attempts.succeeded(attempt)
        target = await self.provider.approve(request_id, ticked)
        resp = (
            RedirectResponse(target, status_code=303)
            if target is not None
            else _message("This authorization request was already answered.", 400)
        )
        if checked is not None:
            checked.remember(resp)  # the operator's browser: a fresh device cookie (a new one, or refreshed)
        return resp
