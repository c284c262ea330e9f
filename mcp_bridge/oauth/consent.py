"""The consent page: the operator approves (or refuses) a client's authorization with the passphrase.

Server-rendered HTML with one form; it works without JavaScript.  The consent request id
in the form is a 256-bit secret bound to the parked authorization, so it doubles as the
CSRF token.  The page cannot be framed (``frame-ancestors 'none'``) and runs no script.
Wrong passphrases count against the client IP; past the limit the page answers 429.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from urllib.parse import urlparse

import structlog
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from mcp_bridge.oauth.passphrase import check_passphrase_async
from mcp_bridge.oauth.provider import ChartgenOAuthProvider
from mcp_bridge.rate_limit import IpLimiter

log = structlog.get_logger(__name__)

PassphraseHash = Callable[[], Awaitable[str | None]]

_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>chartgen — authorize {client}</title>
<style>
body{{font:16px system-ui,sans-serif;background:#131722;color:#d1d4dc;
display:flex;justify-content:center;padding:3em 1em}}
main{{max-width:28em;background:#1e222d;padding:2em;border-radius:8px}}
h1{{font-size:1.3em;margin-top:0}} .warn{{color:#ef5350}}
input[type=password]{{width:100%;padding:.5em;margin:.5em 0 1em;box-sizing:border-box}}
button{{padding:.6em 1.2em;margin-right:.5em}} code{{color:#26a69a}}
</style></head><body><main>
<h1>Authorize <code>{client}</code>?</h1>
<p>This client asks to use the chartgen tools on this server — charts, alerts <b>and orders</b>.
After approval it will be sent back to <code>{redirect_host}</code>.</p>
{error}
<form method="post" action="{action}">
<input type="hidden" name="request" value="{request}">
<label for="passphrase">Operator passphrase</label>
<input type="password" id="passphrase" name="passphrase" autocomplete="current-password" autofocus>
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></main></body></html>
"""


def _page(client: str, redirect_uri: str, request_id: str, action: str, error: str | None, status: int) -> Response:
    body = _PAGE.format(
        client=html.escape(client),
        redirect_host=html.escape(urlparse(redirect_uri).netloc),
        request=html.escape(request_id),
        action=html.escape(action),
        error=f'<p class="warn">{html.escape(error)}</p>' if error else "",
    )
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _message(text: str, status: int) -> Response:
    body = f'<!doctype html><meta charset="utf-8"><title>chartgen</title><p>{html.escape(text)}</p>'
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def client_ip(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


class ConsentPage:
    """GET shows the form; POST checks the passphrase and redirects back with a code (or an error)."""

    def __init__(
        self,
        provider: ChartgenOAuthProvider,
        passphrase_hash: PassphraseHash,
        *,
        failures: IpLimiter | None = None,
        action: str = "/oauth/consent",
    ) -> None:
        self.provider = provider
        self.passphrase_hash = passphrase_hash
        self.failures = failures or IpLimiter(5, 900.0)
        self.action = action

    async def _pending(self, request_id: str) -> tuple[str, str] | None:
        """(client name, redirect_uri) of a pending request."""
        pending = await self.provider.store.consent(request_id)
        if pending is None:
            return None
        client_id, params = pending
        client = await self.provider.get_client(client_id)
        name = (client.client_name if client is not None else None) or client_id
        return name, params["redirect_uri"]

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            request_id = request.query_params.get("request", "")
            found = await self._pending(request_id) if request_id else None
            if found is None:
                return _message("This authorization request is unknown or expired. Start again from your client.", 400)
            return _page(found[0], found[1], request_id, self.action, None, 200)
        form = await request.form()
        request_id = str(form.get("request", ""))
        found = await self._pending(request_id) if request_id else None
        if found is None:
            return _message("This authorization request is unknown, expired or already answered.", 400)
        name, redirect_uri = found
        if form.get("decision") == "deny":
            target = await self.provider.deny(request_id)
            return RedirectResponse(target, status_code=303) if target else _message("Already answered.", 400)
        ip = client_ip(request)
        wait = self.failures.retry_after(ip)
        if wait is not None:
            return _page(
                name, redirect_uri, request_id, self.action, f"Too many wrong passphrases; wait {wait:.0f} s.", 429
            )
        stored = await self.passphrase_hash()
        if stored is None:
            return _page(
                name,
                redirect_uri,
                request_id,
                self.action,
                "No operator passphrase is set on this server: run `chartgen passphrase set` first.",
                503,
            )
        if not await check_passphrase_async(str(form.get("passphrase", "")), stored):
            self.failures.record(ip)
            log.warning("oauth_consent_wrong_passphrase", ip=ip)
            return _page(name, redirect_uri, request_id, self.action, "Wrong passphrase.", 401)
        target = await self.provider.approve(request_id)
        if target is None:
            return _message("This authorization request was already answered.", 400)
        return RedirectResponse(target, status_code=303)
