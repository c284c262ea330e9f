"""The one bracket-exit procedure (brokers/orders/exits.py) driven directly over BOTH journals: a single
node's SQLite journal (brokers/orders/sqlite_journal.py, no server) and a cluster's PostgreSQL journal
(cluster/pg_order_journal.py, fenced by a real lease) — the same behaviour suite on each, as the alert
store's suite runs on both stores.  The sender is a stand-in that counts sends and answers as told; the
journal's own rows are the oracle.

Covered: void when the entry filled nothing; sized to what the entry acquired (executed less the
base-asset commission, on the LOT_SIZE step); two releases racing send once; an order-rate refusal
goes back to waiting and is not sent before Retry-After, then once; a refusal is ``rejected`` and
logged at error level, never sent again; while halted nothing is claimed, after the resume it is sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from brokers import (
    HALT_MIGRATIONS,
    ORDER_MIGRATIONS,
    BracketPlan,
    ExchangeOrder,
    ExitJournal,
    ExitProcedure,
    ExitSent,
    Fill,
    HaltAuthority,
    HaltStore,
    ListRequest,
    ListStore,
    OrderRequest,
    OrderStore,
    RateLimitedError,
    SqliteExitJournal,
    SymbolRules,
    exit_quantity,
    exit_request,
)
from cluster.lease import Leases
from cluster.orders import LIST_REQUEST_JSON, ORDER_JSON, REQUEST_JSON, lease_name
from cluster.pg_order_journal import PgOrderJournal
from simulator import symbol_info
from storage import Database, PostgresDatabase

D = Decimal
ACCOUNT = "main"
RULES = SymbolRules.from_exchange_info(symbol_info("BTCUSDT", 65000.0))
BRACKET: dict[str, Decimal | None] = {"take_profit": D(90000), "stop_loss": D(50000), "stop_limit": None}
JOURNALS = ["sqlite", pytest.param("postgres", marks=pytest.mark.servers)]


@dataclass
class Sender:
    """The exit procedure's sender: records each send and answers with the next outcome (placed by default);
    ``answer`` records the outcome where the journal's own sender would (the cluster's leader)."""

    answer: Callable[[ListRequest, ExitSent], Any]
    outcomes: list[ExitSent] = field(default_factory=list)
    sent: list[ListRequest] = field(default_factory=list)

    async def send_exit(self, req: ListRequest) -> ExitSent:
        self.sent.append(req)
        await asyncio.sleep(0)  # a real send yields: a racing release runs meanwhile
        out = self.outcomes.pop(0) if self.outcomes else ExitSent("placed")
        await self.answer(req, out)
        return out


async def _rules(symbol: str) -> SymbolRules | None:
    return RULES


class Rig:
    """One journal kind, with what a test needs: record a done entry and its waiting exit, read an exit's
    state (waiting, claimed, placed, rejected, void), halt and resume, let time pass."""

    journal: ExitJournal
    sender: Sender

    def procedure(self) -> ExitProcedure:
        return ExitProcedure(self.journal, self.sender, _rules)

    async def entry_done(self, cid: str, status: str, executed: Decimal, fee: Decimal) -> ListRequest:
        raise NotImplementedError

    async def state(self, list_id: str) -> str:
        raise NotImplementedError

    async def halted(self, on: bool) -> None:
        raise NotImplementedError

    async def until_due(self, seconds: float) -> None:
        """Let ``seconds`` pass on the journal's clock (the Retry-After a refusal gave)."""
        raise NotImplementedError


def _entry(cid: str) -> OrderRequest:
    return OrderRequest("BTCUSDT", "BUY", "MARKET", cid, quantity=D("0.01"), owner="alice")


def _order(cid: str, status: str, executed: Decimal, fee: Decimal) -> ExchangeOrder:
    fills = (Fill(1, "BTCUSDT", "BUY", cid, executed, D(65000), fee, "BTC", 1),) if executed > 0 else ()
    return ExchangeOrder(
        "BTCUSDT", cid, status, "BUY", "MARKET", D("0.01"), executed, executed * 65000, fills=fills
    )  # fmt: skip


class SqliteRig(Rig):
    def __init__(self, db: Database) -> None:
        self.db = db
        self.now = 1_000_000.0
        self.orders = OrderStore(db)
        self.lists = ListStore(db)
        self.journal = SqliteExitJournal(
            self.orders, self.lists, "binance", clock=lambda: self.now, in_flight=lambda _id: False
        )
        self.sender = Sender(self._answer)

    async def _answer(self, req: ListRequest, out: ExitSent) -> None:
        return None  # a node's journal records the outcome itself

    async def entry_done(self, cid: str, status: str, executed: Decimal, fee: Decimal) -> ListRequest:
        entry = _entry(cid)
        exit_oco = exit_request(entry, BRACKET, working=False)
        plan = BracketPlan(
            exit_oco.list_client_id, "SELL", D("0.01"), D(90000), D(50000), None, D(900), D(500)
        )  # fmt: skip
        admitted = await self.lists.admit_bracket(
            "binance", entry, D(650), plan, self.now, daily_limit=None, since=0.0
        )  # fmt: skip
        assert admitted.recorded
        await self.orders.apply("binance", _order(cid, status, executed, fee), self.now)
        return exit_oco

    async def state(self, list_id: str) -> str:
        row = await self.lists.get(list_id)
        assert row is not None and row.bracket_state is not None
        return row.bracket_state

    async def halted(self, on: bool) -> None:
        halts = HaltStore(self.db)
        if on:
            await halts.halt(reason="test", by=HaltAuthority.operator("cli"), now=self.now)
        else:
            await halts.resume(by=HaltAuthority.operator("cli"))

    async def until_due(self, seconds: float) -> None:
        self.now += seconds


class PgRig(Rig):
    def __init__(self, db: PostgresDatabase, journal: PgOrderJournal) -> None:
        self.db = db
        self.journal = journal
        self.sender = Sender(self._answer)

    async def _answer(self, req: ListRequest, out: ExitSent) -> None:
        """What the leader's send records (cluster/order_leader.py ``send_exit``)."""
        if out.outcome in ("placed", "refused"):
            state = "placed" if out.outcome == "placed" else "rejected"
            body = {"list": None} if out.outcome == "placed" else {"error": out.error}
            await self.db.execute(
                "UPDATE cluster_order_intents SET state = $2, answer = $3, answered_at = clock_timestamp()"
                " WHERE client_order_id = $1 AND state = 'sending'",
                req.list_client_id,
                state,
                orjson.dumps(body).decode(),
            )

    async def entry_done(self, cid: str, status: str, executed: Decimal, fee: Decimal) -> ListRequest:
        entry = _entry(cid)
        exit_oco = exit_request(entry, BRACKET, working=False)
        order = ORDER_JSON.dump_python(_order(cid, status, executed, fee))
        await self.db.execute(
            "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, sender_token, answer,"
            " claimed_at, answered_at) VALUES ($1, $2, 'alice', $3, 'placed', 0, $4, clock_timestamp(),"
            " clock_timestamp())",
            cid,
            ACCOUNT,
            REQUEST_JSON.dump_json(entry).decode(),
            orjson.dumps({"order": order}, default=str).decode(),
        )
        await self.db.execute(
            "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state, kind,"
            " entry_client_order_id) VALUES ($1, $2, 'alice', $3, 'waiting', 'list', $4)",
            exit_oco.list_client_id,
            ACCOUNT,
            LIST_REQUEST_JSON.dump_json(exit_oco).decode(),
            cid,
        )
        return exit_oco

    async def state(self, list_id: str) -> str:
        state = await self.db.fetchval("SELECT state FROM cluster_order_intents WHERE client_order_id = $1", list_id)
        return "claimed" if state == "sending" else str(state)

    async def halted(self, on: bool) -> None:
        await self.db.execute(
            "INSERT INTO cluster_halt (account, halted) VALUES ($1, $2)"
            " ON CONFLICT (account) DO UPDATE SET halted = EXCLUDED.halted",
            ACCOUNT,
            on,
        )

    async def until_due(self, seconds: float) -> None:
        """PostgreSQL's clock is the journal's: wait (bounded) until it has passed the not-before."""
        deadline = time.monotonic() + seconds + 5.0
        due = (
            "SELECT count(*) FROM cluster_order_intents"
            " WHERE (answer::jsonb ->> 'not_before')::float8 >= extract(epoch FROM clock_timestamp())"
        )
        while await self.db.fetchval(due):
            assert time.monotonic() < deadline, "PostgreSQL's clock never passed the not-before"
            await asyncio.sleep(0.05)


@pytest.fixture(params=JOURNALS)
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    if request.param == "sqlite":
        db = await Database.open(":memory:")
        await db.migrate([ORDER_MIGRATIONS, HALT_MIGRATIONS])
        try:
            yield SqliteRig(db)
        finally:
            await db.close()
        return
    from daemon import CLUSTER_MIGRATIONS

    server = request.getfixturevalue("postgres")
    pg = await PostgresDatabase.open(await server.new_database())
    await pg.migrate(CLUSTER_MIGRATIONS)
    lease = await Leases(pg).acquire(lease_name(ACCOUNT), "m", 30.0)
    assert lease is not None

    async def record(cid: str, token: int, state: Any, body: dict[str, Any]) -> bool:
        return True

    try:
        yield PgRig(pg, PgOrderJournal(pg, ACCOUNT, lease, record=record))
    finally:
        await pg.close()


async def test_an_entry_that_filled_nothing_voids_its_exit(rig: Rig) -> None:
    exit_oco = await rig.entry_done("e-none", "CANCELED", D(0), D(0))
    with capture_logs() as logs:
        assert await rig.procedure().release_due() == 1
    assert await rig.state(exit_oco.list_client_id) == "void" and rig.sender.sent == []
    assert [e["list_client_id"] for e in logs if e["event"] == "bracket_void"] == [exit_oco.list_client_id]
    assert await rig.procedure().release_due() == 0  # void is final


async def test_a_filled_entry_gets_one_exit_sized_to_what_it_acquired(rig: Rig) -> None:
    """0.004 of 0.01 filled, 0.000004 BTC commission: the exit sells 0.00399 (LOT_SIZE 0.00001)."""
    exit_oco = await rig.entry_done("e-part", "EXPIRED", D("0.004"), D("0.000004"))
    assert await rig.procedure().release_due() == 1
    (sent,) = rig.sender.sent
    want = exit_quantity(D("0.01"), entry_side="BUY", executed=D("0.004"), base_fee=D("0.000004"), step=RULES.step_size)
    assert want == D("0.00399") and sent.take_profit.quantity == sent.stop.quantity == want
    assert (sent.list_client_id, sent.stop.side) == (exit_oco.list_client_id, "SELL")
    assert await rig.state(exit_oco.list_client_id) == "placed"
    assert await rig.procedure().release_due() == 0 and len(rig.sender.sent) == 1


async def test_two_releases_racing_send_the_exit_once(rig: Rig) -> None:
    exit_oco = await rig.entry_done("e-race", "FILLED", D("0.01"), D(0))
    first, second = rig.procedure(), rig.procedure()
    await asyncio.gather(first.release_due(), second.release_due())
    assert [r.list_client_id for r in rig.sender.sent] == [exit_oco.list_client_id]
    assert await rig.state(exit_oco.list_client_id) == "placed"


async def test_an_order_rate_refusal_rearms_the_exit_until_retry_after(rig: Rig) -> None:
    exit_oco = await rig.entry_done("e-rl", "FILLED", D("0.01"), D(0))
    rig.sender.outcomes.append(
        ExitSent("rate_limited", "429 -1015", RateLimitedError("Too many new orders; -1015", 0.5))
    )
    with capture_logs() as logs:
        await rig.procedure().release_due()
    assert await rig.state(exit_oco.list_client_id) == "waiting" and len(rig.sender.sent) == 1
    (limited,) = [e for e in logs if e["event"] == "bracket_exit_rate_limited"]
    assert limited["log_level"] == "warning" and limited["retry_after_s"] == 0.5
    assert not [e for e in logs if e["event"] == "bracket_exit_refused"]
    assert await rig.procedure().release_due() == 0 and len(rig.sender.sent) == 1  # not before Retry-After
    await rig.until_due(0.5)
    assert await rig.procedure().release_due() == 1
    assert len(rig.sender.sent) == 2 and await rig.state(exit_oco.list_client_id) == "placed"


async def test_a_refused_exit_is_rejected_logged_at_error_and_never_sent_again(rig: Rig) -> None:
    exit_oco = await rig.entry_done("e-ref", "FILLED", D("0.01"), D(0))
    rig.sender.outcomes.append(ExitSent("refused", "Filter failure: MAX_NUM_ORDERS"))
    with capture_logs() as logs:
        await rig.procedure().release_due()
    assert await rig.state(exit_oco.list_client_id) == "rejected"
    (refused,) = [e for e in logs if e["event"] == "bracket_exit_refused"]
    assert refused["log_level"] == "error" and "MAX_NUM_ORDERS" in refused["error"]
    assert await rig.procedure().release_due() == 0 and len(rig.sender.sent) == 1


async def test_while_halted_nothing_is_claimed_and_after_the_resume_the_exit_goes_out(rig: Rig) -> None:
    exit_oco = await rig.entry_done("e-halt", "FILLED", D("0.01"), D(0))
    await rig.halted(True)
    await rig.procedure().release_due()
    assert await rig.state(exit_oco.list_client_id) == "waiting" and rig.sender.sent == []
    await rig.halted(False)
    await rig.procedure().release_due()
    assert await rig.state(exit_oco.list_client_id) == "placed" and len(rig.sender.sent) == 1
