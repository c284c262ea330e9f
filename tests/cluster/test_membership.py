"""Membership by heartbeats (real PostgreSQL) and rendezvous assignment of markets (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.membership import Membership, assign, new_member_id, owner_of
from storage import PostgresDatabase

pytestmark = [pytest.mark.servers, pytest.mark.process]

MARKETS = [f"SYM{i}USDT/{iv}" for i in range(200) for iv in ("1m", "1h", "1d")]  # 600 markets
member_ids = st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=8, unique=True)


@given(members=member_ids, gone=st.integers(min_value=0, max_value=7))
@settings(max_examples=60, deadline=None)
def test_when_a_worker_leaves_only_its_markets_move(members: list[str], gone: int) -> None:
    leaving = members[gone % len(members)]
    before = {m: owner_of(m, members) for m in MARKETS}
    rest = [m for m in members if m != leaving]
    after = {m: owner_of(m, rest) for m in MARKETS}
    moved = {m for m in MARKETS if before[m] != after[m]}
    assert moved == {m for m in MARKETS if before[m] == leaving}


@given(members=member_ids)
@settings(max_examples=60, deadline=None)
def test_when_a_worker_joins_markets_move_only_to_it(members: list[str]) -> None:
    joining, rest = members[0], members[1:]
    before = {m: owner_of(m, rest) for m in MARKETS}
    after = {m: owner_of(m, members) for m in MARKETS}
    assert all(after[m] in (before[m], joining) for m in MARKETS)


@given(members=member_ids)
@settings(max_examples=30, deadline=None)
def test_the_assignment_does_not_depend_on_member_order_and_covers_every_market(members: list[str]) -> None:
    one = assign(MARKETS, members)
    other = assign(MARKETS, list(reversed(members)))
    assert {k: sorted(v) for k, v in one.items()} == {k: sorted(v) for k, v in other.items()}
    assert sorted(m for ms in one.values() for m in ms) == sorted(MARKETS)


def test_three_workers_share_600_markets_evenly() -> None:
    workers = [new_member_id("worker") for _ in range(3)]
    sizes = sorted(len(v) for v in assign(MARKETS, workers).values())
    assert sizes[0] >= 150 and sizes[-1] <= 250, sizes  # 200 each ± 25 %


def test_no_live_worker_is_an_error_naming_the_market() -> None:
    with pytest.raises(ValueError, match="no live worker to own BTCUSDT/1m"):
        owner_of("BTCUSDT/1m", [])


async def test_heartbeats_make_members_live_and_silence_or_leaving_removes_them(cluster_db: PostgresDatabase) -> None:
    members = Membership(cluster_db, liveness_s=6.0)
    a, b, f = new_member_id("worker"), new_member_id("worker"), new_member_id("front")
    for mid, role in ((a, "worker"), (b, "worker"), (f, "front")):
        await members.heartbeat(mid, role, "127.0.0.1:9315")
    assert await members.live("worker") == sorted([a, b])
    assert await members.live("front") == [f]
    # b falls silent: its last heartbeat older than the window on the server's clock
    await cluster_db.execute(
        "UPDATE cluster_members SET last_seen = last_seen - interval '10 seconds' WHERE id = $1", b
    )
    assert await members.live("worker") == [a]
    await members.heartbeat(b, "worker")  # heard again: live again
    assert await members.live("worker") == sorted([a, b])
    await members.leave(a)
    assert await members.live("worker") == [b]
    await cluster_db.execute("UPDATE cluster_members SET last_seen = last_seen - interval '1 hour' WHERE id = $1", b)
    assert await members.forget_dead(600) == 1
    assert [m.id for m in await members.members()] == [f]


async def test_members_on_another_bus_are_named_and_dead_or_busless_ones_are_not(cluster_db: PostgresDatabase) -> None:
    members = Membership(cluster_db, liveness_s=6.0)
    await members.heartbeat("worker@a", "worker", bus="nats")
    await members.heartbeat("front@a", "front", "10.0.0.3", bus="nats")
    await members.heartbeat("leader@a", "leader")  # a leader uses no bus
    assert await members.bus_mismatch("nats") is None
    await members.heartbeat("front@b", "front", bus="local")
    problem = await members.bus_mismatch("nats")
    assert problem is not None and "front front@b (local)" in problem and "worker@a" not in problem
    assert "set the same bus on every worker and front" in problem
    local_view = await members.bus_mismatch("local")
    assert local_view is not None and "worker worker@a (nats)" in local_view and "front front@a (nats)" in local_view
    await cluster_db.execute(  # front@b falls silent: a dead member does not count
        "UPDATE cluster_members SET last_seen = last_seen - interval '10 seconds' WHERE id = 'front@b'"
    )
    assert await members.bus_mismatch("nats") is None
    assert {m.id: m.bus for m in await members.members()} == {
        "front@a": "nats", "front@b": "local", "leader@a": None, "worker@a": "nats"
    }  # fmt: skip


async def test_a_bad_role_is_refused(cluster_db: PostgresDatabase) -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        await Membership(cluster_db).heartbeat("x", "scheduler")


async def test_three_workers_share_600_markets_and_a_dead_ones_move_to_the_others(
    cluster_db: PostgresDatabase,
) -> None:
    """Every market has exactly one owner among the live workers; when one falls silent, the
    others take exactly its markets at their next refresh; a joining worker takes only its own."""
    from cluster.membership import MarketAssignment

    members = Membership(cluster_db, liveness_s=6.0)
    workers = [MarketAssignment(members, new_member_id("worker")) for _ in range(3)]
    for w in workers:
        await w.refresh(MARKETS)
    for w in workers:  # a second round: every worker now sees all three
        await w.refresh(MARKETS)
    owners = [w.owned for w in workers]
    assert sorted(m for o in owners for m in o) == sorted(MARKETS)  # disjoint and complete
    dead, *alive = workers
    await cluster_db.execute(
        "UPDATE cluster_members SET last_seen = last_seen - interval '10 seconds' WHERE id = $1", dead.member_id
    )
    changes = [await w.refresh(MARKETS) for w in alive]
    assert all(c.unfollow == [] for c in changes)
    assert sorted(m for c in changes for m in c.follow) == sorted(dead.owned)
    assert sorted(m for w in alive for m in w.owned) == sorted(MARKETS)
    joining = MarketAssignment(members, new_member_id("worker"))
    gained = await joining.refresh(MARKETS)
    lost = [await w.refresh(MARKETS) for w in alive]
    assert sorted(m for c in lost for m in c.unfollow) == sorted(gained.follow) == sorted(joining.owned)
