"""Leader leases with fencing on a real PostgreSQL (cluster/lease.py): one holder at a time, a new
token per new holder, and an ex-holder — expired, paused or killed — can neither renew nor commit a
fenced write nor pass its local deadline check."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import asyncpg
import orjson
import pytest

from cluster.lease import LeaseLost, Leases
from storage import PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]
NAME = "orders/binance:main"


async def _expire(db: PostgresDatabase, name: str = NAME) -> None:
    """End the lease on the server's clock now (what waiting out its TTL does)."""
    await db.execute("UPDATE cluster_leases SET expires_at = clock_timestamp() - interval '1 ms' WHERE name = $1", name)


async def test_concurrent_candidates_one_wins(cluster_dsn: str) -> None:
    dbs = [await PostgresDatabase.open(cluster_dsn, min_size=1, max_size=1) for _ in range(6)]
    try:
        got = await asyncio.gather(*(Leases(db).acquire(NAME, f"cand{i}", 30) for i, db in enumerate(dbs)))
        winners = [lease for lease in got if lease is not None]
        assert len(winners) == 1 and winners[0].token == 1 and winners[0].may_act()
    finally:
        await asyncio.gather(*(db.close() for db in dbs))


async def test_a_new_holder_gets_a_new_token_and_fences_the_old_one_out(cluster_db: PostgresDatabase) -> None:
    leases = Leases(cluster_db)
    old = await leases.acquire(NAME, "a", 30)
    assert old is not None
    assert await leases.acquire(NAME, "b", 30) is None  # live and someone else's
    again = await leases.acquire(NAME, "a", 30)
    assert again is not None and again.token == old.token  # ours already: same token
    await old.renew()
    await _expire(cluster_db)
    new = await leases.acquire(NAME, "b", 30)
    assert new is not None and new.token == old.token + 1
    with pytest.raises(LeaseLost):
        await old.renew()
    assert not old.may_act()
    await cluster_db.execute("CREATE TABLE intents (token BIGINT)")
    with pytest.raises(LeaseLost):
        async with cluster_db.transaction() as conn:
            await conn.execute("INSERT INTO intents VALUES ($1)", old.token)
            await old.fence(conn)
    async with cluster_db.transaction() as conn:
        await new.fence(conn)
        await conn.execute("INSERT INTO intents VALUES ($1)", new.token)
    assert [r["token"] for r in await cluster_db.fetch("SELECT token FROM intents")] == [new.token]
    state = await leases.state(NAME)
    assert state is not None and state.holder == "b" and state.token == new.token and state.expires_in_s > 0


async def test_a_fenced_write_in_progress_holds_off_the_next_holder(
    cluster_db: PostgresDatabase, cluster_dsn: str
) -> None:
    """While the holder's fenced transaction is open, a candidate's acquire waits for it (here: its
    lock_timeout fires), so no write of the old holder can commit after a new holder took over."""
    leases = Leases(cluster_db)
    lease = await leases.acquire(NAME, "a", 30)
    assert lease is not None
    other = await asyncpg.connect(cluster_dsn)
    try:
        await other.execute("SET lock_timeout = '200ms'")
        async with cluster_db.transaction() as conn:
            await lease.fence(conn)
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.execute("UPDATE cluster_leases SET holder = 'b', token = token + 1 WHERE name = $1", NAME)
    finally:
        await other.close()


async def test_release_hands_over_at_once(cluster_db: PostgresDatabase) -> None:
    leases = Leases(cluster_db)
    lease = await leases.acquire(NAME, "a", 30)
    assert lease is not None
    await lease.release()
    assert not lease.may_act()
    nxt = await leases.acquire(NAME, "b", 30)
    assert nxt is not None and nxt.token == lease.token + 1


async def test_the_local_deadline_ends_before_the_server_expiry(
    cluster_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = await Leases(cluster_db).acquire(NAME, "a", 10)
    assert lease is not None and lease.may_act()
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 8.5)  # past 10 s × (1 − margin 0.2)
    assert not lease.may_act()
    state = await Leases(cluster_db).state(NAME)
    assert state is not None and state.expires_in_s > 8.0  # the server would still call it live


async def _holder(cluster_dsn: str, holder: str, ttl_s: float, *extra: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cluster.lease_holder",
        cluster_dsn,
        NAME,
        holder,
        str(ttl_s),
        *extra,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, int(orjson.loads(line)["token"])


async def _take_over(leases: Leases, holder: str, within_s: float) -> tuple[int, float]:
    """Try to acquire until it succeeds; returns (token, seconds it took)."""
    start = time.monotonic()
    async with asyncio.timeout(within_s):
        while True:
            lease = await leases.acquire(NAME, holder, 30)
            if lease is not None:
                return lease.token, time.monotonic() - start
            await asyncio.sleep(0.05)  # polling the server-side expiry, bounded by the timeout


async def test_a_paused_ex_leader_cannot_act_when_it_resumes(cluster_db: PostgresDatabase, cluster_dsn: str) -> None:
    """SIGSTOP the holder past its TTL, let another take over, SIGCONT: it finds its local deadline
    passed and its fenced write refused; the new holder's token is higher."""
    proc, token = await _holder(cluster_dsn, "paused", 1.0)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        new_token, _ = await _take_over(Leases(cluster_db), "successor", 10)
        assert new_token == token + 1
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        report = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert report["may_act"] is False
        assert str(report["fenced_write"]).startswith("refused")
        assert await cluster_db.fetchval("SELECT to_regclass('sent')") is None  # nothing it wrote exists
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        await proc.wait()


async def test_a_killed_leader_is_replaced_once_its_ttl_ends(cluster_db: PostgresDatabase, cluster_dsn: str) -> None:
    proc, token = await _holder(cluster_dsn, "doomed", 1.0)
    proc.kill()  # SIGKILL: no release
    await proc.wait()
    new_token, took = await _take_over(Leases(cluster_db), "successor", 10)
    assert new_token == token + 1
    assert took < 10


async def test_a_holder_stalled_inside_its_fenced_write_does_not_block_the_takeover(
    cluster_db: PostgresDatabase, cluster_dsn: str
) -> None:
    """Its open transaction holds the lease row; the server ends it after the idle-in-transaction
    timeout (half the TTL here), so a successor leads soon after the TTL and the write never lands."""
    proc, token = await _holder(cluster_dsn, "stalled", 1.0, "open")
    try:
        new_token, took = await _take_over(Leases(cluster_db), "successor", 10)
        assert new_token == token + 1 and took < 10
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        report = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert str(report["fenced_write"]).startswith("failed")
        assert await cluster_db.fetchval("SELECT to_regclass('sent')") is None
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
