"""A guesser cannot keep the operator out of the dashboard (issue 36 §4), through Debian's nginx with
the documented location block (docs/operations.md) in front of ``chartgen --serve``
(``trusted_proxies = ["127.0.0.1"]``,
``base_url`` nginx's URL).

The security probe's attack, made continuous: guessers send wrong passphrases without pause, each
connection from another real source address (127.1.x.y: all of 127/8 is loopback on Linux; nginx
forwards each one's address in ``X-Forwarded-For``), so the per-address back-off never bites and
the global budget of checked attempts stays spent.  Meanwhile the operator, whose browser signed
in once before (its device cookie), signs in again and again: at least 95 % of those tries must be
admitted (before device cookies the probe saw 21 of 26 refused), while the guessers still get only
the global budget's handful of checked guesses.  Bounded in count and time; no fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from dashboard import DEVICE_COOKIE
from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.nginx import Nginx, free_port, running_nginx
from testkit.oauth import PASSPHRASE, REDIRECT, pkce, set_passphrase

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(300)]

OPERATOR_TRIES = 40
GUESSERS = 4
"""Guessers sending at once (each connection from a new address)."""
ADMITTED_AT_LEAST = 0.95
GLOBAL_LIMIT_PER_MINUTE = 5


@dataclass
class Stack:
    daemon: DaemonProc
    nginx: Nginx


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    await set_passphrase(tmp_path / "data")
    port = free_port()
    env = {"CHARTGEN_TRUSTED_PROXIES": "127.0.0.1", "CHARTGEN_BASE_URL": f"http://127.0.0.1:{port}"}
    daemon = await start_daemon(["--serve"], data_dir=tmp_path / "data", env=env)
    try:
        await daemon.wait_ready()
        upstream = int(daemon.base.rsplit(":", 1)[1])
        async with running_nginx(tmp_path / "nginx", upstream, port=port) as nginx:
            yield Stack(daemon, nginx)
    finally:
        await daemon.stop()


def browser(address: str, jar: aiohttp.CookieJar | None = None) -> aiohttp.ClientSession:
    """A browser on ``address`` (every connection from it), keeping cookies of IP-address hosts."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(address, 0), force_close=True),
        cookie_jar=jar if jar is not None else aiohttp.CookieJar(unsafe=True),
    )


async def post_login(http: aiohttp.ClientSession, base: str, passphrase: str) -> tuple[int, str]:
    headers = {"Origin": base, "Sec-Fetch-Site": "same-origin"}  # what a browser on the page sends
    async with http.post(
        f"{base}/ui/login", data={"passphrase": passphrase}, headers=headers, allow_redirects=False
    ) as r:
        return r.status, await r.text()


async def test_a_rotating_address_guesser_cannot_keep_the_operator_out(stack: Stack) -> None:
    base = stack.nginx.url
    jar = aiohttp.CookieJar(unsafe=True)
    async with browser("127.0.0.8", jar) as operator:  # the operator signed in once, some day before
        status, text = await post_login(operator, base, PASSPHRASE)
        assert status == 303, text
        assert any(c.key == DEVICE_COOKIE for c in jar)

    done, spent = asyncio.Event(), asyncio.Event()
    guesses: dict[int, int] = {}
    addresses = iter(f"127.1.{n // 250}.{n % 250 + 1}" for n in range(100_000))

    async def guess(worker: int) -> None:
        while not done.is_set():
            async with browser(next(addresses)) as guesser:
                status, text = await post_login(guesser, base, f"wrong guess {worker} {time.monotonic()}")
            assert status in (401, 429), (status, text[:300])
            guesses[status] = guesses.get(status, 0) + 1
            if guesses.get(429, 0) >= GUESSERS * 2:  # the global budget is spent: guesses refused for everyone
                spent.set()

    admitted = refused = 0
    started = time.monotonic()
    async with asyncio.timeout(180):
        async with asyncio.TaskGroup() as tg:
            for k in range(GUESSERS):
                tg.create_task(guess(k))
            try:
                await spent.wait()  # the operator's first try once the guessers keep the budget spent
                async with browser("127.0.0.8", jar) as operator:
                    for _ in range(OPERATOR_TRIES):
                        status, text = await post_login(operator, base, PASSPHRASE)
                        if status == 303:
                            admitted += 1
                            async with operator.get(f"{base}/ui/api/access") as r:
                                assert r.status == 200  # a real session
                        else:
                            assert status == 429, (status, text[:300])
                            refused += 1
            finally:
                done.set()
    elapsed = time.monotonic() - started
    checked = guesses.get(401, 0)
    print(json.dumps({"operator_admitted": admitted, "operator_refused": refused, "guesses": guesses,
                      "seconds": round(elapsed, 1)}))  # fmt: skip
    assert admitted >= ADMITTED_AT_LEAST * OPERATOR_TRIES, f"the operator was refused {refused} of {OPERATOR_TRIES}"
    assert guesses.get(429, 0) > checked, guesses  # the guessers were mostly refused meanwhile
    assert checked <= GLOBAL_LIMIT_PER_MINUTE * (elapsed / 60 + 1) + GUESSERS, guesses  # no more guesses checked


CONSENT_TRIES = 10
"""The operator's consents (each a new authorization: /authorize and the consent POST are limited per
address, 60 a minute)."""


async def test_a_rotating_address_guesser_cannot_keep_the_operator_from_approving_a_consent(stack: Stack) -> None:
    """The same attack on the OAuth consent page (one limiter for both pages): guessers post wrong
    passphrases on a consent of their own without pause, each from a new address; the operator, whose
    browser signed in at the dashboard once (the device cookie, Path=/), approves consent after consent."""
    base = stack.nginx.url
    jar = aiohttp.CookieJar(unsafe=True)
    async with browser("127.0.0.8", jar) as operator:
        status, text = await post_login(operator, base, PASSPHRASE)
        assert status == 303, text
    async with browser("127.0.0.9") as setup:
        guessed_action, guessed_request = await parked_consent_at(setup, base)

    done, spent = asyncio.Event(), asyncio.Event()
    guesses: dict[int, int] = {}
    addresses = iter(f"127.2.{n // 250}.{n % 250 + 1}" for n in range(100_000))

    async def guess(worker: int) -> None:
        while not done.is_set():
            async with browser(next(addresses)) as guesser:
                status, text = await post_consent_at(
                    guesser, guessed_action, guessed_request, f"wrong guess {worker} {time.monotonic()}", base
                )
            assert status in (401, 429), (status, text[:300])
            guesses[status] = guesses.get(status, 0) + 1
            if guesses.get(429, 0) >= GUESSERS * 2:
                spent.set()

    admitted = refused = 0
    started = time.monotonic()
    async with asyncio.timeout(180):
        async with asyncio.TaskGroup() as tg:
            for k in range(GUESSERS):
                tg.create_task(guess(k))
            try:
                await spent.wait()
                async with browser("127.0.0.8", jar) as operator:
                    for _ in range(CONSENT_TRIES):
                        action, request_id = await parked_consent_at(operator, base)
                        status, text = await post_consent_at(operator, action, request_id, PASSPHRASE, base)
                        if status == 303:
                            admitted += 1
                        else:
                            assert status == 429, (status, text[:300])
                            refused += 1
            finally:
                done.set()
    elapsed = time.monotonic() - started
    checked = guesses.get(401, 0)
    print(json.dumps({"consents_admitted": admitted, "consents_refused": refused, "guesses": guesses,
                      "seconds": round(elapsed, 1)}))  # fmt: skip
    assert admitted == CONSENT_TRIES, f"the operator was refused {refused} of {CONSENT_TRIES} consents"
    assert guesses.get(429, 0) > checked, guesses
    assert checked <= GLOBAL_LIMIT_PER_MINUTE * (elapsed / 60 + 1) + GUESSERS, guesses


async def parked_consent_at(http: aiohttp.ClientSession, base: str) -> tuple[str, str]:
    """Register a client and follow /authorize through the proxy: (the consent form's action, its request id)."""
    async with http.post(
        f"{base}/register",
        json={"redirect_uris": [REDIRECT], "client_name": "guessed", "token_endpoint_auth_method": "none"},
    ) as r:
        assert r.status == 201, await r.text()
        client_id = (await r.json())["client_id"]
    _, challenge = pkce()
    query = (
        f"response_type=code&client_id={client_id}&redirect_uri={REDIRECT}"
        f"&code_challenge={challenge}&code_challenge_method=S256"
    )
    async with http.get(f"{base}/authorize?{query}", allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        page_url = r.headers["location"]
    return page_url.split("?")[0], page_url.split("request=")[1]


async def post_consent_at(
    http: aiohttp.ClientSession, action: str, request_id: str, passphrase: str, base: str
) -> tuple[int, str]:
    """The consent form's approve POST as a browser on the page sends it (its cookies from the jar)."""
    form = {"request": request_id, "passphrase": passphrase, "decision": "approve", "scope": "charts"}
    headers = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
    async with http.post(action, data=form, headers=headers, allow_redirects=False) as r:
        return r.status, await r.text()
