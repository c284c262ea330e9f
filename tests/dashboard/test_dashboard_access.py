"""Who may reach the dashboard: nothing but the sign-in page without a session; a session only from the
operator passphrase (attempts limited); the cookie's flags; CSRF on every change; sessions that
expire (idle, absolute) and are revoked at once — an open event stream ends with ``bye``; tokens and
OAuth clients revoked from the dashboard stop working at once; alert input errors name the field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon import ALL_MIGRATIONS
from dashboard.sessions import SessionStore
from storage import Database
from testkit.daemon_proc import DaemonProc, create_token, start_daemon
from testkit.oauth import PASSPHRASE, set_passphrase

pytestmark = pytest.mark.timeout(120)

READS = ["/ui/api/overview", "/ui/api/chart?symbol=BTCUSDT&interval=1m", "/ui/api/alerts", "/ui/api/notifications",
         "/ui/api/orders", "/ui/api/health", "/ui/api/access", "/ui/events", "/ui/static/app.js"]  # fmt: skip
CHANGES = [("POST", "/ui/api/alerts"), ("DELETE", "/ui/api/alerts/x"), ("POST", "/ui/api/tokens"),
           ("DELETE", "/ui/api/tokens/x"), ("DELETE", "/ui/api/oauth-clients/x"), ("DELETE", "/ui/api/sessions/x"),
           ("POST", "/ui/logout")]  # fmt: skip


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(
        ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"], data_dir=tmp_path
    )
    try:
        yield await proc.wait_ready()
    finally:
        await proc.stop()


def browser_session() -> aiohttp.ClientSession:
    """A client that keeps cookies of an IP-address host (aiohttp's default jar refuses them)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def sign_in(http: aiohttp.ClientSession, base: str, passphrase: str = PASSPHRASE) -> aiohttp.ClientResponse:
    async with http.post(f"{base}/ui/login", data={"passphrase": passphrase}, allow_redirects=False) as r:
        await r.read()
        return r


async def csrf_of(http: aiohttp.ClientSession, base: str) -> str:
    async with http.get(f"{base}/ui") as r:
        page = await r.text()
    return page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


@pytest.mark.process
async def test_without_a_session_only_the_sign_in_page_answers(daemon: DaemonProc) -> None:
    async with browser_session() as http:
        async with http.get(f"{daemon.base}/ui") as r:
            page = await r.text()
            assert r.status == 200 and 'id="passphrase"' in page and "csrf-token" not in page
            assert (
                r.headers["X-Frame-Options"] == "DENY" and "default-src 'self'" in r.headers["Content-Security-Policy"]
            )
        for path in READS:
            async with http.get(f"{daemon.base}{path}") as r:
                assert r.status == 401, path
                assert "sign in" in (await r.json())["error"]
        for method, path in CHANGES:
            async with http.request(method, f"{daemon.base}{path}", headers={"X-CSRF-Token": "x"}) as r:
                assert r.status == 401, path


@pytest.mark.process
async def test_sign_in_gives_a_strict_cookie_and_wrong_passphrases_are_limited(daemon: DaemonProc) -> None:
    async with browser_session() as http:
        wrong = await sign_in(http, daemon.base, "not the passphrase at all")
        assert wrong.status == 401 and "chartgen_session" not in wrong.cookies
        statuses = [(await sign_in(http, daemon.base, "still not it, no")).status for _ in range(3)]
        assert 429 in statuses  # the address waits after a failure
        async with http.post(f"{daemon.base}/ui/login", data={"passphrase": "x" * 20}) as r:
            assert "Too many wrong passphrases" in await r.text() or r.status == 401
    async with browser_session() as http:
        for _ in range(100):  # a refused attempt costs nothing: the right one gets in after the short wait
            right = await sign_in(http, daemon.base)
            if right.status != 429:
                break
            await asyncio.sleep(0.1)  # the address's back-off (about a second), not synchronisation
        assert right.status == 303 and right.headers["Location"] == "/ui"
        cookie = right.headers["Set-Cookie"]
        for flag in ("HttpOnly", "SameSite=strict", "Path=/ui"):
            assert flag in cookie
        assert "Secure" not in cookie  # plain http on loopback; base_url https adds it (below)


@pytest.mark.process
async def test_cookie_is_secure_under_an_https_base_url(tmp_path: Path) -> None:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path, env={"CHARTGEN_BASE_URL": "https://charts.example"})
    try:
        async with browser_session() as http:
            right = await sign_in(http, proc.base)
        assert right.status == 303 and "Secure" in right.headers["Set-Cookie"]
    finally:
        await proc.stop()


@pytest.mark.process
async def test_changes_need_the_csrf_token_and_sessions_revoke_at_once(daemon: DaemonProc) -> None:
    async with browser_session() as http:
        assert (await sign_in(http, daemon.base)).status == 303
        csrf = await csrf_of(http, daemon.base)
        for method, path in CHANGES:
            for headers in ({}, {"X-CSRF-Token": "wrong"}):
                async with http.request(method, f"{daemon.base}{path}", headers=headers) as r:
                    assert r.status == 403, (method, path, headers)
        async with http.get(f"{daemon.base}/ui/api/access") as r:
            (mine,) = (await r.json())["sessions"]
        async with browser_session() as other:  # a second browser revokes the first one's session
            assert (await sign_in(other, daemon.base)).status == 303
            other_csrf = await csrf_of(other, daemon.base)
            async with http.get(f"{daemon.base}/ui/events") as stream:
                first = await stream.content.readline()
                assert first == b"event: hello\n"
                async with other.delete(
                    f"{daemon.base}/ui/api/sessions/{mine['id']}", headers={"X-CSRF-Token": other_csrf}
                ) as r:
                    assert r.status == 200
                rest = await asyncio.wait_for(stream.content.read(), 10)
                assert b"event: bye" in rest
        async with http.get(f"{daemon.base}/ui/api/overview") as r:
            assert r.status == 401
        async with http.post(f"{daemon.base}/ui/logout", headers={"X-CSRF-Token": csrf}) as r:
            assert r.status == 401


@pytest.mark.process
async def test_alert_errors_name_the_field_and_tokens_revoked_here_fail_at_once(
    daemon: DaemonProc, tmp_path: Path
) -> None:
    doomed = await create_token(tmp_path, "doomed")
    call: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "list_alerts", "arguments": {}}}  # fmt: skip
    async with browser_session() as http:
        assert (await sign_in(http, daemon.base)).status == 303
        headers = {"X-CSRF-Token": await csrf_of(http, daemon.base)}
        bad = {"symbol": "BTCUSDT", "condition": {"price_above": -5}}
        async with http.post(f"{daemon.base}/ui/api/alerts", json=bad, headers=headers) as r:
            assert r.status == 400 and "price_above" in (await r.json())["error"]
        async with http.post(f"{daemon.base}/ui/api/alerts", json={"symbol": "BTCUSDT"}, headers=headers) as r:
            assert r.status == 400 and "condition" in (await r.json())["error"]
        good = {"symbol": "BTCUSDT", "interval": "1m", "condition": {"price_below": 100}, "note": "floor"}
        async with http.post(f"{daemon.base}/ui/api/alerts", json=good, headers=headers) as r:
            assert r.status == 201
            alert = (await r.json())["alert"]
        assert alert["principal"] == "operator" and alert["note"] == "floor"
        async with http.delete(f"{daemon.base}/ui/api/alerts/{alert['id']}", headers=headers) as r:
            assert r.status == 200
        async with http.delete(f"{daemon.base}/ui/api/alerts/{alert['id']}", headers=headers) as r:
            assert r.status == 404
        mcp = {"Authorization": f"Bearer {doomed}", "Accept": "application/json"}
        async with http.post(daemon.mcp_url, json=call, headers=mcp) as r:
            assert r.status == 200
        async with http.get(f"{daemon.base}/ui/api/access") as r:
            token_id = next(t["id"] for t in (await r.json())["tokens"] if t["name"] == "doomed")
        async with http.delete(f"{daemon.base}/ui/api/tokens/{token_id}", headers=headers) as r:
            assert r.status == 200
        async with http.post(daemon.mcp_url, json=call, headers=mcp) as r:
            assert r.status == 401
        async with http.post(
            f"{daemon.base}/ui/api/tokens", json={"name": "x", "scopes": ["root"]}, headers=headers
        ) as r:
            assert r.status == 400 and "root" in (await r.json())["error"]
        async with http.post(f"{daemon.base}/ui/api/tokens", json={"name": "phone"}, headers=headers) as r:
            created = await r.json()
        async with http.post(
            daemon.mcp_url,
            json=call,
            headers={"Authorization": f"Bearer {created['token']}", "Accept": "application/json"},
        ) as r:
            assert r.status == 200


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_sessions_expire_when_idle_and_at_the_absolute_limit() -> None:
    db = await Database.open(":memory:")
    await db.migrate(ALL_MIGRATIONS)
    clock = Clock()
    store = SessionStore(db, idle_s=3600, max_s=4 * 3600, clock=clock)
    try:
        idle_secret, _ = await store.create("127.0.0.1", "test")
        busy_secret, busy = await store.create("127.0.0.1", "test")
        for _ in range(3):  # the busy one is used every 50 minutes
            clock.now += 3000
            assert await store.verify(busy_secret) is not None
        assert await store.verify(idle_secret) is None  # 150 minutes without a request
        clock.now += 3000  # 200 minutes: still inside the 4-hour absolute limit
        assert await store.verify(busy_secret) is not None
        clock.now += 3000  # 250 minutes: past it, however busy
        assert await store.verify(busy_secret) is None
        assert not await store.still_valid(busy.id)
        assert await store.verify("made-up") is None and await store.verify(None) is None
    finally:
        await db.close()


@pytest.mark.process
async def test_one_passphrase_budget_for_the_dashboard_and_the_consent_page(tmp_path: Path) -> None:
    """A wrong passphrase at /ui makes the same address wait on the OAuth consent page too."""
    import re
    from urllib.parse import urlencode

    import httpx2

    from testkit.oauth import REDIRECT, pkce, register, ticked

    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        async with httpx2.AsyncClient() as http:
            client = (await register(http, proc.base)).json()
            _, challenge = pkce()
            query = {"response_type": "code", "client_id": client["client_id"], "redirect_uri": REDIRECT,
                     "code_challenge": challenge, "code_challenge_method": "S256", "state": "s",
                     "resource": proc.mcp_url}  # fmt: skip
            page_url = (await http.get(f"{proc.base}/authorize?" + urlencode(query))).headers["location"]
            page = (await http.get(page_url)).text
            request_id = re.search(r'name="request" value="([^"]+)"', page)
            assert request_id is not None
            wrong = await http.post(f"{proc.base}/ui/login", data={"passphrase": "a wrong guess, surely"})
            assert wrong.status_code == 401
            form = {"request": request_id.group(1), "passphrase": PASSPHRASE, "decision": "approve",
                    "scope": ticked(page)}  # fmt: skip
            right = await http.post(page_url.split("?")[0], data=form, headers={"origin": proc.base})
            assert right.status_code == 429 and "from your address" in right.text
    finally:
        await proc.stop()
