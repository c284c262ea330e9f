"""OAuth test helpers shared by the protocol-level and the browser tests."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx2
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyUrl

from testkit.daemon_proc import clean_env

PASSPHRASE = "correct horse battery staple"
REDIRECT = "http://localhost:3030/callback"


async def set_passphrase(data_dir: Path, passphrase: str = PASSPHRASE) -> None:
    """``chartgen passphrase set`` with the passphrase on stdin."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "passphrase",
        "--data-dir",
        str(data_dir),
        "set",
        env=clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate((passphrase + "\n").encode())
    assert proc.returncode == 0, err.decode()


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def client(name: str, redirect: str = REDIRECT) -> OAuthClientInformationFull:
    """A registration as the SDK's /register handler builds it (fresh id and secret)."""
    return OAuthClientInformationFull(
        client_id=secrets.token_hex(16),
        client_secret=secrets.token_hex(32),
        client_name=name,
        redirect_uris=[AnyUrl(redirect)],
        grant_types=["authorization_code", "refresh_token"],
    )


def ticked(page: str) -> list[str]:
    """The scope checkboxes the consent page shows ticked."""
    return re.findall(r'name="scope" value="([^"]+)"[^>]* checked', page)


async def post_consent(http: httpx2.AsyncClient, url: str, data: dict[str, Any]) -> httpx2.Response:
    """POST the consent form as a browser would, retrying while the address must still wait after a
    wrong passphrase (about a second: the per-address delay), bounded by a deadline."""
    async with asyncio.timeout(10):
        while True:
            answer = await http.post(url, data=data, headers={"origin": url.split("/oauth/")[0]})
            if answer.status_code != 429 or "from your address" not in answer.text:
                return answer
            await asyncio.sleep(0.1)  # polling the per-address back-off, bounded by the timeout


async def consent(
    http: httpx2.AsyncClient, authorize_url: str, passphrase: str, scopes: list[str] | None = None
) -> httpx2.Response:
    """Follow /authorize to the consent page and answer it (with the boxes it ticks, unless ``scopes``)."""
    first = await http.get(authorize_url)
    assert first.status_code == 302, first.text
    return await answer_consent_page(http, first.headers["location"], passphrase, scopes)


async def answer_consent_page(
    http: httpx2.AsyncClient, page_url: str, passphrase: str, scopes: list[str] | None = None
) -> httpx2.Response:
    """Open the consent page at ``page_url`` and approve it (with the boxes it ticks, unless ``scopes``)."""
    page = await http.get(page_url)
    assert page.status_code == 200 and "Operator passphrase" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    request_id = re.search(r'name="request" value="([^"]+)"', page.text)
    assert request_id is not None
    form = {
        "request": request_id.group(1),
        "passphrase": passphrase,
        "decision": "approve",
        "scope": ticked(page.text) if scopes is None else scopes,
    }
    return await post_consent(http, page_url.split("?")[0], form)


@dataclass
class Grant:
    client_id: str
    client_secret: str
    code: str
    verifier: str


async def register(http: httpx2.AsyncClient, base: str, redirect: str = REDIRECT) -> httpx2.Response:
    return await http.post(
        f"{base}/register",
        json={
            "redirect_uris": [redirect],
            "client_name": "scripted",
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "client_secret_post",
        },
    )


async def authorized(
    http: httpx2.AsyncClient, base: str, *, scope: str | None = None, tick: list[str] | None = None
) -> Grant:
    """Register, authorize (asking for ``scope``), approve on the consent page (ticking ``tick``), get a code."""
    reg = await register(http, base)
    assert reg.status_code == 201, reg.text
    client = reg.json()
    verifier, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st8",
        "resource": f"{base}/mcp",
        **({"scope": scope} if scope is not None else {}),
    }
    answer = await consent(http, f"{base}/authorize?" + urlencode(query), PASSPHRASE, tick)
    assert answer.status_code == 303, answer.text
    params = parse_qs(urlparse(answer.headers["location"]).query)
    assert params["state"] == ["st8"]
    return Grant(client["client_id"], client["client_secret"], params["code"][0], verifier)


async def exchange(http: httpx2.AsyncClient, base: str, g: Grant, verifier: str | None = None) -> httpx2.Response:
    return await http.post(
        f"{base}/token",
        data={
            "grant_type": "authorization_code",
            "code": g.code,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier or g.verifier,
            "client_id": g.client_id,
            "client_secret": g.client_secret,
        },
    )


async def refresh(http: httpx2.AsyncClient, base: str, g: Grant, token: str) -> httpx2.Response:
    return await http.post(
        f"{base}/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": token,
            "client_id": g.client_id,
            "client_secret": g.client_secret,
        },
    )


async def tools_call(
    http: httpx2.AsyncClient, url: str, token: str | None, name: str = "list_indicators", **arguments: Any
) -> httpx2.Response:
    """A bare session-less ``tools/call`` (as chartgen's clients send it)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return await http.post(url, json=body, headers=headers)


async def tools_list(http: httpx2.AsyncClient, url: str, token: str | None) -> list[str]:
    """The tool names a bare ``tools/list`` answers (with ``token`` as bearer, if any)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["result"]["tools"]]
