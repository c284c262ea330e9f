"""Abuse through the documented nginx (docs/operations.md; issue 12 §2, §4): Debian's nginx on loopback in front of
a real ``chartgen --serve --trade --sim`` with ``trusted_proxies = ["127.0.0.1"]``.

Clients bind their sockets to different loopback addresses (127.0.0.2, .3, …: all of 127/8 is
loopback on Linux), so nginx sees them as different clients and forwards each one's address
in ``X-Forwarded-For``; whatever a client puts in that header itself is replaced by nginx.

- ``/metrics`` through the proxy needs a token (nginx connects from loopback too);
- a spoofed ``X-Forwarded-For`` changes nothing: the failed-bearer limit bites the real client;
- one client sending bad bearers does not lock out another with a valid token, nor one whose
  first attempt was a typo;
- the OAuth passphrase cannot be brute-forced through rotating spoofed addresses: only a
  handful of guesses a minute are checked at all, and the operator's right passphrase is
  accepted within a bounded time after the guesser;
- an unauthenticated 15 MiB body is refused (413) without the daemon's memory growing;
- an operator who kept the documentation's previous nginx block (no ``X-Forwarded-For`` line: nginx
  passes the client's own header through) and set no ``trusted_proxies``: the spoofed header
  is ignored, so the limits still bite, and ``/metrics`` still needs a token.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import pytest_asyncio

from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.nginx import DOCUMENTED_LOCATION, Nginx, free_port, running_nginx
from testkit.oauth import PASSPHRASE, REDIRECT, pkce, set_passphrase, ticked

pytestmark = [
    pytest.mark.slow,
    pytest.mark.process,
    pytest.mark.timeout(300),
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.xdist_group("proxy_abuse"),  # module-scoped daemon and nginx: the file on one xdist worker
]

ROOT = Path(__file__).resolve().parents[2]
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_indicators", "arguments": {}}}
MiB = 1024 * 1024


class Stack:
    def __init__(self, daemon: DaemonProc, nginx: Nginx) -> None:
        self.daemon, self.nginx = daemon, nginx
        assert daemon.token is not None
        self.token = daemon.token

    @property
    def mcp(self) -> str:
        return f"{self.nginx.url}/mcp"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    data = tmp_path_factory.mktemp("proxied")
    await set_passphrase(data)
    port = free_port()
    env = {
        "CHARTGEN_TRUSTED_PROXIES": "127.0.0.1",
        "CHARTGEN_BASE_URL": f"http://127.0.0.1:{port}",  # the public URL: nginx's
    }
    daemon = await start_daemon(["--serve", "--trade", "--sim"], data_dir=data, env=env)
    try:
        await daemon.wait_ready()
        upstream = int(daemon.base.rsplit(":", 1)[1])
        async with running_nginx(tmp_path_factory.mktemp("nginx"), upstream, port=port) as nginx:
            yield Stack(daemon, nginx)
    finally:
        await daemon.stop()


# the documented location block before issue 12: the client's own X-Forwarded-For passes through
PREVIOUS_DOCUMENTED_LOCATION = """\
    location / {
        proxy_pass http://127.0.0.1:9315;
        proxy_http_version 1.1;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-Proto https;
        proxy_buffering off;
        proxy_cache off;
        proxy_read_timeout 1h;
        chunked_transfer_encoding on;
    }
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def previous_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The daemon with default settings behind the previous documented block."""
    daemon = await start_daemon(["--serve", "--trade", "--sim"], data_dir=tmp_path_factory.mktemp("previous"))
    try:
        await daemon.wait_ready()
        upstream = int(daemon.base.rsplit(":", 1)[1])
        prefix = tmp_path_factory.mktemp("nginx-previous")
        async with running_nginx(prefix, upstream, location=PREVIOUS_DOCUMENTED_LOCATION) as nginx:
            yield Stack(daemon, nginx)
    finally:
        await daemon.stop()


def client_from(address: str) -> aiohttp.ClientSession:
    """An HTTP client whose connections come from ``address`` (a 127.x loopback address)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0), force_close=True))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def call(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    async with http.post(url, json=CALL, headers=headers) as r:
        await r.read()
        return r.status


async def test_the_docs_carry_the_tested_nginx_location() -> None:
    """The proxy these tests run is the documented one (docs/operations.md): its ``location /`` block, line for line."""
    readme = await asyncio.to_thread((ROOT / "docs" / "operations.md").read_text)
    snippets = re.findall(r"```nginx\n(.*?)```", readme, flags=re.S)
    assert snippets, "docs/operations.md has no ```nginx snippet"

    def lines(text: str) -> list[str]:
        return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]

    wanted = lines(DOCUMENTED_LOCATION)
    assert any("\n".join(wanted) in "\n".join(lines(s)) for s in snippets), (
        "docs/operations.md's nginx snippet differs from testkit/nginx.py's DOCUMENTED_LOCATION:\n"
        + DOCUMENTED_LOCATION
    )


async def test_metrics_through_the_proxy_need_a_token(stack: Stack) -> None:
    async with client_from("127.0.0.2") as http:
        async with http.get(f"{stack.nginx.url}/metrics") as r:
            assert r.status == 401
        async with http.get(f"{stack.nginx.url}/metrics", headers={"X-Forwarded-For": "127.0.0.1"}) as r:
            assert r.status == 401  # a client claiming loopback is still a proxied client
        async with http.get(f"{stack.nginx.url}/metrics", headers=bearer(stack.token)) as r:
            assert r.status == 200 and "chartgen_" in await r.text()
    async with aiohttp.ClientSession() as direct:  # a scraper on the host itself, not through the proxy
        async with direct.get(f"{stack.daemon.base}/metrics") as r:
            assert r.status == 200


async def test_a_spoofed_forwarded_for_changes_nothing(stack: Stack) -> None:
    codes = []
    async with client_from("127.0.0.4") as http:
        for i in range(31):
            spoof = {"X-Forwarded-For": f"198.51.100.{i}", "X-Real-IP": f"198.51.100.{i}", "Forwarded": f"for=x{i}"}
            codes.append(await call(http, stack.mcp, {**spoof, **bearer(f"guess-{i}")}))
        assert codes[:30] == [401] * 30, codes
        assert codes[30] == 429, "the limit must bite the real client whatever X-Forwarded-For says"
    async with client_from("127.0.0.5") as http:
        assert await call(http, stack.mcp, {"X-Forwarded-For": "127.0.0.4", **bearer(stack.token)}) == 200


async def test_one_abusive_client_does_not_lock_out_another(stack: Stack) -> None:
    async with client_from("127.0.0.2") as abuser:
        codes = [await call(abuser, stack.mcp, bearer(f"bad-{i}")) for i in range(40)]
    assert codes[:30] == [401] * 30 and set(codes[30:]) == {429}, codes
    async with client_from("127.0.0.3") as good:
        assert await call(good, stack.mcp, bearer(stack.token)) == 200
    async with client_from("127.0.0.6") as typo:  # a bad-then-good sequence
        assert await call(typo, stack.mcp, bearer("typo")) == 401
        assert await call(typo, stack.mcp, bearer(stack.token)) == 200
    async with client_from("127.0.0.1") as local:  # a loopback client through the proxy
        assert await call(local, stack.mcp, bearer(stack.token)) == 200
    async with aiohttp.ClientSession() as direct:  # and one connecting to the daemon directly
        assert await call(direct, f"{stack.daemon.base}/mcp", bearer(stack.token)) == 200


async def test_a_tokens_ninth_stream_through_the_proxy_closes_its_oldest(stack: Stack) -> None:
    """``max_streams_per_principal`` (8): the oldest stream ends with its ``: closed`` note, through nginx."""
    async with client_from("127.0.0.9") as http:
        streams = []
        try:
            for _ in range(9):
                resp = await http.get(stack.mcp, headers=bearer(stack.token))
                streams.append(resp)
                assert resp.status == 200
                async with asyncio.timeout(10):
                    assert (await resp.content.readline()).startswith(b": connected")
            async with asyncio.timeout(10):
                rest = await streams[0].content.read()
            assert b"max_streams_per_principal" in rest
        finally:
            for resp in streams:
                resp.close()


def vm_hwm_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, flags=re.M)
    assert match is not None
    return int(match.group(1))


async def test_an_unauthenticated_15_mib_body_is_refused_and_memory_stays_bounded(stack: Stack) -> None:
    pad = 15 * MiB
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"p":"' + b"x" * pad + b'"}}}'

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 256 * 1024):
            yield body[i : i + 256 * 1024]

    pid = stack.daemon.proc.pid
    before = vm_hwm_kib(pid)
    async with aiohttp.ClientSession() as http:
        for url in (f"{stack.daemon.base}/mcp", stack.mcp):
            for data in (chunks(), chunks()):  # chunked: no Content-Length to refuse it by
                async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 413, (url, r.status)
                    answer = await r.json(content_type=None)
                    assert "max_unauthenticated_body_bytes" in answer["error"]["message"]
        async with http.post(f"{stack.daemon.base}/mcp", data=chunks(), headers=bearer("wrong")) as r:
            assert r.status == 401
        # a normal-size tools/list without a bearer (chartgen's clients) is still served
        async with http.post(stack.mcp, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}) as r:
            assert r.status == 200 and (await r.json())["result"]["tools"]
    grown_mib = (vm_hwm_kib(pid) - before) / 1024
    assert grown_mib < 100, f"the daemon's peak RSS grew by {grown_mib:.0f} MiB for refused bodies"


# --- the OAuth passphrase ---------------------------------------------------------------------

CHECKED = "Wrong passphrase"


async def consent_request(http: aiohttp.ClientSession, base: str) -> tuple[str, dict[str, Any]]:
    """Register a client and start an authorization through the proxy: (consent URL, the form to approve)."""
    async with http.post(
        f"{base}/register",
        json={
            "redirect_uris": [REDIRECT],
            "client_name": "proxied",
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "client_secret_post",
        },
    ) as r:
        assert r.status == 201, await r.text()
        client = await r.json()
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "s",
        "resource": f"{base}/mcp",
    }
    async with http.get(f"{base}/authorize?" + urlencode(query), allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        page_url = r.headers["location"]
    assert page_url.startswith(base), page_url
    async with http.get(page_url) as r:
        page = await r.text()
        assert r.status == 200, page
    found = re.search(r'name="request" value="([^"]+)"', page)
    assert found is not None
    form = [("request", found.group(1)), ("decision", "approve"), *(("scope", s) for s in ticked(page))]
    return page_url.split("?")[0], {"fields": form}


async def post_passphrase(
    http: aiohttp.ClientSession, url: str, form: dict[str, Any], passphrase: str, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    data = [*form["fields"], ("passphrase", passphrase)]
    origin = url.split("/oauth/")[0]  # the browser's Origin: the consent page's own
    async with http.post(url, data=data, headers={"Origin": origin, **(headers or {})}, allow_redirects=False) as r:
        return r.status, await r.text()


async def test_the_passphrase_cannot_be_brute_forced_or_locked_through_the_proxy(stack: Stack) -> None:
    """200 guesses: 100 from one client rotating spoofed X-Forwarded-For / X-Real-IP, 100 from five
    more real addresses; a handful at most are checked, and the operator then gets in."""
    base = stack.nginx.url
    checked = refused = 0

    async def guesses(http: aiohttp.ClientSession, url: str, form: dict[str, Any], first: int, spoof: bool) -> None:
        nonlocal checked, refused
        for i in range(first, first + 20):
            headers = {"X-Forwarded-For": f"203.0.113.{i}", "X-Real-IP": f"203.0.113.{i}"} if spoof else {}
            status, text = await post_passphrase(http, url, form, f"guess number {i}", headers)
            if status == 401 and CHECKED in text:
                checked += 1
            else:
                assert status == 429, (status, text[:300])
                refused += 1

    sessions = [client_from(f"127.0.0.{n}") for n in (7, 9, 10, 11, 12, 13)]
    try:
        forms = [await consent_request(http, base) for http in sessions]
        async with asyncio.TaskGroup() as tg:
            for k in range(5):  # one client, five in parallel, each guess from a new spoofed address
                tg.create_task(guesses(sessions[0], *forms[0], first=20 * k, spoof=True))
            for http, form in zip(sessions[1:], forms[1:], strict=True):  # five real addresses
                tg.create_task(guesses(http, *form, first=100, spoof=False))
    finally:
        for http in sessions:
            await http.close()
    assert checked + refused == 200
    assert checked <= 6, f"{checked} of 200 guesses were checked (rotating X-Forwarded-For, five addresses)"

    # the operator, from another address, gets in within a bounded time after the guessers
    async with client_from("127.0.0.8") as operator:
        url, form = await consent_request(operator, base)
        started = time.monotonic()
        async with asyncio.timeout(90):
            while True:
                status, text = await post_passphrase(operator, url, form, PASSPHRASE)
                if status == 303:
                    break
                assert status == 429, (status, text[:300])
                shown = re.search(r"(?:wait|retry in) (\d+) s", text)
                # honour the wait the server shows (polling, bounded by the timeout)
                await asyncio.sleep(min(10.0, max(0.5, float(shown.group(1)) if shown else 1.0)))
    waited = time.monotonic() - started
    print(json.dumps({"guesses_checked": checked, "guesses_refused": refused, "operator_waited_s": round(waited, 1)}))


async def test_behind_the_previous_documented_block_a_spoofed_forwarded_for_is_ignored(previous_stack: Stack) -> None:
    stack = previous_stack
    async with client_from("127.0.0.3") as good:  # a client already at work before the abuse
        assert await call(good, stack.mcp, bearer(stack.token)) == 200
    async with client_from("127.0.0.2") as http:
        async with http.get(f"{stack.nginx.url}/metrics", headers={"X-Forwarded-For": "127.0.0.1"}) as r:
            assert r.status == 401  # nginx connects from loopback, but says X-Forwarded-Proto
        codes = []
        for i in range(31):
            headers = {"X-Forwarded-For": f"198.51.100.{i}", **bearer(f"guess-{i}")}
            codes.append(await call(http, stack.mcp, headers))
    assert codes[:30] == [401] * 30 and codes[30] == 429, codes
    # every client is 127.0.0.1 to the daemon here; a token already seen valid still gets in
    async with client_from("127.0.0.3") as good:
        assert await call(good, stack.mcp, bearer(stack.token)) == 200
