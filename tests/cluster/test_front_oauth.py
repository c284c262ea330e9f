"""OAuth 2.1 at the cluster's fronts (``chartgen --serve --cluster`` subprocesses on a real PostgreSQL):
the single node's protocol tests (tests/mcp_bridge/test_oauth_flow.py: the SDK client's own flow,
every refusal the authorization server owes) run against a front with the passphrase set by
``chartgen passphrase set --cluster``; and one grant travels across two fronts — registered and
authorized at one, approved at the other, exchanged at the other, used and refreshed at the first —
while single use and theft detection still hold across them: a rotated refresh token presented at
the other front revokes the grant, and both fronts refuse its access token on the next request; and
``chartgen oauth list | revoke --cluster`` lists a client and cuts it off at every front."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx2
import pytest

from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc, clean_env, start_daemon
from testkit.oauth import (
    PASSPHRASE,
    REDIRECT,
    Grant,
    answer_consent_page,
    exchange,
    pkce,
    refresh,
    register,
    tools_call,
)
from tests.daemon.test_cli_state_options import chartgen
from tests.mcp_bridge.test_oauth_flow import (  # noqa: F401 - collected here against a cluster front
    test_every_refusal_the_authorization_server_owes,
    test_the_sdk_clients_own_oauth_flow_with_a_scripted_consent,
)

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.timeout(180)]


async def set_cluster_passphrase(dsn: str) -> None:
    """``chartgen passphrase set --cluster`` with the passphrase on stdin."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "passphrase",
        "--cluster",
        "set",
        env=clean_env({"CHARTGEN_POSTGRES_DSN": dsn}),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate((PASSPHRASE + "\n").encode())
    assert proc.returncode == 0, err.decode()


async def start_front(dsn: str, sim: Any) -> DaemonProc:
    env = {"CHARTGEN_POSTGRES_DSN": dsn, "CHARTGEN_BINANCE_REST_URL": sim.url, "CHARTGEN_LOG_FORMAT": "json"}
    front = await start_daemon(["--serve", "--cluster"], data_dir=None, env=env)
    await front.wait_ready()
    return front


@pytest.fixture
async def fronts(cluster: tuple[str, PostgresDatabase], sim: Any) -> AsyncIterator[list[DaemonProc]]:
    dsn, _ = cluster
    await set_cluster_passphrase(dsn)
    started: list[DaemonProc] = []
    try:
        for _ in range(2):
            started.append(await start_front(dsn, sim))
        yield started
    finally:
        for front in started:
            await front.stop()


@pytest.fixture
def daemon(fronts: list[DaemonProc]) -> DaemonProc:
    return fronts[0]


async def test_one_grant_across_two_fronts(fronts: list[DaemonProc], cluster: tuple[str, PostgresDatabase]) -> None:
    a, b = fronts
    db = cluster[1]
    async with httpx2.AsyncClient() as http:
        reg = await register(http, a.base)
        assert reg.status_code == 201, reg.text
        client = reg.json()
        verifier, challenge = pkce()
        query = {
            "response_type": "code",
            "client_id": client["client_id"],
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "x",
            "resource": f"{a.base}/mcp",
        }
        first = await http.get(f"{a.base}/authorize?" + urlencode(query))
        assert first.status_code == 302, first.text
        # the consent page the first front sent the browser to, answered at the other front
        page_url = first.headers["location"].replace(a.base, b.base)
        assert page_url.startswith(b.base)
        approved = await answer_consent_page(http, page_url, PASSPHRASE, ["charts"])
        assert approved.status_code == 303, approved.text
        code = parse_qs(urlparse(approved.headers["location"]).query)["code"][0]
        grant = Grant(client["client_id"], client["client_secret"], code, verifier)

        issued = await exchange(http, b.base, grant)
        assert issued.status_code == 200, issued.text
        tokens = issued.json()
        assert tokens["scope"] == "charts"
        assert (await exchange(http, a.base, grant)).status_code == 400  # a code works once, at any front
        # presenting it again revoked what it had issued, at every front
        for front in (a, b):
            assert (await tools_call(http, front.mcp_url, tokens["access_token"])).status_code == 401

        grant2 = await _authorized_at(http, a, b)
        tokens = (await exchange(http, a.base, grant2)).json()
        for front in (a, b):
            assert (await tools_call(http, front.mcp_url, tokens["access_token"])).status_code == 200
        rotated = await refresh(http, a.base, grant2, tokens["refresh_token"])
        assert rotated.status_code == 200, rotated.text
        fresh = rotated.json()
        assert (await tools_call(http, b.mcp_url, fresh["access_token"])).status_code == 200
        replay = await refresh(http, b.base, grant2, tokens["refresh_token"])  # the old one, at the other front
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        for front in (a, b):  # theft detection revoked the whole grant
            assert (await tools_call(http, front.mcp_url, fresh["access_token"])).status_code == 401
        assert (await refresh(http, a.base, grant2, fresh["refresh_token"])).status_code == 400

        # the operator cuts a client off from the command line (fronts serve no dashboard)
        grant3 = await _authorized_at(http, b, a)
        third = (await exchange(http, b.base, grant3)).json()
        dsn = cluster[0]
        code, out, err = await chartgen("oauth", "list", "--cluster", "--postgres-dsn", dsn)
        assert code == 0 and grant3.client_id in out, err
        code, out, err = await chartgen("oauth", "revoke", grant3.client_id, "--cluster", "--postgres-dsn", dsn)
        assert code == 0 and f"revoked every token of {grant3.client_id}" in out, err
        for front in (a, b):
            assert (await tools_call(http, front.mcp_url, third["access_token"])).status_code == 401
        assert (await refresh(http, a.base, grant3, third["refresh_token"])).status_code == 400

    stored = " ".join(str(r) for r in await db.fetch("SELECT * FROM oauth_refresh_tokens"))
    stored += " ".join(str(r) for r in await db.fetch("SELECT * FROM access_tokens"))
    assert tokens["refresh_token"] not in stored and fresh["access_token"] not in stored  # hashes only


async def _authorized_at(http: httpx2.AsyncClient, a: DaemonProc, b: DaemonProc) -> Grant:
    """Registered at ``b``, authorized and approved at ``a``."""
    reg = (await register(http, b.base)).json()
    verifier, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": reg["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    page_url = (await http.get(f"{a.base}/authorize?" + urlencode(query))).headers["location"]
    approved = await answer_consent_page(http, page_url, PASSPHRASE, ["charts"])
    assert approved.status_code == 303, approved.text
    code = parse_qs(urlparse(approved.headers["location"]).query)["code"][0]
    return Grant(reg["client_id"], reg["client_secret"], code, verifier)
