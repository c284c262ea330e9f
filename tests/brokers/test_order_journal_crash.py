"""SIGKILL the order procedure at random moments, on both journals: a node's SQLite and a cluster's PostgreSQL.

A driver process (testkit/order_driver.py) runs the one procedure on a journal against the exchange
simulator, which runs in this test process and survives the kills: it records market buys (every other one
with a bracket), sends each once and releases the exits of the filled ones.  Each run is killed with
SIGKILL after a line of its progress chosen by a seeded random generator — before a record, mid-send,
between an entry's fill and its exit — and some runs lose an answer (the simulator accepts the order and
answers 503).  A fresh driver on the same journal then settles what the killed ones left.  The exchange's
own orders are the oracle: every intent ends placed or rejected, none is lost, no client id reached the
exchange twice, placed ⇔ on the exchange, and every filled entry's exit is on the exchange exactly once.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from brokers.orders.brackets import bracket_ids
from daemon import CLUSTER_MIGRATIONS
from simulator import HttpErrorFault, OrderFault, RunningSimulator, start_simulator
from storage import PostgresDatabase
from testkit.daemon_proc import clean_env
from testkit.order_driver import SYMBOL
from testkit.secret_scan import daemon_log_file

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
COUNT = 4
SEED = 37


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    """The simulator on the real clock (it refuses a request older than its recvWindow), funded for every run."""
    running = await start_simulator(
        clock="real", symbols=[SYMBOL], balances={"USDT": Decimal(10_000_000), "BTC": Decimal(0)}
    )
    running.exchange.count_filters.max_num_algo_orders = 100  # every run's exits rest at once (Binance's is 5)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.servers)])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(the journal's kind, its target): a SQLite file, or a migrated PostgreSQL database's DSN."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "orders.db")
    dsn = await request.getfixturevalue("postgres").new_database()
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1)
    try:
        await db.migrate(CLUSTER_MIGRATIONS)
    finally:
        await db.close()
    return "postgres", dsn


async def _driver(journal: tuple[str, str], sim: RunningSimulator, mode: str, run: int) -> asyncio.subprocess.Process:
    """A driver process; its log goes to the session's log folder (scanned for secrets)."""
    log = daemon_log_file(f"order-driver-{mode}")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "testkit.order_driver", *journal, sim.url, mode, str(run),
            str(COUNT if mode == "order" else 0), cwd=ROOT, env=clean_env(), stdout=asyncio.subprocess.PIPE,
            stderr=log, start_new_session=True,
        )  # fmt: skip
    finally:
        log.close()  # the child has its own descriptor


async def _lines(proc: asyncio.subprocess.Process) -> list[str]:
    """A driver's progress lines, to its end."""
    assert proc.stdout is not None
    async with asyncio.timeout(120):
        lines = [line.decode().strip() async for line in proc.stdout]
        await proc.wait()
    return lines


PLANS = ("line", "held", "lost", "never", "never_exit")
ORDER_POST, OCO_POST = "/api/v3/order", "/api/v3/orderList/oco"


@dataclass
class Run:
    """One order driver's run and when it is killed (the plan is one of :data:`PLANS`, its moment drawn
    from the seeded generator):

    - ``line``: after its ``kill_after``-th progress line (between two steps of the procedure);
    - ``held``: once the exchange took an order whose answer it holds back (armed after ``at`` intents
      were answered): the intent is in doubt, on the exchange, its answer never recorded;
    - ``lost``: once the exchange took an order and answered 503 (armed after ``at``): killed while the
      lost answer is being recorded or looked up;
    - ``never``: once an order was answered 503 *before* the exchange took it (armed after ``at``): in
      doubt, and absent — the journal's rule for an intent the exchange never got;
    - ``never_exit``: the same for the run's first bracket exit (its OCO)."""

    plan: str
    at: int
    kill_after: int
    lines: list[str] = field(default_factory=list)
    killed_in_doubt: bool = False

    def answered(self) -> int:
        """Intents answered so far: a node's ``answered`` lines, a cluster's ``stepped N``."""
        n = 0
        for line in self.lines:
            word, _, rest = line.partition(" ")
            n += 1 if word == "answered" else int(rest) if word == "stepped" else 0
        return n

    async def drive(self, proc: asyncio.subprocess.Process, sim: RunningSimulator) -> None:
        faults = sim.exchange.faults
        faults.order_faults.clear()
        faults.http_errors.clear()
        armed = False

        def arm() -> None:
            nonlocal armed
            if self.plan == "line" or armed or self.answered() < self.at:
                return
            if self.plan in ("held", "lost"):  # the next order the exchange takes
                kind = "timeout" if self.plan == "held" else "error_after_accept"
                faults.order_faults.append(OrderFault(kind=kind, count=1, delay_s=30.0))
            else:  # the next order (or OCO) request, refused 503 before the exchange sees it
                path = ORDER_POST if self.plan == "never" else OCO_POST
                faults.http_errors.append(HttpErrorFault(status=503, retry_after=0, count=1, path=path))
            armed = True

        async def kill_once_taken() -> None:  # polls the simulator's state, which the driver's requests change
            while not (armed and not faults.order_faults and not faults.http_errors):  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            proc.kill()
            self.killed_in_doubt = True

        arm()
        killer = asyncio.create_task(kill_once_taken()) if self.plan != "line" else None
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(120):
                async for raw in proc.stdout:
                    self.lines.append(raw.decode().strip())
                    if self.plan == "line" and len(self.lines) >= self.kill_after:
                        proc.kill()
                        break
                    arm()
                await proc.wait()
        finally:
            if killer is not None:
                killer.cancel()
                await asyncio.gather(killer, return_exceptions=True)
        faults.order_faults.clear()
        faults.http_errors.clear()


def _confirmed(lines: list[str]) -> set[str]:
    """The intents a driver said it recorded (a cluster's front) or got an answer for (a node)."""
    return {line.split()[1] for line in lines if line.split()[0] in ("recorded", "answered")}


async def test_sigkill_mid_procedure_never_doubles_or_loses_an_intent(
    sim: RunningSimulator, journal: tuple[str, str]
) -> None:
    rng = random.Random(SEED)
    confirmed: set[str] = set()
    plans = [*PLANS, *PLANS]
    plans.remove("never")
    rng.shuffle(plans)
    # the first run's first order is refused before the exchange sees it (armed before the start: no lookup
    # of an earlier run's intents can take the fault), then the driver is killed — in doubt, and absent
    runs = [Run("never", 0, 0), *(Run(plan, rng.randint(0, COUNT - 1), rng.randint(1, 3 * COUNT)) for plan in plans)]
    for i, run in enumerate(runs):
        driver = await _driver(journal, sim, "order", i)
        await run.drive(driver, sim)
        assert driver.returncode in (0, -signal.SIGKILL), run.lines  # finished, or killed: never failed
        confirmed |= _confirmed(run.lines)
    kills = sum(1 for r in runs if r.lines[-1:] != ["done"])

    settler = await _driver(journal, sim, "settle", len(runs))
    lines = await _lines(settler)
    assert settler.returncode == 0, lines
    summary: dict[str, Any] = orjson.loads(next(line for line in lines if line.startswith("summary ")).split(" ", 1)[1])
    ends: dict[str, str] = summary["intents"]
    exits: dict[str, dict[str, Any]] = summary["exits"]

    assert kills >= len(runs) // 2, "most runs should be killed before they finish"
    assert runs[0].killed_in_doubt and sum(r.killed_in_doubt for r in runs) >= 3, [r.plan for r in runs]
    on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
    assert max(on_exchange.values()) == 1, "a client id reached the exchange twice"
    assert confirmed <= set(ends), "an intent the driver recorded was lost"
    assert {cid for cid in on_exchange if cid.startswith("r")} <= set(ends), "an exchange order is not in the journal"
    for cid, end in ends.items():
        assert end in ("placed", "rejected"), (cid, end)
        assert (end == "placed") == (on_exchange[cid] == 1), (cid, end, on_exchange[cid])
    assert ends["r0-0"] == "rejected" and exits[bracket_ids("r0-0")[0]]["state"] == "void", summary
    assert "placed" in ends.values() and exits
    for list_id, exit_ in exits.items():
        entry = exit_["entry"]
        _, tp_id, sl_id = bracket_ids(entry)
        if ends[entry] == "placed":  # a market entry: filled, so its exit protects what it bought
            assert exit_["state"] == "placed", (list_id, exit_)
            assert (on_exchange[tp_id], on_exchange[sl_id]) == (1, 1), (list_id, exit_)
        else:
            assert exit_["state"] == "void", (list_id, exit_)
            assert (on_exchange[tp_id], on_exchange[sl_id]) == (0, 0), (list_id, exit_)


async def _settled(journal: tuple[str, str], sim: RunningSimulator, run: int) -> dict[str, Any]:
    settler = await _driver(journal, sim, "settle", run)
    lines = await _lines(settler)
    assert settler.returncode == 0, lines
    return dict(orjson.loads(next(line for line in lines if line.startswith("summary ")).split(" ", 1)[1]))


async def _switch(journal: tuple[str, str], sim: RunningSimulator, mode: str) -> None:
    proc = await _driver(journal, sim, mode, 0)
    assert await _lines(proc) == [mode] and proc.returncode == 0


async def test_a_halt_across_a_killed_driver_holds_its_exit_until_the_resume(
    sim: RunningSimulator, journal: tuple[str, str]
) -> None:
    """A bracket's entry is taken by the exchange and the driver killed before its answer; trading is
    halted; the next driver settles the entry (filled) but its exit waits — nothing reaches the exchange
    while halted — and the intents not yet admitted are refused; after the resume the exit goes out once."""
    run = Run("held", at=0, kill_after=0)  # armed before the start: the first intent, a bracket's market entry
    driver = await _driver(journal, sim, "order", 0)
    await run.drive(driver, sim)
    assert run.killed_in_doubt and driver.returncode == -signal.SIGKILL, run.lines
    entry = "r0-0"
    list_id, tp_id, sl_id = bracket_ids(entry)
    await _switch(journal, sim, "halt")

    held = await _settled(journal, sim, 1)
    on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
    assert (held["intents"][entry], on_exchange[entry]) == ("placed", 1), held
    assert held["exits"][list_id]["state"] == "waiting", held
    assert (on_exchange[tp_id], on_exchange[sl_id]) == (0, 0), "an exit reached the exchange while halted"

    await _switch(journal, sim, "resume")
    resumed = await _settled(journal, sim, 2)
    on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
    assert resumed["exits"][list_id]["state"] == "placed", resumed
    assert (on_exchange[tp_id], on_exchange[sl_id]) == (1, 1), on_exchange
    assert max(on_exchange.values()) == 1, "a client id reached the exchange twice"
    for cid, end in resumed["intents"].items():
        assert end in ("placed", "rejected") and (end == "placed") == (on_exchange[cid] == 1), (cid, end)
