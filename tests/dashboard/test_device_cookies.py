"""A sign-in a guesser cannot block (issue 36 §4), the rules on an injected clock: device cookies
(OWASP's device-cookie pattern) and the limiter's per-device counts; the sign-in generation that
``chartgen passphrase set`` bumps; one-time sign-in links (single use, expiry) — on the single
node's SQLite (the cluster's PostgreSQL: tests/cluster/test_pg_sessions.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dashboard.device_cookies import device_of, issue_device_cookie
from dashboard.sessions import MIGRATIONS, SessionStore, SignInState, end_every_sign_in
from mcp_bridge import PassphraseAttempts, TooManyAttempts
from storage import Database


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


STATE = SignInState(device_key="ab" * 32, generation=3)


# --- device cookies ------------------------------------------------------------------------------


def test_a_device_cookie_names_its_device_under_its_key_and_generation_only() -> None:
    cookie = issue_device_cookie(STATE)
    device = device_of(cookie, STATE)
    assert device is not None and device in cookie and cookie.startswith("v1.operator.")
    assert device_of(issue_device_cookie(STATE), STATE) != device  # each sign-in a new nonce
    assert device_of(cookie, STATE.model_copy(update={"generation": 4})) is None  # the passphrase changed
    assert device_of(cookie, STATE.model_copy(update={"device_key": "cd" * 32})) is None  # another key
    assert device_of(issue_device_cookie(STATE, "someone"), STATE) is None  # issued for another login
    v, login, nonce, mac = cookie.split(".")
    for forged in (
        f"{v}.{login}.{nonce}x.{mac}",
        f"{v}.{login}.{nonce}.{mac[:-1]}",
        f"v2.{login}.{nonce}.{mac}",
        f"{v}.{login}..{mac}",
        cookie + ".x",
        "",
        None,
        "x" * 300,
    ):
        assert device_of(forged, STATE) is None, forged


# --- the limiter's per-device counts ----------------------------------------------------------------


def fail(attempts: PassphraseAttempts, ip: str, device: str | None = None) -> None:
    attempts.failed(attempts.begin(ip, device))


def test_a_trusted_device_gets_in_however_many_addresses_guess() -> None:
    """The probe's attack: one wrong guess every 3 s from rotating addresses keeps the global budget
    spent; an attempt with a trusted device is never refused by it (before: the operator was refused
    21 of 26 times)."""
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock)
    refused_unknown = admitted_device = 0
    for i in range(200):
        try:
            fail(attempts, f"203.0.113.{i % 250}")
        except TooManyAttempts as exc:
            assert exc.everyone
            refused_unknown += 1
        if i % 5 == 0:
            attempts.succeeded(attempts.begin("198.51.100.7", "operator-device"))  # never raises
            admitted_device += 1
        clock.now += 3
    assert admitted_device == 40  # every one of the operator's tries checked
    assert refused_unknown == 150  # the guesser: still five checked a minute, over ten minutes


def test_a_device_past_its_limit_is_untrusted_for_a_window_then_trusted_again() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock, device_limit=3, device_window_s=600, global_limit=1000)
    for _ in range(3):
        fail(attempts, "10.0.0.1", "stolen")
        clock.now += 1
    assert not attempts.trusted("stolen") and attempts.trusted("other-device")
    fail(attempts, "10.0.0.2", "stolen")  # untrusted: counted as an unknown client's (the address back-off)
    with pytest.raises(TooManyAttempts) as refused:
        attempts.begin("10.0.0.2", "stolen")
    assert not refused.value.everyone
    clock.now += 600
    assert attempts.trusted("stolen")
    attempts.succeeded(attempts.begin("10.0.0.2", "stolen"))  # trusted again, and cleared by the success
    for _ in range(2):
        fail(attempts, "10.0.0.1", "stolen")
    assert attempts.trusted("stolen")


def test_failures_inside_the_window_count_and_older_ones_age_out() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock, device_limit=3, device_window_s=100)
    for _ in range(5):  # one failure every 60 s: never three inside 100 s
        fail(attempts, "10.0.0.1", "typo-prone")
        clock.now += 60
        assert attempts.trusted("typo-prone")


def test_device_attempts_are_counted_when_they_start_and_spend_no_global_slot() -> None:
    clock = Clock()
    attempts = PassphraseAttempts(clock=clock, device_limit=3)
    started = [attempts.begin("10.0.0.1", "burst") for _ in range(3)]  # concurrent posts, none checked yet
    assert not attempts.trusted("burst")
    for i in range(5):  # the device's attempts took no slot of the global budget
        fail(attempts, f"10.9.0.{i}")
    assert len(started) == 3


# --- generation, sessions and links on SQLite ---------------------------------------------------------


@pytest.fixture
async def store() -> AsyncIterator[tuple[SessionStore, Clock]]:
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    clock = Clock()
    try:
        yield SessionStore(db, clock=clock), clock
    finally:
        await db.close()


async def change_passphrase(store: SessionStore) -> None:
    async with store.db.transaction() as tx:
        await end_every_sign_in(tx, store._clock())


async def test_the_sign_in_state_is_made_once_and_a_passphrase_change_ends_every_sign_in(
    store: tuple[SessionStore, Clock],
) -> None:
    sessions, _ = store
    state = await sessions.sign_in_state()
    assert state == await sessions.sign_in_state() and len(bytes.fromhex(state.device_key)) == 32
    cookie = issue_device_cookie(state)
    secret, session = await sessions.create("127.0.0.1", "browser")
    assert session.generation == state.generation and await sessions.verify(secret) is not None
    link = await sessions.create_link()
    await change_passphrase(sessions)
    after = await sessions.sign_in_state()
    assert after.generation == state.generation + 1 and after.device_key == state.device_key
    assert await sessions.verify(secret) is None and not await sessions.still_valid(session.id)
    assert await sessions.active() == []
    assert device_of(cookie, after) is None
    assert await sessions.redeem_link(link, "127.0.0.1", "browser") is None


async def test_a_sign_in_checked_against_the_old_passphrase_is_dead_after_a_change(
    store: tuple[SessionStore, Clock],
) -> None:
    """The login reads the generation before it checks the passphrase; a change in between leaves its
    new session (of the old generation) refused on every request."""
    sessions, _ = store
    before = (await sessions.sign_in_state()).generation
    await change_passphrase(sessions)
    secret, late = await sessions.create("127.0.0.1", "racing", before)
    assert late.generation == before
    assert await sessions.verify(secret) is None and await sessions.active() == []
    fresh, _ = await sessions.create("127.0.0.1", "after")
    assert await sessions.verify(fresh) is not None


async def test_a_passphrase_change_before_any_sign_in_still_ends_older_sessions(
    store: tuple[SessionStore, Clock],
) -> None:
    """Sessions from before the upgrade (generation 1, no sign-in state row yet) end too."""
    sessions, _ = store
    secret, _ = await sessions.create("127.0.0.1", "old")
    await change_passphrase(sessions)
    assert await sessions.verify(secret) is None


async def test_a_link_signs_in_once_within_its_validity(store: tuple[SessionStore, Clock]) -> None:
    sessions, clock = store
    token = await sessions.create_link(valid_s=300)
    redeemed = await sessions.redeem_link(token, "127.0.0.1", "browser")
    assert redeemed is not None
    secret, session = redeemed
    assert await sessions.verify(secret) == session
    assert await sessions.redeem_link(token, "127.0.0.1", "browser") is None  # single use
    late = await sessions.create_link(valid_s=300)
    clock.now += 300
    assert await sessions.redeem_link(late, "127.0.0.1", "browser") is None  # expired
    for bad in (None, "", "made-up", "x" * 201):
        assert await sessions.redeem_link(bad, "127.0.0.1", "browser") is None
    assert [s.id for s in await sessions.active()] == [session.id]
