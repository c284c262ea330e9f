"""trades.log lines of fired alerts: every fired alert gets its line, once, in commit order; the
high-water mark (alerts schema step 4) never skips a line, also across a failed write and an
upgrade from the per-row ``logged`` flag."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.audit_log import AlertAuditLog
from alerts.models import Alert, Firing
from alerts.schema import MIGRATIONS as ALERT_MIGRATIONS
from alerts.store import AlertStore, QueueLimits
from daemon import ALL_MIGRATIONS
from storage import Database, Migrations
from tests.alerts.test_store import alert


class Lines:
    """A trades.log stand-in: the lines written, and a switch that makes the next write fail."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.fail_next = False

    async def write(self, lines: Sequence[str]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        self.lines.extend(lines)

    def ids(self) -> list[str]:
        return [line.split(" id=")[1].split()[0] for line in self.lines]


@pytest.fixture
async def store() -> AsyncIterator[AlertStore]:
    db = await Database.open(":memory:")
    await db.migrate(ALL_MIGRATIONS)
    try:
        yield AlertStore(db, QueueLimits())
    finally:
        await db.close()


async def _fire(store: AlertStore, a: Alert) -> None:
    await store.insert(a)
    fired = await store.fire([Firing(alert_id=a.id, value=(a.threshold or 0) + 1, triggered_at=time.time())])
    assert [f.alert.id for f in fired] == [a.id]


async def _fired(store: AlertStore, n: int, first_level: float) -> list[Alert]:
    alerts = [alert(level=first_level + i) for i in range(n)]
    for a in alerts:
        await _fire(store, a)
    return alerts


async def test_each_fired_alert_gets_one_line_in_commit_order(store: AlertStore) -> None:
    lines = Lines()
    log = AlertAuditLog(store, lines.write)
    first = await _fired(store, 3, 100)
    cancelled = alert(level=200)
    await store.insert(cancelled)
    assert await store.remove("a", cancelled.id, "cancelled", time.time()) is not None
    await log.write()
    later = await _fired(store, 2, 300)
    await log.write()
    await log.write()  # nothing new: nothing written
    assert lines.ids() == [a.id for a in first + later]
    assert "PriceAbove(100.0) BTCUSDT 1h" in lines.lines[0]


async def test_a_failed_write_leaves_its_lines_for_the_next_pass(store: AlertStore) -> None:
    lines = Lines()
    log = AlertAuditLog(store, lines.write)
    alerts = await _fired(store, 2, 100)
    lines.fail_next = True
    with pytest.raises(OSError, match="disk full"):
        await log.write()
    assert lines.ids() == []
    await log.write()
    assert lines.ids() == [a.id for a in alerts]


async def test_a_pass_limited_to_fewer_rows_continues_where_it_stopped(store: AlertStore) -> None:
    log = AlertAuditLog(store, None)
    alerts = await _fired(store, 5, 100)
    got: list[str] = []
    while batch := await log.unlogged(limit=2):
        got += [e.alert_id for e in batch]
        await log.mark_logged(batch[-1].rowid)
    assert got == [a.id for a in alerts]
    await log.mark_logged(1)  # an older mark never moves it back
    assert await log.unlogged() == []


async def test_upgrade_from_the_per_row_flag_writes_exactly_the_unlogged_rows(tmp_path: Path) -> None:
    """A database at alerts step 3 with rows flagged logged and not: after step 4 the first pass
    writes only the fired rows the flag called unlogged (none twice, none lost)."""
    db = await Database.open(tmp_path / "chartgen.db")
    try:
        await db.migrate([Migrations(ALERT_MIGRATIONS.package, ALERT_MIGRATIONS.steps[:3])])
        rows = [("l1", "fired", 1), ("u1", "fired", 0), ("l2", "fired", 1), ("c1", "cancelled", 0), ("u2", "fired", 0)]
        for i, (aid, outcome, logged) in enumerate(rows):
            record = alert(level=100 + i).model_copy(update={"id": aid}).model_dump_json()
            await db.execute(
                "INSERT INTO alert_events (alert_id, principal, outcome, at, record, logged)"
                " VALUES (?, 'a', ?, ?, ?, ?)",
                (aid, outcome, float(i), record, logged),
            )
        await db.migrate(ALL_MIGRATIONS)
        lines = Lines()
        log = AlertAuditLog(AlertStore(db, QueueLimits()), lines.write)
        await log.write()
        assert lines.ids() == ["u1", "u2"]
        assert lines.lines[0] == "1970-01-01T00:00:01Z ALERT_TRIGGERED id=u1 PriceAbove(101.0) BTCUSDT 1h"
        await log.write()
        assert lines.ids() == ["u1", "u2"]
    finally:
        await db.close()
    with sqlite3.connect(tmp_path / "chartgen.db") as conn:
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "alert_events_unlogged" not in indexes


async def test_lines_spell_chartgens_floats_and_conditions(store: AlertStore) -> None:
    """Rust's float spelling (1e20, 0.85) and the indicator-signal condition, from the records."""
    signal = Alert(
        id=str(uuid.uuid4()),
        principal="a",
        symbol="ETHUSDT",
        interval="4h",
        kind="indicator_signal",
        indicator="cipher",
        indicator_name="cipher_b",
        signal="green_dot",
        created_at=time.time(),
    )
    for a in (alert(level=1e20), alert(level=0.85), signal):
        await _fire(store, a)
    log = AlertAuditLog(store, None)
    stored = [e.line for e in await log.unlogged()]
    assert "PriceAbove(1e20)" in stored[0] and "PriceAbove(0.85)" in stored[1]
    assert 'IndicatorSignal { indicator: "cipher", signal: "green_dot" } ETHUSDT 4h' in stored[2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(["fire", "cancel", "pass", "failing pass"]), max_size=30))
async def test_any_interleaving_logs_every_fired_alert_and_no_other(steps: list[str]) -> None:
    """Without a failed write every fired alert has exactly one line; a failed write may only
    repeat nothing (its lines were never written) — so exactly once holds throughout."""
    db = await Database.open(":memory:")
    try:
        await db.migrate(ALL_MIGRATIONS)
        store = AlertStore(db, QueueLimits())
        lines = Lines()
        log = AlertAuditLog(store, lines.write)
        fired: list[str] = []
        for i, step in enumerate(steps):
            if step == "fire":
                a = alert(level=100 + i)
                await _fire(store, a)
                fired.append(a.id)
            elif step == "cancel":
                a = alert(level=100 + i)
                await store.insert(a)
                await store.remove("a", a.id, "cancelled", time.time())
            else:
                lines.fail_next = step == "failing pass"
                try:
                    await log.write()
                except OSError:
                    pass
                lines.fail_next = False
        await log.write()
        assert lines.ids() == fired
    finally:
        await db.close()
