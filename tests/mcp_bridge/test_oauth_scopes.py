"""OAuth scopes and the consent page's guards against a real ``chartgen --serve``: scopes advertised,
offered as checkboxes the operator narrows, carried onto the tokens and kept (never widened) by a
refresh; a cross-site consent POST refused; userinfo and look-alike redirect URIs refused."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx2
import pytest

from mcp_bridge.oauth.consent import redirect_host
from mcp_bridge.oauth.provider import ChartgenOAuthProvider
from mcp_bridge.scopes import CHARTS, TOOL_SCOPES
from mcp_bridge.tools.catalog import TOOL_NAMES
from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.oauth import (
    PASSPHRASE,
    REDIRECT,
    authorized,
    exchange,
    pkce,
    refresh,
    register,
    set_passphrase,
    ticked,
    tools_call,
    tools_list,
)

ALERT_TOOLS = {
    "set_alert",
    "list_alerts",
    "cancel_alert",
    "get_notifications",
    "subscribe_notifications",
    "unsubscribe_notifications",
    "list_subscriptions",
    "log_event",
    "get_events",
}


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        yield proc
    finally:
        await proc.stop()


async def consent_page(http: httpx2.AsyncClient, base: str, scope: str | None) -> tuple[str, str]:
    """Register a client and follow /authorize (asking for ``scope``); returns (consent URL, page HTML)."""
    reg = await register(http, base)
    assert reg.status_code == 201, reg.text
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": reg.json()["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "s",
        **({"scope": scope} if scope is not None else {}),
    }
    first = await http.get(f"{base}/authorize?{urlencode(query)}")
    assert first.status_code == 302, first.text
    page = await http.get(first.headers["location"])
    assert page.status_code == 200, page.text
    return first.headers["location"], page.text


def offered(page: str) -> list[str]:
    return re.findall(r'name="scope" value="([^"]+)"', page)


@pytest.mark.process
async def test_scopes_are_advertised_in_both_metadata_documents(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        server = (await http.get(f"{daemon.base}/.well-known/oauth-authorization-server")).json()
        resource = (await http.get(f"{daemon.base}/.well-known/oauth-protected-resource/mcp")).json()
    assert server["scopes_supported"] == ["charts", "alerts", "trade", "admin"]
    assert resource["scopes_supported"] == ["charts", "alerts", "trade", "admin"]


@pytest.mark.process
async def test_the_consent_page_offers_what_was_asked_and_ticks_only_charts_and_alerts(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        _, page = await consent_page(http, daemon.base, None)
        assert offered(page) == ["charts", "alerts", "trade"]
        assert ticked(page) == ["charts", "alerts"]
        _, page = await consent_page(http, daemon.base, "charts trade admin")
        assert offered(page) == ["charts", "trade", "admin"]
        assert ticked(page) == ["charts"]  # trading and admin are ticked by the operator, never by default
        assert "localhost:3030" in page


@pytest.mark.process
async def test_scopes_narrowed_on_the_consent_page_are_on_the_token_and_survive_refresh(daemon: DaemonProc) -> None:
    base, url = daemon.base, daemon.mcp_url
    async with httpx2.AsyncClient() as http:
        g = await authorized(http, base, scope="charts alerts trade", tick=["charts", "trade"])
        issued = await exchange(http, base, g)
        assert issued.status_code == 200, issued.text
        tokens = issued.json()
        assert tokens["scope"] == "charts trade"
        want = set(TOOL_NAMES) - ALERT_TOOLS
        assert set(await tools_list(http, url, tokens["access_token"])) == want
        refused = (await tools_call(http, url, tokens["access_token"], "list_alerts")).json()["result"]
        assert refused["isError"] and "list_alerts needs the 'alerts' scope" in refused["content"][0]["text"]

        rotated = await refresh(http, base, g, tokens["refresh_token"])
        assert rotated.status_code == 200, rotated.text
        assert rotated.json()["scope"] == "charts trade"
        assert set(await tools_list(http, url, rotated.json()["access_token"])) == want

        # asking a refresh for more than was granted is refused; asking for less narrows
        wider = await http.post(
            f"{base}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": rotated.json()["refresh_token"],
                "scope": "charts alerts trade",
                "client_id": g.client_id,
                "client_secret": g.client_secret,
            },
        )
        assert wider.status_code == 400 and wider.json()["error"] == "invalid_scope"
        narrower = await http.post(
            f"{base}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": rotated.json()["refresh_token"],
                "scope": "charts",
                "client_id": g.client_id,
                "client_secret": g.client_secret,
            },
        )
        assert narrower.status_code == 200 and narrower.json()["scope"] == "charts"
        assert (
            set(await tools_list(http, url, narrower.json()["access_token"]))
            == {n for n in TOOL_NAMES if TOOL_SCOPES[n] == CHARTS}
            >= {"generate_chart", "list_indicators", "get_indicators"}
        )


@pytest.mark.process
async def test_approving_with_every_box_unticked_grants_nothing(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        page_url, page = await consent_page(http, daemon.base, None)
        request_id = re.search(r'name="request" value="([^"]+)"', page)
        assert request_id is not None
        form = {"request": request_id.group(1), "passphrase": PASSPHRASE, "decision": "approve"}
        answer = await http.post(page_url.split("?")[0], data=form, headers={"origin": daemon.base})
        assert answer.status_code == 400 and "Tick at least one scope" in answer.text
        assert "location" not in answer.headers


CROSS_SITE = [
    {"origin": "https://evil.example"},
    {"origin": "null"},
    {"origin": "null", "sec-fetch-site": "cross-site"},
    {"origin": "http://127.0.0.1:notaport"},
    {"origin": "http://127.0.0.1.evil.example"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
]

LOOK_ALIKES = [
    "http://evil.example@localhost/cb",
    "http://user:pw@localhost:3030/cb",
    "http://evil.localhost/cb",
    "http://localhost.evil.example/cb",
    "https://localhost.evil.example/cb",
    "http://127.0.0.1.evil.example/cb",
    "https://evil.127.0.0.1/cb",
    "https://claude.ai.evil.example/cb",
    "https://evil-claude.ai/cb",
]


@pytest.mark.process
async def test_a_cross_site_consent_post_is_refused_and_the_request_stays_pending(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        page_url, page = await consent_page(http, daemon.base, None)
        request_id = re.search(r'name="request" value="([^"]+)"', page)
        assert request_id is not None
        form = {"request": request_id.group(1), "passphrase": PASSPHRASE, "decision": "approve", "scope": ["charts"]}
        action = page_url.split("?")[0]
        for headers in CROSS_SITE:
            for decision in ("approve", "deny"):
                refused = await http.post(action, data={**form, "decision": decision}, headers=headers)
                assert refused.status_code == 403, (headers, refused.text)
                assert "location" not in refused.headers
        # what Chromium sends when the page's referrer policy hides the origin: still this server's own
        hidden = {"origin": "null", "sec-fetch-site": "same-origin"}
        assert (await http.post(action, data={**form, "request": "unknown"}, headers=hidden)).status_code == 400
        same = {"origin": daemon.base, "sec-fetch-site": "same-origin"}
        approved = await http.post(action, data=form, headers=same)
        assert approved.status_code == 303 and "code=" in approved.headers["location"]


@pytest.mark.process
async def test_userinfo_and_look_alike_redirect_uris_cannot_register(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        for uri in LOOK_ALIKES:
            answer = await register(http, daemon.base, uri)
            assert answer.status_code == 400, (uri, answer.text)
            assert answer.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata"), uri
        assert (await register(http, daemon.base, REDIRECT)).status_code == 201


@pytest.mark.parametrize(
    "uri",
    [
        "http://localhost:3030/cb",
        "http://127.0.0.1/cb",
        "http://[::1]:8/cb",
        "https://claude.ai/cb",
        "https://x.claude.ai/cb",
    ],
)
def test_exact_loopback_names_and_real_domains_with_subdomains_are_allowed(uri: str) -> None:
    provider = ChartgenOAuthProvider(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        base_url="http://127.0.0.1:9315",
        redirect_hosts=["claude.ai", "localhost", "127.0.0.1", "::1"],
    )
    assert provider.redirect_allowed(uri) is None
    assert provider.redirect_allowed(uri.replace("://", "://u@")) is not None


def test_the_consent_page_names_the_bare_host() -> None:
    assert redirect_host("http://evil.example@localhost:3030/cb?next=https://evil.example") == "localhost:3030"
    assert redirect_host("https://claude.ai/api/mcp/auth_callback") == "claude.ai"
    assert redirect_host("http://[::1]:8/cb") == "[::1]:8"
