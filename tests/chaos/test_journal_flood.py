"""A journal flood by one token against a real ``chartgen --serve``: many 16 KiB ``log_event`` calls
(the most one event may carry) keep the journal within the configured bytes — per principal and in
all — the oldest going first, and ``get_events`` reports what was dropped; another principal's
journal is untouched, and the stored bytes (read from the database after the daemon stopped) match.

Before the byte limits, the count cap alone let one token store 16 KiB × 100,000 ≈ 1.6 GB.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcp_bridge import event_size
from testkit.daemon_proc import create_token, mcp_client, running_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(300)]

PER_PRINCIPAL = 256 * 1024
TOTAL = 320 * 1024
EVENTS = 60
DATA = {"blob": "x" * (16 * 1024 - 20)}  # just under log_event's 16 KiB


async def test_a_flood_of_16_kib_events_stays_within_the_configured_bytes(tmp_path: Path) -> None:
    flood = await create_token(tmp_path, "flood")
    quiet = await create_token(tmp_path, "quiet")
    env = {
        "CHARTGEN_JOURNAL_MAX_BYTES_PER_PRINCIPAL": str(PER_PRINCIPAL),
        "CHARTGEN_JOURNAL_MAX_BYTES": str(TOTAL),
    }
    size = event_size("f00", json.dumps(DATA, separators=(",", ":")))
    async with running_daemon(["--serve"], data_dir=tmp_path, env=env) as daemon:
        async with mcp_client(daemon.mcp_url, quiet) as client:
            for i in range(3):
                result = await client.call_tool("log_event", {"event_type": "trade", "data": {"i": i}})
                assert not result.is_error, result.content[0].text
        async with mcp_client(daemon.mcp_url, flood) as client:
            for i in range(EVENTS):
                result = await client.call_tool(
                    "log_event", {"event_type": "signal", "data": DATA, "tool_call_id": f"f{i:02d}"}
                )
                assert not result.is_error, result.content[0].text
            result = await client.call_tool("get_events", {"limit": 1000})
            assert not result.is_error, result.content[0].text
            answer = result.structured_content["data"]
        kept = [e["tool_call_id"] for e in answer["events"]]
        fits = PER_PRINCIPAL // size
        # newest first, and exactly the newest that fit: the oldest went first
        assert kept == [f"f{i:02d}" for i in range(EVENTS - 1, EVENTS - 1 - fits, -1)]
        assert answer["dropped"]["events"] == EVENTS - fits
        assert answer["dropped"]["bytes"] == (EVENTS - fits) * size
        assert answer["dropped"]["newest_logged_at"] <= answer["events"][-1]["logged_at"]
        async with mcp_client(daemon.mcp_url, quiet) as client:
            result = await client.call_tool("get_events", {})
            theirs = result.structured_content["data"]
            assert theirs["count"] == 3 and theirs["dropped"] is None
    with sqlite3.connect(tmp_path / "chartgen.db") as conn:
        per = dict(conn.execute("SELECT principal, sum(size) FROM journal_events GROUP BY principal").fetchall())
        (total,) = conn.execute("SELECT bytes FROM journal_total").fetchone()
    assert len(per) == 2 and max(per.values()) == fits * size <= PER_PRINCIPAL  # the flood's principal
    assert total == sum(per.values()) <= TOTAL
