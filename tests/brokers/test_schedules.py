"""Scheduled orders with an injected clock: one order per due run through the paper broker, the
misfire policy across a stopped daemon, persistence across a restart, cancel, crash windows,
and cron/every refusals that name the field (brokers/schedules)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest

from brokers.models import Actor, OrderRejected
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import OrderStore
from brokers.paper.broker import PaperBroker
from brokers.schedules.cron import CronError, cron_trigger
from brokers.schedules.service import ScheduleService, client_id
from brokers.schedules.spec import ScheduleInputError, parse_every, parse_spec, plan
from brokers.schedules.store import ScheduleStore
from daemon import ALL_MIGRATIONS
from storage import Database
from tests.brokers.test_filters_and_positions import rules

T0 = datetime(2026, 11, 23, 7, 59, 30, tzinfo=UTC).timestamp()
BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001}
ALICE, BOB = Actor("alice"), Actor("bob")


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Audit:
    def __init__(self) -> None:
        self.lines: list[str] = []

    async def __call__(self, lines: Sequence[str]) -> None:
        self.lines.extend(lines)

    def having(self, word: str) -> list[str]:
        return [line for line in self.lines if f" {word} " in line]


class Jobs:
    """A JobHost that records what the daemon's scheduler would hold."""

    def __init__(self) -> None:
        self.jobs: dict[str, Any] = {}
        self.catch_ups: list[str] = []

    def add_schedule_job(self, job_id: str, trigger: Any, func: Any, *, catch_up: bool) -> None:
        self.jobs[job_id] = (trigger, func)
        if catch_up:
            self.catch_ups.append(job_id)

    def remove_job(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)


class Rig:
    """A database, the paper broker, the order service and the schedule service on one clock."""

    def __init__(self, db: Database, clock: Clock, limits: SafetyLimits | None = None) -> None:
        async def price(symbol: str) -> D:
            return D(65000)

        async def rules_of(symbol: str) -> Any:
            return rules() if symbol == "BTCUSDT" else None

        self.db, self.clock, self.audit, self.jobs = db, clock, Audit(), Jobs()
        self.broker = PaperBroker(db, rules=rules_of, price=price, starting_balances={"USDT": D(100000)})
        self.orders = OrderService(
            self.broker, OrderStore(db), audit=self.audit, limits=limits or SafetyLimits(), clock=clock
        )
        self.schedules = ScheduleService(
            ScheduleStore(db), self.orders, audit=self.audit, jobs=self.jobs, misfire_grace_s=300, clock=clock
        )

    async def placed(self) -> list[str]:
        rows = await self.db.fetchall("SELECT client_order_id FROM orders ORDER BY client_order_id")
        return [r[0] for r in rows]


async def rig_on(path: Path | str, clock: Clock, limits: SafetyLimits | None = None) -> Rig:
    db = await Database.open(path)
    await db.migrate(ALL_MIGRATIONS)
    rig = Rig(db, clock, limits)
    await rig.broker.start()
    return rig


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = await rig_on(":memory:", Clock())
    try:
        yield r
    finally:
        await r.db.close()


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# --- spec ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 25 * * *", "cron field 'hour' (2nd): 25 is out of range 0-23"),
        ("61 * * * *", "cron field 'minute' (1st): 61 is out of range 0-59"),
        ("0 0 0 * *", "cron field 'day' (3rd): 0 is out of range 1-31"),
        ("0 0 * 13 *", "cron field 'month' (4th): 13 is out of range 1-12"),
        ("0 8 * * 8", "cron field 'day_of_week' (5th): 8 is out of range 0-7"),
        ("*/0 * * * *", "cron field 'minute' (1st): step must be at least 1"),
        ("x * * * *", "cron field 'minute' (1st): 'x' is not a number"),
        ("0 5-1 * * *", "cron field 'hour' (2nd): range '5-1' runs backwards"),
        ("* * * *", "cron needs five fields"),
        ("* * * * * *", "cron needs five fields"),
        ("", "cron needs five fields"),
    ],
)
def test_a_cron_string_that_is_not_five_valid_fields_is_refused_naming_the_field(cron: str, message: str) -> None:
    with pytest.raises(ScheduleInputError) as err:
        parse_spec({"cron": cron})
    assert message in str(err.value)


def test_cron_weekdays_are_crontabs_and_day_or_weekday_fires_like_vixie_cron() -> None:
    monday = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday
    assert cron_trigger("0 8 * * 1").get_next_fire_time(None, monday) == monday.replace(hour=8)
    assert cron_trigger("0 8 * * 0").get_next_fire_time(None, monday) == datetime(2026, 11, 29, 8, tzinfo=UTC)
    assert cron_trigger("0 8 * * 7").get_next_fire_time(None, monday) == datetime(2026, 11, 29, 8, tzinfo=UTC)
    either = cron_trigger("0 0 25 * 5")  # the 25th or a Friday, whichever comes first
    assert either.get_next_fire_time(None, monday) == datetime(2026, 11, 25, tzinfo=UTC)
    with pytest.raises(CronError):
        cron_trigger("0 8 * * mon-sun-tue")


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("15m", 900), ("4h", 14400), ("7d", 604800), ("1w", 604800)]
)
def test_every_reads_a_number_and_a_unit(text: str, seconds: int) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"every": "0s"}, "every must be at least 1s"),
        ({"every": "-5s"}, "every must be a whole number and a unit"),
        ({"every": "1.5h"}, "every must be a whole number and a unit"),
        ({"every": "soon"}, "every must be a whole number and a unit"),
        ({"every": 30}, "every must be a string"),
        ({"every": "400d"}, "every must be at most 365d"),
        ({}, "give exactly one of cron"),
        ({"cron": "0 8 * * 1", "every": "4h"}, "give exactly one of cron"),
        ({"every": "1h", "max_runs": 0}, "max_runs must be a whole number from 1"),
        ({"every": "1h", "max_runs": True}, "max_runs must be a whole number from 1"),
        ({"every": "1h", "start_at": "tomorrow"}, "start_at must be an ISO 8601 time"),
        ({"every": "1h", "start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"}, "end_at must be after"),
    ],
)
def test_bad_timing_is_refused_naming_the_field(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ScheduleInputError, match=message):
        parse_spec(args)


def test_the_client_order_id_is_deterministic_short_and_exchange_safe() -> None:
    due = datetime(2026, 11, 23, 8, tzinfo=UTC)
    cid = client_id("s-0123456789ab", due)
    assert cid == client_id("s-0123456789ab", due) == "cg-s-0123456789ab-1795420800"
    assert len(cid) <= 36


# --- the misfire rule (pure) --------------------------------------------------------------
def test_plan_runs_the_latest_due_time_within_grace_and_coalesces_older_ones() -> None:
    trig = parse_spec({"every": "1h"}).trigger(at("2026-11-23T00:00:00+00:00") - 3600)
    after = datetime(2026, 11, 22, 23, tzinfo=UTC)  # last completed time
    p = plan(trig, after, datetime(2026, 11, 23, 3, 2, tzinfo=UTC), 300)
    assert (p.kind, p.due, p.first_due, p.coalesced) == (
        "run", datetime(2026, 11, 23, 3, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC), True,
    )  # fmt: skip
    late = plan(trig, after, datetime(2026, 11, 23, 3, 6, tzinfo=UTC), 300)
    assert (late.kind, late.due) == ("skip", datetime(2026, 11, 23, tzinfo=UTC))
    assert (
        plan(trig, datetime(2026, 11, 23, 3, tzinfo=UTC), datetime(2026, 11, 23, 3, 30, tzinfo=UTC), 300).kind == "idle"
    )


# --- runs through the paper broker ----------------------------------------------------------
async def test_five_due_runs_place_exactly_five_orders_one_per_run(rig: Rig) -> None:
    made = await rig.schedules.create("alice", {**BUY, "cron": "0 8 * * *", "max_runs": 5})
    sid = made["schedule_id"]
    assert made["next_run_at"] == "2026-11-23T08:00:00Z"
    assert await rig.schedules.fire(sid) == "idle"  # 07:59:30: nothing due yet
    outcomes = []
    for day in range(5):
        rig.clock.now = at(f"2026-11-{23 + day}T08:00:01+00:00")
        outcomes.append(await rig.schedules.fire(sid))
        assert await rig.schedules.fire(sid) == ("idle" if day < 4 else "inactive")  # a second firing adds nothing
    assert outcomes == ["run", "run", "run", "run", "finished"]
    want = [client_id(sid, datetime(2026, 11, 23 + d, 8, tzinfo=UTC)) for d in range(5)]
    assert await rig.placed() == want
    rows = [await rig.orders.store.get(c) for c in want]
    assert [row.status if row else None for row in rows] == ["FILLED"] * 5
    assert len(rig.audit.having("SCHEDULE-RUN")) == 5 and len(rig.audit.having("SUBMITTED")) == 5
    assert rig.audit.having("SCHEDULE-FINISHED") and f"schedule:{sid}" not in rig.jobs.jobs
    [listed] = await rig.schedules.listing(ALICE)
    assert (listed["status"], listed["runs_done"], listed["next_run_at"]) == ("finished", 5, None)


async def test_a_daemon_down_across_three_times_runs_once_within_grace_else_skips(tmp_path: Path) -> None:
    clock = Clock(at("2026-11-23T07:00:00+00:00"))
    first = await rig_on(tmp_path / "a.db", clock)
    sid = (await first.schedules.create("alice", {**BUY, "every": "1h"}))["schedule_id"]
    clock.now = at("2026-11-23T08:00:00+00:00")
    assert await first.schedules.fire(sid) == "run"
    await first.db.close()  # the daemon stops; 09:00, 10:00 and 11:00 pass
    clock.now = at("2026-11-23T11:03:00+00:00")  # back within the grace of 11:00
    second = await rig_on(tmp_path / "a.db", clock)
    assert await second.schedules.start() == 1 and second.jobs.catch_ups == [f"schedule:{sid}"]
    assert await second.schedules.fire(sid) == "run"  # the catch-up firing
    assert await second.placed() == [client_id(sid, datetime(2026, 11, 23, h, tzinfo=UTC)) for h in (8, 11)]
    assert "due=2026-11-23T09:00:00Z..2026-11-23T11:00:00Z" in second.audit.having("SCHEDULE-COALESCED")[0]
    await second.db.close()

    clock.now = at("2026-11-23T14:30:00+00:00")  # down across 12:00, 13:00, 14:00; 14:00 is 30 min old
    third = await rig_on(tmp_path / "a.db", clock)
    await third.schedules.start()
    assert await third.schedules.fire(sid) == "skipped"
    [skip] = third.audit.having("SCHEDULE-SKIPPED")
    assert f"id={sid} due=2026-11-23T12:00:00Z reason=missed by" in skip
    assert len(await third.placed()) == 2
    clock.now = at("2026-11-23T15:00:00+00:00")  # the schedule goes on
    assert await third.schedules.fire(sid) == "run"
    assert len(await third.placed()) == 3
    await third.db.close()


async def test_schedules_survive_a_restart_and_cancel_stops_them(tmp_path: Path) -> None:
    clock = Clock()
    first = await rig_on(tmp_path / "b.db", clock)
    sid = (await first.schedules.create("alice", {**BUY, "cron": "*/5 * * * *"}))["schedule_id"]
    await first.db.close()
    second = await rig_on(tmp_path / "b.db", clock)
    assert await second.schedules.start() == 1 and f"schedule:{sid}" in second.jobs.jobs
    assert second.jobs.catch_ups == []  # nothing was due
    [listed] = await second.schedules.listing(ALICE)
    assert listed["next_run_at"] == "2026-11-23T08:00:00Z" and listed["cron"] == "*/5 * * * *"
    assert await second.schedules.listing(BOB) == []
    assert len(await second.schedules.listing(Actor("root", admin=True))) == 1
    with pytest.raises(ScheduleInputError, match="schedule not found"):
        await second.schedules.cancel(BOB, sid)  # another's schedule is an unknown one
    assert (await second.schedules.cancel(ALICE, sid))["ok"] is True
    assert f"schedule:{sid}" not in second.jobs.jobs
    clock.now = at("2026-11-23T08:00:01+00:00")
    assert await second.schedules.fire(sid) == "inactive"  # a firing already queued does nothing
    assert await second.placed() == []
    with pytest.raises(ScheduleInputError, match="already cancelled"):
        await second.schedules.cancel(ALICE, sid)
    await second.db.close()
    third = await rig_on(tmp_path / "b.db", clock)
    assert await third.schedules.start() == 0
    await third.db.close()


async def test_a_crash_after_the_intent_is_recorded_never_gives_a_second_order(rig: Rig) -> None:
    sid = (await rig.schedules.create("alice", {**BUY, "every": "1h"}))["schedule_id"]
    rig.clock.now += 3600
    sent: list[str] = []
    real_place = rig.broker.place

    async def crash(req: Any) -> Any:
        sent.append(req.client_order_id)
        raise SystemExit("power cut before the order leaves")  # intent and progress committed

    rig.broker.place = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await rig.schedules.fire(sid)
    rig.broker.place = real_place  # type: ignore[method-assign]
    # the progress was committed before sending: the same time is not run again
    assert await rig.schedules.fire(sid) == "idle"
    # had progress not been committed (crash between intent and progress), the run finds its id used
    await rig.db.execute("UPDATE schedules SET last_fire_at = NULL, runs_done = 0")
    assert await rig.schedules.fire(sid) == "run"
    assert "outcome=already placed" in rig.audit.having("SCHEDULE-RUN")[-1]
    assert len(await rig.placed()) == 1 and len(sent) == 1


async def test_a_duplicate_answer_from_the_exchange_is_not_a_new_failure(rig: Rig) -> None:
    sid = (await rig.schedules.create("alice", {**BUY, "every": "1h"}))["schedule_id"]
    rig.clock.now += 3600

    async def duplicate(req: Any) -> Any:
        raise OrderRejected("Duplicate order sent.")

    rig.broker.place = duplicate  # type: ignore[method-assign]
    assert await rig.schedules.fire(sid) == "run"
    assert "outcome=already placed" in rig.audit.having("SCHEDULE-RUN")[-1]
    assert not rig.audit.having("SCHEDULE-REFUSED")


async def test_refused_runs_are_logged_and_not_retried() -> None:
    r = await rig_on(":memory:", Clock(), SafetyLimits(max_order_notional=D(100), max_daily_notional=D(150)))
    try:
        sid = (await r.schedules.create("alice", {**BUY, "every": "1h"}))["schedule_id"]  # 65 USDT a run
        outcomes = []
        for _ in range(3):
            r.clock.now += 3600
            outcomes.append(await r.schedules.fire(sid))
        assert outcomes == ["run", "run", "refused"]
        [refused] = r.audit.having("SCHEDULE-REFUSED")
        assert "daily limit" in refused
        assert await r.schedules.fire(sid) == "idle"  # the refused time is not retried
        assert len(await r.placed()) == 2
    finally:
        await r.db.close()


async def test_creation_checks_the_order_without_sending(rig: Rig) -> None:
    with pytest.raises(ScheduleInputError, match="client_order_id cannot be given"):
        await rig.schedules.create("alice", {**BUY, "every": "1h", "client_order_id": "x"})
    with pytest.raises(Exception, match="not a tradable symbol"):
        await rig.schedules.create("alice", {**BUY, "symbol": "NOPEUSDT", "every": "1h"})
    with pytest.raises(ScheduleInputError, match="LOT_SIZE"):
        await rig.schedules.create("alice", {**BUY, "quantity": 0.000015, "every": "1h"})
    with pytest.raises(ScheduleInputError, match=r"(?i)notional"):
        await rig.schedules.create("alice", {**BUY, "quantity": 0.00001, "every": "1h"})
    with pytest.raises(ScheduleInputError, match="never fires"):
        await rig.schedules.create("alice", {**BUY, "cron": "0 0 30 2 *"})
    assert await rig.placed() == [] and rig.jobs.jobs == {}


async def test_insufficient_balance_and_a_halt_are_refusals_written_to_trades_log() -> None:
    from brokers.halt import HaltStore
    from brokers.halt_authority import HaltAuthority

    rig = await rig_on(":memory:", Clock(), SafetyLimits(max_order_notional=None, max_daily_notional=None))
    sid = (await rig.schedules.create("alice", {**BUY, "quantity": 1, "every": "1h"}))["schedule_id"]
    rig.clock.now += 3600
    assert await rig.schedules.fire(sid) == "run"  # 65000 of the 100000 USDT
    rig.clock.now += 3600
    assert await rig.schedules.fire(sid) == "refused"
    [short] = rig.audit.having("SCHEDULE-REFUSED")
    assert "insufficient" in short.lower()
    await HaltStore(rig.db).halt(reason="test", by=HaltAuthority.operator("cli"), now=rig.clock.now)
    rig.clock.now += 3600
    assert await rig.schedules.fire(sid) == "refused"
    assert "trading is halted by the operator" in rig.audit.having("SCHEDULE-REFUSED")[-1]
    rig.clock.now += 3600
    assert await rig.schedules.fire(sid) == "refused"  # each time refused once, none retried
    [row] = await rig.schedules.listing(ALICE)
    assert row["runs_done"] == 4 and len(await rig.placed()) == 2  # the balance refusal was sent and rejected
    await rig.db.close()


async def test_a_schedule_whose_end_passed_while_down_is_skipped_and_finished(rig: Rig) -> None:
    sid = (await rig.schedules.create("alice", {**BUY, "every": "1h", "end_at": "2026-11-23T10:00:00Z"}))["schedule_id"]
    rig.clock.now = at("2026-11-23T12:00:00+00:00")  # 08:59:30 and 09:59:30 were missed long ago
    assert await rig.schedules.fire(sid) == "finished"
    assert rig.audit.having("SCHEDULE-SKIPPED") and rig.audit.having("SCHEDULE-FINISHED")
    [row] = await rig.schedules.listing(ALICE)
    assert (row["status"], row["runs_done"]) == ("finished", 0) and await rig.placed() == []
