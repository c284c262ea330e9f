"""Device cookies: what a browser that signed in once carries so that a guesser cannot keep it out.

OWASP's "Slow Down Online Guessing Attacks with Device Cookies": after a successful sign-in the
browser gets a long-lived cookie ``v1.<login>.<nonce>.<signature>`` — the login it was issued for,
a random nonce (the device's id), and an HMAC-SHA256 over both and the sign-in generation, keyed
with the dashboard's signing key.  The key and the generation live in the database
(:class:`~dashboard.sessions.SignInState`, the ``dashboard_auth`` row), so a device cookie issued
at one cluster front is valid at every other, and ``chartgen passphrase set`` (which bumps the
generation) ends every device cookie at once.  A sign-in attempt carrying a valid one is limited
per device (:class:`mcp_bridge.oauth.attempts.PassphraseAttempts`), never by the global budget.

The cookie grants nothing by itself: it only changes which limit a passphrase attempt counts
against.  This module owns its format, issuing and verifying, and the cookie's attributes
(:func:`set_device_cookie`); nothing here touches storage (:class:`DeviceCookieJar` is handed the
store's :meth:`~dashboard.sessions.Sessions.sign_in_state`).

Two pages ask for the operator passphrase and share one limiter: the dashboard's sign-in
(``/ui/login``) and the OAuth consent page (``/oauth/consent``, mcp_bridge/oauth/consent.py, which
checks device cookies through :class:`DeviceCookieJar`).  So the cookie is set with ``Path=/``:
both pages receive the same cookie — one device, one per-device count, whichever page signed it —
and a sign-in at either refreshes it.  (A second cookie scoped to the consent path would give a
browser two devices with two counts, and the consent page would never see the one the dashboard
issued.)  The price is that the browser also sends it with its other requests to this origin
(``/mcp``, ``/token``): harmless, as it is HttpOnly and grants nothing.  SameSite=Strict works on
both pages: each form posts to its own origin from a page of that origin (the consent page is
often reached by a cross-site redirect from the client, but only its GET is cross-site, and that
needs no cookie).  Secure when ``base_url`` is https.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from dashboard.sessions import SignInState

DEVICE_COOKIE = "chartgen_device"
LOGIN = "operator"
"""The one login the dashboard has (the operator's passphrase)."""
DEVICE_MAX_S = 365 * 86400
"""How long a browser keeps its device cookie (the passphrase changing ends it sooner)."""
DEVICE_PATH = "/"
"""Where the browser sends it: every passphrase page (``/ui/login`` and ``/oauth/consent``)."""
_VERSION = "v1"
_MAX_LENGTH = 200


def _signature(state: SignInState, login: str, nonce: str) -> str:
    message = f"{_VERSION}|{state.generation}|{login}|{nonce}".encode()
    mac = hmac.new(bytes.fromhex(state.device_key), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def issue_device_cookie(state: SignInState, login: str = LOGIN) -> str:
    """A new device cookie for ``login`` under the current key and generation."""
    nonce = secrets.token_urlsafe(16)
    return f"{_VERSION}.{login}.{nonce}.{_signature(state, login, nonce)}"


def device_of(cookie: str | None, state: SignInState, login: str = LOGIN) -> str | None:
    """The device id (its nonce) of a valid device cookie for ``login``; None when absent, malformed,
    signed with another key or for an earlier generation (the passphrase changed since)."""
    if cookie is None or not 0 < len(cookie) <= _MAX_LENGTH:
        return None
    parts = cookie.split(".")
    if len(parts) != 4 or parts[0] != _VERSION or parts[1] != login or not parts[2]:
        return None
    if not hmac.compare_digest(parts[3].encode(), _signature(state, login, parts[2]).encode()):
        return None
    return parts[2]


def set_device_cookie(response: Response, state: SignInState, *, secure: bool) -> None:
    """Give the browser a fresh device cookie under ``state`` (after a right passphrase, on any page):
    HttpOnly, SameSite=Strict, Path=/, a year, Secure when ``secure`` (``base_url`` is https)."""
    response.set_cookie(
        DEVICE_COOKIE, issue_device_cookie(state), max_age=DEVICE_MAX_S, path=DEVICE_PATH, secure=secure,
        httponly=True, samesite="strict",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    """A request's device cookie, checked under the sign-in state read before its passphrase is."""

    device: str | None
    """The verified device's id (None: no valid device cookie)."""
    state: SignInState
    secure: bool

    def remember(self, response: Response) -> None:
        """The passphrase was right: a fresh device cookie (under the state checked, so a passphrase
        change racing this sign-in voids it too)."""
        set_device_cookie(response, self.state, secure=self.secure)


class DeviceCookieJar:
    """Device cookies for a passphrase page outside the dashboard (the OAuth consent page's
    :class:`mcp_bridge.oauth.consent.DeviceVerifier`), over the database's sign-in state."""

    def __init__(self, sign_in_state: Callable[[], Awaitable[SignInState]], *, secure: bool) -> None:
        self.sign_in_state = sign_in_state
        self.secure = secure

    async def check(self, request: Request) -> DeviceCheck:
        state = await self.sign_in_state()
        return DeviceCheck(device_of(request.cookies.get(DEVICE_COOKIE), state), state, self.secure)
