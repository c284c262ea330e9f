"""OAuth 2.1 against a real ``chartgen --serve``: the SDK client's own flow with a scripted consent,
and every refusal the authorization server owes (reused code, wrong verifier, foreign redirect,
wrong passphrase, rotated refresh token, revoked token), persistence across a restart, and no
secret in plain text in the database or the logs.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.oauth import (
    PASSPHRASE,
    REDIRECT,
    authorized,
    consent,
    exchange,
    pkce,
    refresh,
    register,
    set_passphrase,
    tools_call,
)

pytestmark = pytest.mark.process


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path, env={"CHARTGEN_LOG_FORMAT": "json"})
    try:
        yield proc
    finally:
        await proc.stop()


def read_state(data_dir: Path, log_path: Path) -> tuple[bytes, bytes]:
    """The database files (with the WAL) and the daemon's log, as bytes."""
    return b"".join(p.read_bytes() for p in data_dir.glob("chartgen.db*")), log_path.read_bytes()


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_the_sdk_clients_own_oauth_flow_with_a_scripted_consent(daemon: DaemonProc) -> None:
    async with httpx2.AsyncClient() as http:
        refused = await tools_call(http, daemon.mcp_url, None)
        assert refused.status_code == 401
        assert (
            f'resource_metadata="{daemon.base}/.well-known/oauth-protected-resource/mcp"'
            in (refused.headers["www-authenticate"])
        )
        codes: list[AuthorizationCodeResult] = []

        async def redirect_handler(url: str) -> None:
            wrong = await consent(http, url, "not the passphrase at all")
            assert wrong.status_code == 401 and "Wrong passphrase" in wrong.text
            answer = await consent(http, url, PASSPHRASE)
            assert answer.status_code == 303, answer.text
            q = parse_qs(urlparse(answer.headers["location"]).query)
            codes.append(AuthorizationCodeResult(code=q["code"][0], state=q["state"][0]))

        async def callback_handler() -> AuthorizationCodeResult:
            return codes.pop()

        storage = MemoryStorage()
        auth = OAuthClientProvider(
            server_url=daemon.mcp_url,
            client_metadata=OAuthClientMetadata(
                redirect_uris=[REDIRECT],  # type: ignore[list-item]
                client_name="sdk-client",
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
            ),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        async with create_mcp_http_client(auth=auth) as http_auth:
            async with Client(streamable_http_client(daemon.mcp_url, http_client=http_auth)) as client:
                result = await client.call_tool("list_indicators", {})
                assert not result.is_error
    assert storage.tokens is not None and storage.tokens.access_token.startswith("cg_oat_")
    assert storage.tokens.refresh_token is not None


async def test_every_refusal_the_authorization_server_owes(daemon: DaemonProc) -> None:
    base = daemon.base
    async with httpx2.AsyncClient() as http:
        # a redirect URI outside the policy cannot even register
        foreign = await register(http, base, "https://evil.example.net/callback")
        assert foreign.status_code == 400 and foreign.json()["error"] == "invalid_redirect_uri"

        # a wrong PKCE verifier is refused; the right one works once; the code never works twice
        g = await authorized(http, base)
        bad = await exchange(http, base, g, verifier=secrets.token_urlsafe(48))
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"
        ok = await exchange(http, base, g)
        assert ok.status_code == 200, ok.text
        first = ok.json()
        assert (await tools_call(http, daemon.mcp_url, first["access_token"])).status_code == 200
        reused = await exchange(http, base, g)
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
        # … and presenting it again revoked what it had issued
        assert (await tools_call(http, daemon.mcp_url, first["access_token"])).status_code == 401

        # refresh rotation: the new pair works, the old refresh token is dead
        g2 = await authorized(http, base)
        tokens = (await exchange(http, base, g2)).json()
        rotated = await refresh(http, base, g2, tokens["refresh_token"])
        assert rotated.status_code == 200, rotated.text
        new = rotated.json()
        assert new["refresh_token"] != tokens["refresh_token"]
        assert (await tools_call(http, daemon.mcp_url, new["access_token"])).status_code == 200
        again = await refresh(http, base, g2, tokens["refresh_token"])
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"

        # revocation takes effect on the next request
        g3 = await authorized(http, base)
        t3 = (await exchange(http, base, g3)).json()
        assert (await tools_call(http, daemon.mcp_url, t3["access_token"])).status_code == 200
        revoke = await http.post(
            f"{base}/revoke",
            data={"token": t3["access_token"], "client_id": g3.client_id, "client_secret": g3.client_secret},
        )
        assert revoke.status_code == 200, revoke.text
        assert (await tools_call(http, daemon.mcp_url, t3["access_token"])).status_code == 401

        # a wrong client secret is refused at the token endpoint
        g4 = await authorized(http, base)
        g4.client_secret = "0" * 64
        assert (await exchange(http, base, g4)).status_code == 401

        # the operator denies: the client is told access_denied, and the request cannot be approved afterwards
        reg = (await register(http, base)).json()
        _, challenge = pkce()
        query = f"response_type=code&client_id={reg['client_id']}&redirect_uri={REDIRECT}&code_challenge={challenge}"
        page_url = (await http.get(f"{base}/authorize?{query}&code_challenge_method=S256&state=d")).headers["location"]
        request_id = re.search(r'name="request" value="([^"]+)"', (await http.get(page_url)).text)
        assert request_id is not None
        form = {"request": request_id.group(1), "passphrase": PASSPHRASE}
        denied = await http.post(page_url.split("?")[0], data={**form, "decision": "deny"})
        assert denied.status_code == 303 and "error=access_denied" in denied.headers["location"]
        late = await http.post(page_url.split("?")[0], data={**form, "decision": "approve"})
        assert late.status_code == 400 and "code=" not in late.headers.get("location", "")

        # a resource that is not this server is refused at /authorize
        reg = (await register(http, base)).json()
        _, challenge = pkce()
        wrong_resource = await http.get(
            f"{base}/authorize",
            params={
                "response_type": "code",
                "client_id": reg["client_id"],
                "redirect_uri": REDIRECT,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": "https://elsewhere.example.com/mcp",
            },
        )
        assert wrong_resource.status_code == 302 and "invalid_target" in wrong_resource.headers["location"]


async def test_tokens_survive_a_restart_and_nothing_secret_is_stored_or_logged(tmp_path: Path) -> None:
    log_path = tmp_path / "daemon.log"
    await set_passphrase(tmp_path)
    import os

    os.environ["CG_TEST_DAEMON_LOG"] = str(log_path)
    secrets_seen: list[str] = [PASSPHRASE]
    try:
        first = await start_daemon(["--serve"], data_dir=tmp_path)
        try:
            async with httpx2.AsyncClient() as http:
                g = await authorized(http, first.base)
                tokens: dict[str, Any] = (await exchange(http, first.base, g)).json()
                secrets_seen += [g.client_secret, g.code, g.verifier, tokens["access_token"], tokens["refresh_token"]]
        finally:
            await first.stop()
        second = await start_daemon(["--serve"], data_dir=tmp_path)
        try:
            async with httpx2.AsyncClient() as http:
                assert (await tools_call(http, second.mcp_url, tokens["access_token"])).status_code == 200
                rotated = await refresh(http, second.base, g, tokens["refresh_token"])
                assert rotated.status_code == 200
                secrets_seen += [rotated.json()["access_token"], rotated.json()["refresh_token"]]
        finally:
            await second.stop()
    finally:
        os.environ.pop("CG_TEST_DAEMON_LOG", None)
    stored, logged = read_state(tmp_path, log_path)
    assert logged, "the daemon wrote no log at all"
    for secret in secrets_seen:
        assert secret.encode() not in stored, "a secret is stored in plain text"
        assert secret.encode() not in logged, "a secret appears in the log"
