"""Passphrase guessing on the consent page: a growing delay per client address, a global budget
across all addresses, and waits that never exceed a minute — the rule on an injected clock, then
on the real consent endpoint from several loopback source addresses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.auth.provider import AuthorizationParams
from pydantic import AnyUrl
from starlette.applications import Starlette

from daemon import ALL_MIGRATIONS
from daemon import serving as serve_app
from mcp_bridge.oauth.attempts import PassphraseAttempts, TooManyAttempts
from mcp_bridge.oauth.passphrase import hash_passphrase
from mcp_bridge.oauth.provider import ChartgenOAuthProvider
from mcp_bridge.oauth.routes import oauth_routes
from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tokens import TokenStore
from storage import Database
from testkit.daemon_proc import start_daemon
from testkit.oauth import PASSPHRASE, REDIRECT, client, pkce, register, set_passphrase

pytestmark = [pytest.mark.slow, pytest.mark.process]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(attempts: PassphraseAttempts, ip: str) -> None:
    attempts.failed(attempts.begin(ip))


def test_each_failure_doubles_the_wait_of_that_address_up_to_a_minute() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock, global_limit=1000)
    waits = []
    for _ in range(9):
        fail(attempts, "10.0.0.1")
        refused = attempts.retry_after("10.0.0.1")
        assert refused is not None and not refused.everyone
        waits.append(refused.retry_after_s)
        clock.now += refused.retry_after_s
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert attempts.retry_after("10.0.0.2") is None  # another address is not slowed by this one


def test_across_any_number_of_addresses_only_five_guesses_a_minute_are_checked() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock)
    checked = 0
    for i in range(600):  # one guess a second from a fresh address each time, for ten minutes
        try:
            fail(attempts, f"10.1.{i // 250}.{i % 250}")
            checked += 1
        except TooManyAttempts as exc:
            assert exc.everyone and 0 < exc.retry_after_s <= 60
        clock.now += 1
    assert checked == 50


def test_a_success_clears_the_address_and_gives_its_global_slot_back() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock)
    for i in range(4):
        fail(attempts, f"10.2.0.{i}")
    attempts.succeeded(attempts.begin("10.2.0.9"))
    fail(attempts, "10.2.0.8")  # the fifth checked guess is still allowed
    with pytest.raises(TooManyAttempts):
        attempts.begin("10.2.0.7")


def test_concurrent_attempts_are_counted_when_they_start() -> None:
    attempts = PassphraseAttempts(clock=Clock())
    started = [attempts.begin(f"10.3.0.{i}") for i in range(5)]  # none has finished its check yet
    with pytest.raises(TooManyAttempts):
        attempts.begin("10.3.0.99")
    assert len(started) == 5


@given(st.lists(st.tuples(st.integers(0, 20), st.floats(0, 30)), max_size=200))
def test_no_wait_anyone_is_shown_exceeds_a_minute(steps: list[tuple[int, float]]) -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock)
    for who, later in steps:
        clock.now += later
        try:
            fail(attempts, f"10.4.0.{who}")
        except TooManyAttempts as exc:
            assert 0 <= exc.retry_after_s <= 60


# --- the consent endpoint ----------------------------------------------------------------------


@dataclass
class Consent:
    url: str
    provider: ChartgenOAuthProvider
    clock: Clock

    async def request_id(self) -> str:
        info = client("guessed")
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
    app = Starlette(routes=oauth_routes(provider, passphrase_hash, attempts=PassphraseAttempts(clock=clock)))
    try:
        async with serve_app(app) as url:
            yield Consent(f"{url}/oauth/consent", provider, clock)
    finally:
        await db.close()


async def post_from(address: str, url: str, request_id: str, passphrase: str) -> tuple[int, str, dict[str, str]]:
    """The consent POST sent from loopback source ``address``: (status, body, headers)."""
    form = {"request": request_id, "passphrase": passphrase, "decision": "approve", "scope": "charts"}
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(url, data=form, allow_redirects=False) as r:
            return r.status, await r.text(), {k.lower(): v for k, v in r.headers.items()}


async def test_the_consent_endpoint_limits_guesses_per_address_and_globally_and_lets_the_operator_in(
    consent: Consent,
) -> None:
    request_id = await consent.request_id()
    status, _, _ = await post_from("127.0.0.2", consent.url, request_id, "guess 1 is wrong")
    assert status == 401
    status, body, headers = await post_from("127.0.0.2", consent.url, request_id, "guess 2 is wrong")
    assert status == 429 and "from your address" in body and headers["retry-after"] == "1"
    for n in range(3, 7):  # four more addresses: five wrong guesses checked in all
        status, _, _ = await post_from(f"127.0.0.{n}", consent.url, request_id, "wrong again")
        assert status == 401
    for n in range(7, 12):  # the sixth guess this minute is not checked, from whatever address
        status, body, headers = await post_from(f"127.0.0.{n}", consent.url, request_id, "wrong again")
        assert status == 429 and "on this server" in body
        assert 1 <= int(headers["retry-after"]) <= 60
    # the operator waits at most a minute, never a quarter of an hour
    status, _, _ = await post_from("127.0.0.12", consent.url, request_id, PASSPHRASE)
    assert status == 429
    consent.clock.now += 60
    status, _, headers = await post_from("127.0.0.12", consent.url, request_id, PASSPHRASE)
    assert status == 303 and "code=" in headers["location"]


async def test_the_daemons_consent_page_slows_a_guesser_and_bounds_every_wait(tmp_path: Path) -> None:
    await set_passphrase(tmp_path)
    daemon = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        async with httpx2.AsyncClient() as http:
            reg = (await register(http, daemon.base)).json()
            _, challenge = pkce()
            query = (
                f"response_type=code&client_id={reg['client_id']}&redirect_uri={REDIRECT}"
                f"&code_challenge={challenge}&code_challenge_method=S256"
            )
            page_url = (await http.get(f"{daemon.base}/authorize?{query}")).headers["location"]
        request_id = page_url.split("request=")[1]
        action = page_url.split("?")[0]
        answers = [await post_from(f"127.0.1.{n}", action, request_id, "not it") for n in range(1, 9)]
        assert [a[0] for a in answers] == [401] * 5 + [429] * 3
        assert all(int(a[2]["retry-after"]) <= 60 for a in answers[5:])
        again = await post_from("127.0.1.1", action, request_id, "not it either")
        assert again[0] == 429 and int(again[2]["retry-after"]) <= 60
    finally:
        await daemon.stop()
