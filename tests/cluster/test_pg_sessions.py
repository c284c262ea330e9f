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

from config.database import Database
from config.postgres import PostgresDatabase, StorageUnavailable
from dashboard.pg_sessions import PG_SESSION_MIGRATIONS, PgSessionStore
from dashboard.sessions import MIGRATIONS, TOUCH_EVERY_S, Session, Sessions, SessionStore

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
    from tests.support.postgres import postgres_server

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
            await asyncio.to_thread(server.start)
            assert await store.verify(secret) == session
            assert [s.id for s in await store.active()] == [session.id]
        finally:
            await db.close()
    finally:
        await asyncio.to_thread(own.__exit__, None, None, None)
