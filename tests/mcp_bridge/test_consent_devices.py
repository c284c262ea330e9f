"""The OAuth consent page honours device cookies (issue 36 §4): a guesser on rotating addresses keeps
the global budget spent, yet a consent POST carrying a valid device cookie — issued by the
dashboard's sign-in or by an earlier consent, Path=/ so both pages receive it — is checked (limited
per device, the same limiter and rules as the dashboard's) and a right passphrase refreshes the
cookie; without one it is refused 429.  The rules against the real consent endpoint on an injected
clock, then on a real single-node daemon.  The cluster's fronts: tests/cluster/test_front_consent_devices.py;
the dashboard's sign-in: tests/dashboard/test_dashboard_sign_in.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx2
import pytest
from mcp.server.auth.provider import AuthorizationParams
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.responses import Response

from daemon import ALL_MIGRATIONS
from daemon import serving as serve_app
from dashboard import (
    DEVICE_COOKIE,
    DeviceCookieJar,
    SessionStore,
    SignInState,
    device_of,
    end_every_sign_in,
    issue_device_cookie,
    set_device_cookie,
)
from mcp_bridge.oauth.attempts import PassphraseAttempts
from mcp_bridge.oauth.passphrase import hash_passphrase
from mcp_bridge.oauth.provider import ChartgenOAuthProvider
from mcp_bridge.oauth.routes import oauth_routes
from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tokens import TokenStore
from storage import Database
from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.oauth import PASSPHRASE, REDIRECT, client, pkce, register, set_passphrase
from tests.dashboard.test_dashboard_sign_in import from_address, spend_the_global_budget

pytestmark = pytest.mark.timeout(120)

DEVICE_LIMIT = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Answer:
    status: int
    body: str
    location: str
    device_cookies: list[str]
    """The ``Set-Cookie`` headers of the device cookie (whole, attributes and all)."""

    def device_cookie(self) -> str:
        """The value of the (one) device cookie the answer set."""
        assert len(self.device_cookies) == 1, self.device_cookies
        match = re.match(rf"{DEVICE_COOKIE}=([^;]+);", self.device_cookies[0])
        assert match is not None, self.device_cookies
        return match.group(1)


async def post_consent(address: str, url: str, request_id: str, passphrase: str, device: str | None = None) -> Answer:
    """The consent form's approve POST from loopback source ``address``, carrying ``device`` as the
    device cookie (None: no cookie)."""
    form = {"request": request_id, "passphrase": passphrase, "decision": "approve", "scope": "charts"}
    headers = {"cookie": f"{DEVICE_COOKIE}={device}"} if device is not None else {}
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(url, data=form, headers=headers, allow_redirects=False) as r:
            cookies = [c for c in r.headers.getall("set-cookie", []) if c.startswith(f"{DEVICE_COOKIE}=")]
            return Answer(r.status, await r.text(), r.headers.get("location", ""), cookies)


# --- the consent endpoint, the limiter on an injected clock ------------------------------------------


@dataclass
class Consent:
    url: str
    provider: ChartgenOAuthProvider
    sessions: SessionStore
    clock: Clock

    async def request_id(self) -> str:
        """A new parked authorization's request id (the consent page's form field)."""
        info = client("consenting")
        await self.provider.register_client(info)
        _, challenge = pkce()
        params = AuthorizationParams(
            state=None,
            scopes=None,
            code_challenge=challenge,
            redirect_uri=AnyUrl(REDIRECT),
            redirect_uri_provided_explicitly=True,
        )
        return (await self.provider.authorize(info, params)).split("request=")[1]

    async def spend_the_global_budget(self, first: int) -> None:
        """Wrong guesses from new addresses (127.0.9.``first`` on) until one is refused for everyone."""
        request_id = await self.request_id()
        for n in range(first, first + 10):
            answer = await post_consent(f"127.0.9.{n}", self.url, request_id, f"guess {n}")
            if answer.status == 429:
                assert "on this server" in answer.body
                return
            assert answer.status == 401, answer.body
        raise AssertionError("the global budget was never spent")


@pytest.fixture
async def consent(tmp_path: Path) -> AsyncIterator[Consent]:
    db = await Database.open(tmp_path / "chartgen.db")
    await db.migrate(ALL_MIGRATIONS)
    stored = hash_passphrase(PASSPHRASE)

    async def passphrase_hash() -> str:
        return stored

    clock = Clock()
    provider = ChartgenOAuthProvider(
        OAuthStore(db), TokenStore(db), base_url="http://127.0.0.1:1", redirect_hosts=["localhost"]
    )
    sessions = SessionStore(db)
    attempts = PassphraseAttempts(clock=clock, device_limit=DEVICE_LIMIT)
    devices = DeviceCookieJar(sessions.sign_in_state, secure=False)
    app = Starlette(routes=oauth_routes(provider, passphrase_hash, attempts=attempts, devices=devices))
    try:
        async with serve_app(app) as url:
            yield Consent(f"{url}/oauth/consent", provider, sessions, clock)
    finally:
        await db.close()


async def test_a_device_cookie_gets_a_consent_checked_while_the_global_budget_is_spent(consent: Consent) -> None:
    """Before: every consent attempt counted against the global budget, so guessers on rotating
    addresses kept the operator from approving; now an attempt with a valid device cookie is checked."""
    first = await post_consent("127.0.0.2", consent.url, await consent.request_id(), PASSPHRASE)
    assert first.status == 303 and "code=" in first.location
    (set_cookie,) = first.device_cookies  # a right passphrase gives the browser a device cookie
    attributes = {part.strip().lower() for part in set_cookie.split(";")[1:]}
    assert {"httponly", "path=/", "samesite=strict", f"max-age={365 * 86400}"} <= attributes
    assert "secure" not in attributes  # base_url is http here
    device = first.device_cookie()
    assert device_of(device, await consent.sessions.sign_in_state()) is not None

    await consent.spend_the_global_budget(1)
    request_id = await consent.request_id()
    refused = await post_consent("127.0.0.3", consent.url, request_id, PASSPHRASE)
    assert refused.status == 429 and "on this server" in refused.body  # an unknown client: the global budget
    assert refused.device_cookies == []
    forged = device[:-2] + ("AA" if not device.endswith("AA") else "BB")
    assert (await post_consent("127.0.0.3", consent.url, request_id, PASSPHRASE, forged)).status == 429

    admitted = await post_consent("127.0.0.4", consent.url, request_id, PASSPHRASE, device)
    assert admitted.status == 303 and "code=" in admitted.location
    refreshed = admitted.device_cookie()
    assert refreshed != device and device_of(refreshed, await consent.sessions.sign_in_state()) is not None


async def test_the_dashboards_device_cookie_counts_per_device_on_the_consent_page(consent: Consent) -> None:
    """One device for both pages: a cookie the dashboard's sign-in issued is honoured here; its wrong
    passphrases count against the device (not the spent global budget) up to the device limit, after
    which it is an unknown client's; a passphrase change ends it."""
    device = issue_device_cookie(await consent.sessions.sign_in_state())  # what /ui/login sets
    await consent.spend_the_global_budget(1)
    request_id = await consent.request_id()
    for n in range(DEVICE_LIMIT):  # checked although the global budget is spent: the device's own count
        wrong = await post_consent(f"127.0.1.{n + 1}", consent.url, request_id, "not it", device)
        assert wrong.status == 401 and wrong.device_cookies == []
    untrusted = await post_consent("127.0.1.9", consent.url, request_id, PASSPHRASE, device)
    assert untrusted.status == 429 and "on this server" in untrusted.body

    consent.clock.now += 3600  # the device window and the global window over
    fresh = issue_device_cookie(await consent.sessions.sign_in_state())
    async with consent.sessions.db.transaction() as tx:
        await end_every_sign_in(tx, consent.clock())  # `chartgen passphrase set`
    await consent.spend_the_global_budget(20)
    ended = await post_consent("127.0.1.10", consent.url, request_id, PASSPHRASE, fresh)
    assert ended.status == 429 and "on this server" in ended.body


def test_the_device_cookie_is_secure_under_an_https_base_url() -> None:
    resp = Response()
    set_device_cookie(resp, SignInState(device_key="ab" * 32, generation=1), secure=True)
    attributes = {part.strip().lower() for part in resp.headers["set-cookie"].split(";")[1:]}
    assert {"secure", "httponly", "path=/", "samesite=strict"} <= attributes


# --- a real daemon -----------------------------------------------------------------------------------


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        yield await proc.wait_ready()
    finally:
        await proc.stop()


async def parked_consent(base: str) -> tuple[str, str]:
    """Register a client and follow /authorize: (the consent page's action URL, its request id)."""
    async with httpx2.AsyncClient() as http:
        reg = (await register(http, base)).json()
        _, challenge = pkce()
        query = (
            f"response_type=code&client_id={reg['client_id']}&redirect_uri={REDIRECT}"
            f"&code_challenge={challenge}&code_challenge_method=S256"
        )
        page_url = (await http.get(f"{base}/authorize?{query}")).headers["location"]
    return page_url.split("?")[0], page_url.split("request=")[1]


@pytest.mark.process
async def test_the_daemons_consent_page_checks_a_device_cookie_while_guessers_spend_the_budget(
    daemon: DaemonProc,
) -> None:
    base = daemon.base
    jar = aiohttp.CookieJar(unsafe=True)
    async with from_address("127.0.2.1", jar) as operator:  # the operator signed in at the dashboard once
        async with operator.post(
            f"{base}/ui/login", data={"passphrase": PASSPHRASE}, headers={"Origin": base}, allow_redirects=False
        ) as r:
            assert r.status == 303, await r.text()
    (cookie,) = [c for c in jar if c.key == DEVICE_COOKIE]
    assert cookie["path"] == "/"  # the consent page receives it too
    action, request_id = await parked_consent(base)

    await spend_the_global_budget(base, first=30)  # at the dashboard's sign-in: one limiter for both pages
    refused = await post_consent("127.0.2.2", action, request_id, PASSPHRASE)
    assert refused.status == 429 and "on this server" in refused.body

    admitted = await post_consent("127.0.2.3", action, request_id, PASSPHRASE, cookie.value)
    assert admitted.status == 303 and "code=" in admitted.location
    refreshed = admitted.device_cookie()
    assert refreshed != cookie.value

    # and the consent page's cookie gets the dashboard's sign-in checked too (the budget still spent)
    async with from_address("127.0.2.4") as other:
        async with other.post(f"{base}/ui/login", data={"passphrase": PASSPHRASE}, allow_redirects=False) as r:
            assert r.status == 429, await r.text()
        async with other.post(
            f"{base}/ui/login",
            data={"passphrase": PASSPHRASE},
            headers={"cookie": f"{DEVICE_COOKIE}={refreshed}"},
            allow_redirects=False,
        ) as r:
            assert r.status == 303, await r.text()
