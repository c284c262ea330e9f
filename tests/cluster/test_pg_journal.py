"""The journal on PostgreSQL (mcp_bridge/pg_journal.py): the SQLite journal's tool tests
(tests/mcp_bridge/test_journal_tools.py) run unchanged against it — the byte limits among them — a
retried ``log_event`` arriving at two fronts at the same moment logs one event, and a flood through
two fronts at once stays within the byte limits with the sizes accounted exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_bridge import EventFilter, Journal, PgJournalStore, ToolRouter
from storage import PostgresDatabase
from tests.mcp_bridge.test_journal_tools import (  # noqa: F401 - collected here with the PostgreSQL store
    BLOB,
    SIZE,
    SMALL,
    router_over,
    stored_bytes,
    test_a_minted_tool_call_id_is_returned_and_cited,
    test_a_principal_over_its_byte_share_loses_its_oldest_events_and_is_told,
    test_an_unauthenticated_caller_is_refused_with_the_convention,
    test_bad_arguments_are_invalid_argument_errors_naming_the_field,
    test_events_are_visible_only_to_their_principal,
    test_filters_by_type_severity_and_the_newest_are_kept,
    test_log_event_answers_the_seed_shape_and_a_retry_does_not_log_twice,
    test_the_whole_journal_over_its_bytes_drops_everyone_s_oldest_first,
)

pytestmark = [pytest.mark.servers, pytest.mark.process]


@pytest.fixture
async def journal_router(cluster: tuple[str, PostgresDatabase]) -> ToolRouter:
    return router_over(PgJournalStore(cluster[1], max_per_principal=5))


@pytest.fixture
def small_journal(cluster: tuple[str, PostgresDatabase]) -> Journal:
    return PgJournalStore(cluster[1], limits=SMALL)


async def test_a_flood_through_two_fronts_at_once_stays_within_the_bytes(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    dsn, db = cluster
    pools = [await PostgresDatabase.open(dsn, min_size=1, max_size=4) for _ in range(2)]
    try:
        fronts = [PgJournalStore(p, limits=SMALL) for p in pools]
        who = ("alice", "bob", "carol")
        await asyncio.gather(
            *(fronts[i % 2].log(who[i % 3], f"{who[i % 3][0]}{i}", "signal", "low", BLOB) for i in range(30))
        )
        stored = await stored_bytes(fronts[0], list(who))
        assert SMALL.max_bytes - 2 * SIZE < stored <= SMALL.max_bytes
        total = await db.fetchval("SELECT bytes FROM journal_total")
        usage = await db.fetch("SELECT principal, events, bytes, dropped_events FROM journal_usage")
        assert total == stored == sum(u["bytes"] for u in usage)
        assert sum(u["events"] + u["dropped_events"] for u in usage) == 30
        for u in usage:
            assert u["bytes"] <= SMALL.max_bytes_per_principal
            assert u["events"] == len(await fronts[1].events(u["principal"], EventFilter()))
    finally:
        for p in pools:
            await p.close()


async def test_a_retry_at_two_fronts_at_once_logs_one_event(cluster: tuple[str, PostgresDatabase]) -> None:
    dsn, _ = cluster
    pools = [await PostgresDatabase.open(dsn, min_size=1, max_size=4) for _ in range(2)]
    try:
        fronts = [PgJournalStore(p) for p in pools]
        data: dict[str, Any] = {"symbol": "BTCUSDT", "side": "buy"}
        results = await asyncio.gather(
            *(fronts[i % 2].log("alice", "call-1", "trade", "high", data) for i in range(16))
        )
        assert len({event.event_id for event, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert all(event.data == data for event, _ in results)
        listed = await fronts[1].events("alice", EventFilter())
        assert [e.event_id for e in listed] == [results[0][0].event_id]
        assert await fronts[0].events("bob", EventFilter()) == []
    finally:
        for p in pools:
            await p.close()
