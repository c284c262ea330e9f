"""log_event / get_events: the convention's shape, per-principal visibility, idempotent retries,
filters, the byte limits (per principal and in all, oldest first out, reported by get_events),
and events that survive a daemon restart (official SDK client over HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import ChartService, InlineRenderer
from mcp_bridge.journal_store import MIGRATIONS, EventFilter, Journal, JournalLimits, JournalStore, event_size
from mcp_bridge.scopes import ALERTS, CHARTS
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services
from storage import Database
from testkit.daemon_proc import create_token, mcp_client, running_daemon

SCOPES = frozenset({CHARTS, ALERTS})


def router_over(journal: Journal) -> ToolRouter:
    """A tool router whose journal is ``journal`` (tests/cluster/test_pg_journal.py runs these tests
    with the PostgreSQL store)."""
    services = Services(charts=ChartService(None, InlineRenderer()))
    services.journal = journal
    return ToolRouter(services)


SMALL = JournalLimits(max_events_per_principal=1000, max_bytes_per_principal=10_000, max_bytes=25_000)
"""Byte limits small enough for a test: three 3 KB events per principal, eight in all."""
BLOB = {"blob": "x" * 2980}
SIZE = event_size("a0", json.dumps(BLOB, separators=(",", ":")))  # 2,993 bytes


@pytest.fixture
def journal_router(db: Database) -> ToolRouter:
    return router_over(JournalStore(db, max_per_principal=5))


@pytest.fixture
def small_journal(db: Database) -> Journal:
    return JournalStore(db, limits=SMALL)


async def stored_bytes(journal: Journal, principals: list[str]) -> int:
    """What the events still stored count against the limits (read back through the store)."""
    total = 0
    for p in principals:
        for e in await journal.events(p, EventFilter(limit=1000)):
            total += event_size(e.tool_call_id, json.dumps(e.data, separators=(",", ":"), sort_keys=True))
    return total


async def _call(router: ToolRouter, name: str, args: dict[str, Any], principal: str | None = "alice") -> Any:
    result = await router.call(name, args, principal=principal, scopes=SCOPES)
    body = json.loads(result.content[0].text)
    assert body == result.structured_content
    return result.is_error, body


async def test_log_event_answers_the_seed_shape_and_a_retry_does_not_log_twice(journal_router: ToolRouter) -> None:
    router = journal_router
    err, body = await _call(
        router, "log_event", {"event_type": "signal", "data": {"symbol": "BTCUSDT"}, "tool_call_id": "sig_001"}
    )
    assert not err
    assert body["tool_call_id"] == "sig_001"
    assert body["data"]["logged"] is True and body["data"]["duplicate"] is False
    event_id = body["data"]["event_id"]
    assert body["data"]["source_refs"][0] == "sig_001"
    err, again = await _call(
        router, "log_event", {"event_type": "signal", "data": {"symbol": "BTCUSDT"}, "tool_call_id": "sig_001"}
    )
    assert not err and again["data"]["event_id"] == event_id and again["data"]["duplicate"] is True
    err, listed = await _call(router, "get_events", {})
    assert [e["event_id"] for e in listed["data"]["events"]] == [event_id]


async def test_a_minted_tool_call_id_is_returned_and_cited(journal_router: ToolRouter) -> None:
    err, body = await _call(journal_router, "log_event", {"event_type": "trade", "data": {}})
    assert not err
    assert body["tool_call_id"].startswith("log_event_")
    assert body["data"]["source_refs"][0] == body["tool_call_id"]


async def test_events_are_visible_only_to_their_principal(journal_router: ToolRouter) -> None:
    router = journal_router
    await _call(router, "log_event", {"event_type": "error", "data": {"x": 1}}, principal="alice")
    err, bob = await _call(router, "get_events", {}, principal="bob")
    assert not err and bob["data"]["events"] == [] and bob["data"]["count"] == 0
    err, alice = await _call(router, "get_events", {}, principal="alice")
    assert alice["data"]["count"] == 1


async def test_filters_by_type_severity_and_the_newest_are_kept(journal_router: ToolRouter) -> None:
    router = journal_router
    plan = [("signal", "low"), ("trade", "high"), ("error", "critical"), ("signal", "medium"), ("alert", "low")]
    for i, (kind, severity) in enumerate(plan):
        await _call(router, "log_event", {"event_type": kind, "data": {"i": i}, "severity": severity})
    _, signals = await _call(router, "get_events", {"event_type": ["signal"]})
    assert [e["data"]["i"] for e in signals["data"]["events"]] == [3, 0]
    _, severe = await _call(router, "get_events", {"min_severity": "high"})
    assert [e["data"]["i"] for e in severe["data"]["events"]] == [2, 1]
    _, exact = await _call(router, "get_events", {"severity": ["low"], "limit": 1})
    assert [e["data"]["i"] for e in exact["data"]["events"]] == [4]
    # the journal keeps the newest five per principal (this router's cap): a sixth drops the oldest
    await _call(router, "log_event", {"event_type": "trade", "data": {"i": 5}})
    _, everything = await _call(router, "get_events", {})
    assert [e["data"]["i"] for e in everything["data"]["events"]] == [5, 4, 3, 2, 1]
    _, future = await _call(router, "get_events", {"since": "2999-01-01T00:00:00Z"})
    assert future["data"]["events"] == []


async def test_a_principal_over_its_byte_share_loses_its_oldest_events_and_is_told(small_journal: Journal) -> None:
    router = router_over(small_journal)
    _, clean = await _call(router, "get_events", {})
    assert clean["data"]["dropped"] is None
    for i in range(10):
        await _call(router, "log_event", {"event_type": "signal", "data": BLOB, "tool_call_id": f"a{i}"})
    # a retry of a kept event neither stores nor counts anything
    err, again = await _call(router, "log_event", {"event_type": "signal", "data": BLOB, "tool_call_id": "a9"})
    assert not err and again["data"]["duplicate"] is True
    _, listed = await _call(router, "get_events", {})
    assert [e["tool_call_id"] for e in listed["data"]["events"]] == ["a9", "a8", "a7"]
    dropped = listed["data"]["dropped"]
    assert dropped["events"] == 7 and dropped["bytes"] == 7 * SIZE
    assert dropped["newest_logged_at"] <= listed["data"]["events"][-1]["logged_at"]
    assert "oldest" in dropped["reason"]
    assert await stored_bytes(small_journal, ["alice"]) == 3 * SIZE <= SMALL.max_bytes_per_principal


async def test_the_whole_journal_over_its_bytes_drops_everyone_s_oldest_first(small_journal: Journal) -> None:
    router = router_over(small_journal)
    for who in ("alice", "bob", "carol"):
        for i in range(3):
            await _call(router, "log_event", {"event_type": "trade", "data": BLOB, "tool_call_id": f"{who[0]}{i}"}, who)
    # nine events of 2,993 bytes pass 25,000: the oldest of all (alice's first) went
    _, alice = await _call(router, "get_events", {}, "alice")
    assert [e["tool_call_id"] for e in alice["data"]["events"]] == ["a2", "a1"]
    assert alice["data"]["dropped"]["events"] == 1
    for who in ("bob", "carol"):
        _, theirs = await _call(router, "get_events", {}, who)
        assert theirs["data"]["count"] == 3 and theirs["data"]["dropped"] is None
    assert await stored_bytes(small_journal, ["alice", "bob", "carol"]) == 8 * SIZE <= SMALL.max_bytes


async def test_migration_2_counts_the_events_a_v1_journal_already_holds(tmp_path: Path) -> None:
    v1 = type(MIGRATIONS)(MIGRATIONS.package, MIGRATIONS.steps[:1])
    db = await Database.open(tmp_path / "old.db")
    try:
        await db.migrate([v1])
        for i in range(4):
            await db.execute(
                "INSERT INTO journal_events (event_id, principal, tool_call_id, event_type, severity, data, at)"
                " VALUES (?, 'alice', ?, 'signal', 'low', ?, ?)",
                (f"evt_{i}", f"a{i}", json.dumps(BLOB, separators=(",", ":")), 1000.0 + i),
            )
        await db.migrate([MIGRATIONS])
        journal = JournalStore(db, limits=SMALL)
        await journal.log("alice", "a4", "signal", "low", BLOB)  # 5 × 2,993 > 10,000: the two oldest go
        kept = await journal.events("alice", EventFilter())
        assert [e.tool_call_id for e in kept] == ["a4", "a3", "a2"]
        gone = await journal.dropped("alice")
        assert (gone.events, gone.bytes, gone.newest_at) == (2, 2 * SIZE, 1001.0)
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"event_type": "rumour", "data": {}}, "event_type"),
        ({"event_type": "signal"}, "data"),
        ({"event_type": "signal", "data": {}, "severity": "urgent"}, "severity"),
        ({"event_type": "signal", "data": {"blob": "x" * 20_000}}, "data"),
        ({"event_type": "signal", "data": {}, "colour": "red"}, "colour"),
        ({"event_type": "signal", "data": {}, "tool_call_id": "has space"}, "tool_call_id"),
    ],
)
async def test_bad_arguments_are_invalid_argument_errors_naming_the_field(
    journal_router: ToolRouter, args: dict[str, Any], field: str
) -> None:
    err, body = await _call(journal_router, "log_event", args)
    assert err
    assert body["error"]["code"] == "INVALID_ARGUMENT"
    assert field in body["error"]["message"]
    assert body["tool_call_id"]


async def test_an_unauthenticated_caller_is_refused_with_the_convention(journal_router: ToolRouter) -> None:
    err, body = await _call(journal_router, "get_events", {"tool_call_id": "q1"}, principal=None)
    assert err and body["tool_call_id"] == "q1" and "Authorization" in body["error"]["message"]


@pytest.mark.process
async def test_events_survive_a_restart_and_stay_private(tmp_path: Path) -> None:
    alice = await create_token(tmp_path, "alice")
    bob = await create_token(tmp_path, "bob")
    async with running_daemon(["--serve"], data_dir=tmp_path) as daemon:
        async with mcp_client(daemon.mcp_url, alice) as client:
            result = await client.call_tool(
                "log_event", {"event_type": "suggestion", "data": {"buy": "ETHUSDT"}, "severity": "medium"}
            )
            assert not result.is_error
            event_id = result.structured_content["data"]["event_id"]
    async with running_daemon(["--serve"], data_dir=tmp_path) as daemon:
        async with mcp_client(daemon.mcp_url, alice) as client:
            result = await client.call_tool("get_events", {"event_type": ["suggestion"]})
            events = result.structured_content["data"]["events"]
            assert [(e["event_id"], e["data"], e["severity"]) for e in events] == [
                (event_id, {"buy": "ETHUSDT"}, "medium")
            ]
        async with mcp_client(daemon.mcp_url, bob) as client:
            result = await client.call_tool("get_events", {})
            assert result.structured_content["data"]["events"] == []
