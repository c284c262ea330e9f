"""Dashboard sessions on PostgreSQL (dashboard/pg_sessions.py) behave as the SQLite ones
(dashboard/sessions.py): the shared tests run against both stores, each on a clock of its own.  Then
PostgreSQL only: a session signed in at one front is verified and revoked at another (two pools, one
database), and a stopped server makes every operation refuse clearly rather than answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dashboard import (
    MIGRATIONS,
    PG_SESSION_MIGRATIONS,
    TOUCH_EVERY_S,
    PgSessionStore,
    Session,
    Sessions,
    SessionStore,
    device_of,
    issue_device_cookie,
    pg_sessions,
)
from dashboard import sessions as sqlite_sessions
from storage import Database, PostgresDatabase, StorageUnavailable

pytestmark = [pytest.mark.servers, pytest.mark.process]

IDLE = 3600.0
MAX = 4 * 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Fixture:
    store: Sessions
    clock: Clock


async def verified(store: Sessions, secret: str) -> Session:
    session = await store.verify(secret)
    assert session is not None
    return session


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest) -> PostgresDatabase | None:
    """The cluster's PostgreSQL (the ``cluster`` fixture's pool), or None for SQLite.

    A plain fixture: an async one cannot set up another async fixture by name."""
    if request.param == "postgres":
        _, pg = request.getfixturevalue("cluster")
        assert isinstance(pg, PostgresDatabase)
        return pg
    return None


@pytest.fixture
async def sessions(storage: PostgresDatabase | None, tmp_path: Path) -> AsyncIterator[Fixture]:
    """A store of each kind on a clock of the test's own."""
    clock = Clock()
    if storage is not None:
        yield Fixture(PgSessionStore(storage, idle_s=IDLE, max_s=MAX, clock=clock), clock)
        return
    db = await Database.open(tmp_path / "state.db")
    try:
        await db.migrate([MIGRATIONS])
        yield Fixture(SessionStore(db, idle_s=IDLE, max_s=MAX, clock=clock), clock)
    finally:
        await db.close()


async def test_a_created_session_is_verified_by_its_secret(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    secret, session = await store.create("10.0.0.7" * 20, "Firefox " * 60)
    assert session.created_at == session.last_seen_at == clock.now and session.expires_at == clock.now + MAX
    assert len(session.client) == 100 and len(session.user_agent) == 300 and session.revoked_at is None
    assert secret not in session.model_dump_json()
    assert await store.verify(secret) == session
    assert await store.still_valid(session.id)


@pytest.mark.parametrize("secret", [None, "", "made-up", "x" * 201])
async def test_unknown_empty_and_over_long_secrets_verify_nothing(sessions: Fixture, secret: str | None) -> None:
    await sessions.store.create("127.0.0.1", "test")
    assert await sessions.store.verify(secret) is None


async def test_last_seen_is_written_at_most_once_per_touch_interval(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    secret, _ = await store.create("127.0.0.1", "test")
    start = clock.now
    clock.now += TOUCH_EVERY_S - 1
    assert (await verified(store, secret)).last_seen_at == start
    assert [s.last_seen_at for s in await store.active()] == [start]
    clock.now = start + TOUCH_EVERY_S
    assert (await verified(store, secret)).last_seen_at == clock.now
    assert [s.last_seen_at for s in await store.active()] == [clock.now]
    clock.now += 1
    assert (await verified(store, secret)).last_seen_at == start + TOUCH_EVERY_S


async def test_a_session_unused_for_longer_than_the_idle_limit_is_over(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    idle_secret, idle = await store.create("127.0.0.1", "idle")
    busy_secret, busy = await store.create("127.0.0.1", "busy")
    clock.now += IDLE - 100
    assert await store.verify(busy_secret) is not None
    clock.now += 100  # exactly the idle limit: still live
    assert await store.still_valid(idle.id)
    clock.now += 1
    assert await store.verify(idle_secret) is None and not await store.still_valid(idle.id)
    assert await store.verify(busy_secret) is not None and await store.still_valid(busy.id)
    assert [s.id for s in await store.active()] == [busy.id]


async def test_a_session_ends_at_the_absolute_limit_however_busy(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    secret, session = await store.create("127.0.0.1", "test")
    while clock.now + 3000 < session.expires_at:
        clock.now += 3000
        assert await store.verify(secret) is not None
    clock.now = session.expires_at
    assert await store.verify(secret) is None and not await store.still_valid(session.id)
    assert await store.active() == []


async def test_revocation_is_immediate_and_happens_once(sessions: Fixture) -> None:
    store = sessions.store
    secret, session = await store.create("127.0.0.1", "test")
    other_secret, _ = await store.create("127.0.0.1", "other")
    assert await store.revoke(session.id) is True
    assert await store.revoke(session.id) is False
    assert await store.revoke("no-such-session") is False
    assert await store.verify(secret) is None and not await store.still_valid(session.id)
    assert await store.verify(other_secret) is not None


async def test_active_lists_only_live_sessions_oldest_first(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    _, stale = await store.create("10.0.0.1", "stale")
    clock.now += IDLE / 2
    _, first = await store.create("10.0.0.2", "first")
    clock.now += 1
    _, revoked = await store.create("10.0.0.3", "revoked")
    clock.now += 1
    _, second = await store.create("10.0.0.4", "second")
    await store.revoke(revoked.id)
    assert [s.id for s in await store.active()] == [stale.id, first.id, second.id]
    clock.now = stale.created_at + IDLE + 1
    assert await store.active() == [first, second]


async def test_listeners_are_called_on_create_and_on_revoke(sessions: Fixture) -> None:
    store = sessions.store
    calls: list[str] = []
    store.listeners.append(lambda: calls.append("changed"))
    secret, session = await store.create("127.0.0.1", "test")
    assert calls == ["changed"]
    await store.verify(secret)
    await store.active()
    assert calls == ["changed"]
    await store.revoke(session.id)
    assert calls == ["changed", "changed"]
    await store.revoke(session.id)  # nothing changed
    assert calls == ["changed", "changed"]


async def end_every_sign_in(store: Sessions, now: float) -> None:
    """What ``chartgen passphrase set`` runs in the passphrase's transaction, on either store."""
    if isinstance(store, PgSessionStore):
        async with store.db.transaction() as conn:
            await pg_sessions.end_every_sign_in(conn, now)
    else:
        assert isinstance(store, SessionStore)
        async with store.db.transaction() as tx:
            await sqlite_sessions.end_every_sign_in(tx, now)


async def test_a_passphrase_change_ends_every_session_device_cookie_and_link(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    state = await store.sign_in_state()
    assert await store.sign_in_state() == state
    cookie = issue_device_cookie(state)
    secret, session = await store.create("127.0.0.1", "test", state.generation)
    link = await store.create_link()
    await end_every_sign_in(store, clock.now)
    after = await store.sign_in_state()
    assert after.generation == state.generation + 1 and device_of(cookie, after) is None
    assert await store.verify(secret) is None and not await store.still_valid(session.id)
    assert await store.active() == []
    assert await store.redeem_link(link, "127.0.0.1", "test") is None
    # a sign-in that read the generation before the change (its passphrase check raced it) is dead too
    racing, _ = await store.create("127.0.0.1", "racing", state.generation)
    assert await store.verify(racing) is None
    fresh, _ = await store.create("127.0.0.1", "fresh")
    assert await store.verify(fresh) is not None


async def test_a_sign_in_link_works_once_and_only_within_its_validity(sessions: Fixture) -> None:
    store, clock = sessions.store, sessions.clock
    token = await store.create_link(valid_s=300)
    redeemed = await store.redeem_link(token, "127.0.0.1", "test")
    assert redeemed is not None and await store.verify(redeemed[0]) == redeemed[1]
    assert await store.redeem_link(token, "127.0.0.1", "test") is None
    late = await store.create_link(valid_s=300)
    clock.now += 300
    assert await store.redeem_link(late, "127.0.0.1", "test") is None
    assert await store.redeem_link("made-up", "127.0.0.1", "test") is None


async def test_a_device_cookie_and_a_link_from_one_front_hold_at_another(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    """The signing key is the database's, not a process's: both fronts read one, and a link made at one
    front (or by ``chartgen dashboard link --cluster``) is redeemed at the other, once."""
    dsn, pg = cluster
    clock = Clock()
    front_a = PgSessionStore(pg, idle_s=IDLE, max_s=MAX, clock=clock)
    other_pool = await PostgresDatabase.open(dsn, min_size=1, max_size=2)
    try:
        front_b = PgSessionStore(other_pool, idle_s=IDLE, max_s=MAX, clock=clock)
        state_a, state_b = await asyncio.gather(front_a.sign_in_state(), front_b.sign_in_state())
        assert state_a == state_b
        assert device_of(issue_device_cookie(state_a), await front_b.sign_in_state()) is not None
        token = await front_a.create_link()
        results = await asyncio.gather(*(f.redeem_link(token, "127.0.0.1", "t") for f in (front_a, front_b) * 3))
        assert sum(r is not None for r in results) == 1  # single use across fronts, even at once
        await end_every_sign_in(front_b, clock.now)
        assert (await front_a.sign_in_state()).generation == state_a.generation + 1
    finally:
        await other_pool.close()


async def test_a_session_signed_in_at_one_front_is_verified_and_revoked_at_another(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    dsn, pg = cluster
    clock = Clock()
    front_a = PgSessionStore(pg, idle_s=IDLE, max_s=MAX, clock=clock)
    other_pool = await PostgresDatabase.open(dsn, min_size=1, max_size=2)
    try:
        front_b = PgSessionStore(other_pool, idle_s=IDLE, max_s=MAX, clock=clock)
        seen_a: list[str] = []
        front_a.listeners.append(lambda: seen_a.append("a"))
        secret, session = await front_a.create("127.0.0.1", "test")
        assert await front_b.verify(secret) == session
        assert [s.id for s in await front_b.active()] == [session.id]
        clock.now += TOUCH_EVERY_S
        assert (await verified(front_b, secret)).last_seen_at == clock.now
        assert [s.last_seen_at for s in await front_a.active()] == [clock.now]
        assert await front_b.revoke(session.id) is True
        assert await front_a.verify(secret) is None and not await front_a.still_valid(session.id)
        assert await front_a.revoke(session.id) is False
        assert seen_a == ["a"]  # a front's listeners hear its own changes; the others re-check at keep-alive
    finally:
        await other_pool.close()


async def test_postgres_away_neither_accepts_nor_signs_out_a_session() -> None:
    """The server stopped: every operation raises StorageUnavailable naming what was not done (a
    session that cannot be checked is neither valid nor invalid); back on the same port, the same
    session verifies again."""
    from testkit.postgres import postgres_server

    own = postgres_server()  # a server of its own: this test stops it
    server = await asyncio.to_thread(own.__enter__)
    try:
        db = await PostgresDatabase.open(await server.new_database(), min_size=1, max_size=2)
        try:
            await db.migrate([PG_SESSION_MIGRATIONS])
            store = PgSessionStore(db, idle_s=IDLE, max_s=MAX, clock=Clock())
            secret, session = await store.create("127.0.0.1", "test")
            await asyncio.to_thread(server.stop)
            with pytest.raises(StorageUnavailable, match="session not checked") as refused:
                await store.verify(secret)
            assert "postgres_dsn=postgresql://" in str(refused.value)
            with pytest.raises(StorageUnavailable, match="session not checked"):
                await store.still_valid(session.id)
            with pytest.raises(StorageUnavailable, match="session not created"):
                await store.create("127.0.0.1", "test")
            with pytest.raises(StorageUnavailable, match="sessions not listed"):
                await store.active()
            with pytest.raises(StorageUnavailable, match="session not revoked"):
                await store.revoke(session.id)
            with pytest.raises(StorageUnavailable, match="sign-in state not read"):
                await store.sign_in_state()
            with pytest.raises(StorageUnavailable, match="sign-in link not created"):
                await store.create_link()
            with pytest.raises(StorageUnavailable, match="sign-in link not used"):
                await store.redeem_link("some-token", "127.0.0.1", "test")
            await asyncio.to_thread(server.start)
            assert await store.verify(secret) == session
            assert [s.id for s in await store.active()] == [session.id]
        finally:
            await db.close()
    finally:
        await asyncio.to_thread(own.__exit__, None, None, None)
