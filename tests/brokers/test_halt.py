"""The halt switch: the flag in the database, order admission refusing while it is set (whoever set
it), and cancel-open cancelling every open order and order list concurrently."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest

from brokers.halt import HALTED_MESSAGE, HaltStore, TradingHalted
from brokers.halt import MIGRATIONS as HALT_MIGRATIONS
from brokers.halt_authority import HaltAuthority, HaltRefused, HolderKind
from brokers.halt_switch import HaltSwitch, Scope, cancel_open
from brokers.models import Actor, BrokerError, ExchangeList, ExchangeOrder, OrderRequest
from brokers.orders.admission import admit_in
from brokers.orders.args import OrderInputError
from brokers.orders.guard import SafetyLimits
from brokers.orders.store import MIGRATIONS as ORDER_MIGRATIONS
from storage import Database
from tests.brokers.test_order_guard import PricedBroker, make_service

LIMITS = SafetyLimits(max_order_notional=D(1_000_000), max_daily_notional=D(10_000_000))
LIMIT_BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}
OP = HaltAuthority.operator("cli", "op")
ALICE, BOB = HaltAuthority.token("alice", admin=False), HaltAuthority.token("bob", admin=False)
ROOT = HaltAuthority.token("root", admin=True)
GUARD = HaltAuthority.protection("max_drawdown")


async def _open(path: Path) -> Database:
    db = await Database.open(path)
    await db.migrate([ORDER_MIGRATIONS, HALT_MIGRATIONS])
    return db


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    """The daemon's connection and another process's (the CLI's) on one database file."""
    daemon, cli = await _open(tmp_path / "chartgen.db"), await _open(tmp_path / "chartgen.db")
    try:
        yield daemon, cli
    finally:
        await daemon.close()
        await cli.close()


async def _count(db: Database) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM orders")
    assert row is not None
    return int(row[0])


async def test_the_flag_round_trips_and_another_connection_sees_it_at_once(two: tuple[Database, Database]) -> None:
    daemon, cli = two
    mine, theirs = HaltStore(daemon), HaltStore(cli)
    assert not (await mine.read()).halted
    version = await mine.data_version()
    state = await theirs.halt(reason="exchange incident", by=OP, now=100.0, cancel_open=True)
    assert state.halted and state.cancel_seq == 1 and state.cancel_pending
    assert await mine.data_version() != version  # the daemon's cheap change detector moved
    seen = await mine.read()
    assert (seen.halted, seen.reason, seen.by, seen.since) == (True, "exchange incident", "cli:op", 100.0)
    again = await theirs.halt(reason="still", by=OP, now=200.0)
    assert again.since == 100.0 and again.reason == "still" and again.cancel_seq == 1  # halted since the first
    done = await mine.record_cancel(1, {"orders_cancelled": 3}, 150.0)
    assert not done.cancel_pending and done.cancel_result == {"orders_cancelled": 3}
    resumed = await theirs.resume(by=OP)
    assert not resumed.halted and resumed.reason is None and resumed.since is None
    assert resumed.public()["last_cancel"] == {"orders_cancelled": 3}


async def test_every_order_is_refused_with_the_exact_message_while_halted_elsewhere(
    two: tuple[Database, Database],
) -> None:
    daemon, cli = two
    broker = PricedBroker()
    service = make_service(daemon, broker, LIMITS)
    first = await service.place_order(dict(LIMIT_BUY), owner="alice")
    assert first["status"] == "Open"
    await HaltStore(cli).halt(reason="incident", by=OP, now=1.0)
    before, sent = await _count(daemon), list(broker.placed)
    with pytest.raises(TradingHalted) as refused:
        await service.place_order(dict(LIMIT_BUY), owner="alice")
    assert str(refused.value) == HALTED_MESSAGE == "trading is halted by the operator"
    assert isinstance(refused.value, OrderInputError)  # the tools show it as a clear isError text
    assert await _count(daemon) == before and broker.placed == sent  # nothing recorded, nothing sent
    await HaltStore(cli).resume(by=OP)
    assert (await service.place_order(dict(LIMIT_BUY), owner="alice"))["status"] == "Open"


async def test_admit_in_checks_the_flag_inside_the_callers_transaction(two: tuple[Database, Database]) -> None:
    """Paths that commit an intent with their own rows (alert actions, schedules) call admit_in directly."""
    daemon, cli = two
    await HaltStore(cli).halt(reason=None, by=OP, now=1.0)
    req = OrderRequest("BTCUSDT", "BUY", "MARKET", "halted-1", quantity=D("0.01"))

    def in_tx(conn: sqlite3.Connection) -> Any:
        return admit_in(conn, "fake", req, D(650), 2.0, daily_limit=None, since=0.0)

    with pytest.raises(TradingHalted, match=r"^trading is halted by the operator$"):
        await daemon.run_transaction(in_tx)
    await HaltStore(cli).resume(by=OP)
    assert (await daemon.run_transaction(in_tx)).recorded


async def test_a_database_without_the_halt_table_is_not_halted(order_db: Database) -> None:
    service = make_service(order_db, PricedBroker(), LIMITS)
    assert (await service.place_order(dict(LIMIT_BUY), owner="a"))["status"] == "Open"


class ListBroker(PricedBroker):
    """Open orders and order lists whose cancels take a while, counting how many run at once."""

    def __init__(self, orders: int, lists: int, *, with_lists: bool = True) -> None:
        super().__init__()
        self.in_flight = self.max_in_flight = 0
        self.lists: dict[str, ExchangeList] = {}
        self.fail_once: set[str] = set()
        for i in range(orders):
            cid = f"o{i}"
            self.orders[cid] = ExchangeOrder("BTCUSDT", cid, "NEW", "BUY", "LIMIT", D("0.01"), D(0), D(0), D(60000))
        for i in range(lists):
            lid = f"l{i}"
            legs = tuple(
                ExchangeOrder(
                    "BTCUSDT", f"{lid}-{leg}", "NEW", "SELL", t, D("0.01"), D(0), D(0), D(p), list_client_id=lid
                )
                for leg, t, p in (("tp", "LIMIT_MAKER", 70000), ("sl", "STOP_LOSS_LIMIT", 60000))
            )
            for leg_order in legs:
                self.orders[leg_order.client_order_id] = leg_order
            self.lists[lid] = ExchangeList("BTCUSDT", lid, "OCO", "EXEC_STARTED", "EXECUTING", legs)
        if not with_lists:
            self.open_lists = None  # type: ignore[assignment]

    async def _slow(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.005)  # a venue round trip; lets the cancels overlap
        self.in_flight -= 1

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        return [o for o in self.orders.values() if o.status == "NEW"]

    async def open_lists(self) -> list[ExchangeList]:
        return [lst for lst in self.lists.values() if not lst.done]

    async def cancel_list(self, symbol: str, list_client_id: str) -> ExchangeList:
        await self._slow()
        lst = self.lists[list_client_id]
        legs = tuple([await PricedBroker.cancel(self, symbol, o.client_order_id) for o in lst.orders])
        self.lists[list_client_id] = done = ExchangeList(symbol, list_client_id, "OCO", "ALL_DONE", "ALL_DONE", legs)
        return done

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        await self._slow()
        if client_order_id in self.fail_once:
            self.fail_once.discard(client_order_id)
            raise BrokerError("Unknown order sent.")
        if self.orders[client_order_id].status != "NEW":
            raise BrokerError("Unknown order sent.")
        order = await super().cancel(symbol, client_order_id)
        if order.client_order_id.startswith("l"):  # a leg: its list goes with it (Binance's OCO semantics)
            lid = client_order_id.split("-")[0]
            for leg in self.lists[lid].orders:
                if leg.client_order_id != client_order_id:
                    await super().cancel(symbol, leg.client_order_id)
        return order


async def test_cancel_open_cancels_30_orders_and_5_lists_with_bounded_concurrency(order_db: Database) -> None:
    broker = ListBroker(30, 5)
    service = make_service(order_db, broker, LIMITS)
    out = await cancel_open(service, concurrency=8)
    assert (out.orders, out.lists, out.failures) == (30, 5, [])
    assert await broker.open_orders() == [] and await broker.open_lists() == []
    assert 1 < broker.max_in_flight <= 8


async def test_cancel_open_without_list_support_cancels_the_legs_and_retries_what_failed(order_db: Database) -> None:
    broker = ListBroker(4, 2, with_lists=False)
    broker.fail_once = {"o1"}
    service = make_service(order_db, broker, LIMITS)
    out = await cancel_open(service)
    assert await broker.open_orders() == []
    assert out.lists == 0 and out.failures == [] and out.orders == 4 + 2  # one leg per list, then o1 on the retry


async def test_the_switch_halts_cancels_records_and_audits(two: tuple[Database, Database]) -> None:
    daemon, _ = two
    broker = ListBroker(3, 1)
    lines: list[str] = []

    async def audit(new: Sequence[str]) -> None:
        lines.extend(new)

    switch = HaltSwitch(HaltStore(daemon), make_service(daemon, broker, LIMITS), audit=audit)
    answer = await switch.halt(reason="fat finger", by=ROOT, cancel_open=True)
    assert answer["halted"] and answer["cancel_open"]["orders_cancelled"] == 3
    assert answer["cancel_open"]["lists_cancelled"] == 1
    assert switch.note() is not None and switch.note().startswith("HALTED by admin token mcp:root: fat finger")  # type: ignore[union-attr]
    assert lines[0].endswith("HALT by mcp:root: fat finger")
    assert lines[-1].endswith("HALT cancel-open: 3 orders, 1 lists cancelled")
    assert not (await HaltStore(daemon).read()).cancel_pending
    assert not (await switch.resume(by=ROOT))["halted"] and switch.note() is None


async def test_the_watch_carries_out_a_request_written_by_another_process(two: tuple[Database, Database]) -> None:
    daemon, cli = two
    broker = ListBroker(5, 0)
    done = asyncio.Event()

    async def audit(new: Sequence[str]) -> None:
        if any("HALT cancel-open" in line for line in new):
            done.set()

    switch = HaltSwitch(HaltStore(daemon), make_service(daemon, broker, LIMITS), audit=audit, poll_s=0.01)
    watch = asyncio.create_task(switch.watch())
    try:
        state = await HaltStore(cli).halt(reason="cli", by=OP, now=1.0, cancel_open=True)
        async with asyncio.timeout(5):
            await done.wait()
        final = await HaltStore(cli).read()
        assert final.cancel_done_seq == state.cancel_seq and final.cancel_result is not None
        assert final.cancel_result["orders_cancelled"] == 5 and await broker.open_orders() == []
        assert switch.halted  # the in-memory view the status surfaces read
    finally:
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch


async def test_a_request_left_pending_while_no_daemon_ran_is_carried_out_when_the_watch_starts(
    two: tuple[Database, Database],
) -> None:
    daemon, cli = two
    await HaltStore(cli).halt(reason="overnight", by=OP, now=1.0, cancel_open=True)
    broker = ListBroker(2, 0)
    done = asyncio.Event()

    async def audit(new: Sequence[str]) -> None:
        done.set()

    switch = HaltSwitch(HaltStore(daemon), make_service(daemon, broker, LIMITS), audit=audit, poll_s=0.01)
    watch = asyncio.create_task(switch.watch())
    try:
        async with asyncio.timeout(5):
            await done.wait()
        assert await broker.open_orders() == [] and not (await HaltStore(cli).read()).cancel_pending
    finally:
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch


async def test_order_lists_and_brackets_are_refused_in_their_own_admission_while_halted(
    two: tuple[Database, Database],
) -> None:
    """OCO/OTOCO lists and bracket entries are admitted by brokers.orders.list_store, not admit_in: same check."""
    from brokers.models import ListRequest
    from brokers.orders.list_store import BracketPlan, admit_bracket_in, admit_list_in

    daemon, cli = two
    await HaltStore(cli).halt(reason=None, by=OP, now=1.0)
    tp = OrderRequest("BTCUSDT", "SELL", "LIMIT_MAKER", "l-tp", quantity=D("0.01"), price=D(70000))
    sl = OrderRequest("BTCUSDT", "SELL", "STOP_LOSS", "l-sl", quantity=D("0.01"), stop_price=D(60000))
    oco = ListRequest("OCO", "BTCUSDT", "l", tp, sl)
    entry = OrderRequest("BTCUSDT", "BUY", "MARKET", "b-entry", quantity=D("0.01"))
    plan = BracketPlan("b", "SELL", D("0.01"), D(70000), D(60000), None, D(700), D(600))
    with pytest.raises(TradingHalted):
        await daemon.run_transaction(
            lambda c: admit_list_in(c, "fake", oco, {}, D(700), 2.0, daily_limit=None, since=0.0)
        )
    with pytest.raises(TradingHalted):
        await daemon.run_transaction(
            lambda c: admit_bracket_in(c, "fake", entry, D(650), plan, 2.0, daily_limit=None, since=0.0)
        )
    await HaltStore(cli).resume(by=OP)
    admitted = await daemon.run_transaction(
        lambda c: admit_list_in(c, "fake", oco, {}, D(700), 2.0, daily_limit=None, since=0.0)
    )
    assert admitted.recorded


# --- who may halt, resume and cancel (brokers/halt_authority.py) ---------------------------------


async def _refused(store: HaltStore, by: HaltAuthority) -> str:
    with pytest.raises(HaltRefused) as info:
        await store.resume(by=by)
    return str(info.value)


async def test_a_principal_cannot_resume_another_principals_halt_but_its_own(two: tuple[Database, Database]) -> None:
    """Regression (issue 36): any ``trade`` token resumed any halt."""
    store = HaltStore(two[0])
    await store.halt(reason="mine", by=ALICE, now=1.0)
    text = await _refused(store, BOB)
    assert "halted by token mcp:alice" in text and "mcp:bob may lift only a halt it set itself" in text
    assert "mcp:alice itself" in text and "admin token" in text and "chartgen trading resume" in text
    state = await store.read()
    assert state.halted and state.by == "mcp:alice" and state.holder_kind == "principal"  # nothing changed
    assert not (await store.resume(by=ALICE)).halted
    await store.halt(reason="again", by=ALICE, now=2.0)
    assert not (await store.resume(by=ROOT)).halted  # an admin token lifts any halt
    await store.halt(reason="again", by=ALICE, now=3.0)
    assert not (await store.resume(by=OP)).halted  # and so does the operator


async def test_the_operators_halt_is_lifted_only_by_the_operator_or_an_admin(two: tuple[Database, Database]) -> None:
    """Regression (issue 36): a ``trade`` token resumed the operator's ``chartgen trading halt``."""
    daemon, cli = two
    await HaltStore(cli).halt(reason="incident", by=OP, now=1.0)
    text = await _refused(HaltStore(daemon), ALICE)
    assert text.startswith("trading stays halted: it was halted by the operator (cli:op)")
    assert "chartgen trading resume" in text and 'an admin token (halt_trading {"resume": true})' in text
    assert (await HaltStore(cli).read()).halted
    assert not (await HaltStore(daemon).resume(by=ROOT)).halted
    await HaltStore(cli).halt(reason="incident", by=OP, now=2.0)
    assert not (await HaltStore(daemon).resume(by=HaltAuthority.operator("dashboard", "op"))).halted


async def test_a_halt_over_a_halt_in_force_takes_the_holder_over_only_from_a_holder_it_could_lift(
    two: tuple[Database, Database],
) -> None:
    store = HaltStore(two[0])
    await store.halt(reason="a", by=ALICE, now=1.0)
    kept = await store.halt(reason="b", by=BOB, now=2.0)
    assert (kept.by, kept.reason, kept.since) == ("mcp:alice", "a", 1.0)  # bob cannot take alice's halt...
    assert "mcp:bob may lift only" in await _refused(store, BOB)  # ...so he cannot resume it in two steps
    taken = await store.halt(reason="root", by=ROOT, now=3.0)
    assert (taken.by, taken.holder_kind, taken.reason, taken.since) == ("mcp:root", "admin", "root", 1.0)
    assert "halted by admin token mcp:root" in await _refused(store, ALICE)  # now above alice
    assert (await store.halt(reason="op", by=OP, now=4.0)).by == "cli:op"  # the operator takes any over
    assert (await store.halt(reason="root again", by=ROOT, now=5.0)).by == "cli:op"  # admin ranks below it
    assert (await store.halt(reason="guard", by=GUARD, now=6.0)).by == "cli:op"  # same rank, cannot lift it
    await store.resume(by=OP)
    guarded = await store.halt(reason="drawdown 10%", by=GUARD, now=7.0)
    assert (guarded.by, guarded.holder_kind) == ("protection:max_drawdown", "protection")
    assert (await store.halt(reason="x", by=ALICE, now=8.0)).by == "protection:max_drawdown"
    assert "only the operator" in await _refused(store, ALICE)
    assert (await store.halt(reason="op", by=OP, now=9.0)).by == "cli:op"


def test_holder_kinds_rank_and_lift_as_documented() -> None:
    kinds = {a.kind: a for a in (OP, GUARD, ROOT, ALICE)}
    assert [kinds[k].rank for k in HolderKind] == [3, 3, 2, 1]
    lifts = {
        (by.name, held.name)
        for by in (OP, GUARD, ROOT, ALICE, BOB)
        for held in (OP, GUARD, ROOT, ALICE)
        if by.may_lift(held)
    }
    everyone = {h.name for h in (OP, GUARD, ROOT, ALICE)}
    assert {h for b, h in lifts if b == "cli:op"} == everyone == {h for b, h in lifts if b == "mcp:root"}
    assert {h for b, h in lifts if b == "protection:max_drawdown"} == {"protection:max_drawdown"}
    assert {h for b, h in lifts if b == "mcp:alice"} == {"mcp:alice"}
    assert {h for b, h in lifts if b == "mcp:bob"} == set()
    assert (OP.cancel_owner, ROOT.cancel_owner, GUARD.cancel_owner, ALICE.cancel_owner) == (None, None, None, "alice")
    unknown = HaltAuthority.holder("future_kind", "someone")  # a kind from a newer version: operator rank
    assert unknown.rank == 3 and not ALICE.may_lift(unknown) and ROOT.may_lift(unknown)


async def test_cancel_requests_record_their_scope(two: tuple[Database, Database]) -> None:
    from brokers.halt import cancel_scope_in

    daemon, cli = two
    store = HaltStore(daemon)
    first = await store.halt(reason=None, by=ALICE, now=1.0, cancel_open=True)
    assert await store.cancel_scope(0, first.cancel_seq) == frozenset({"alice"})
    second = await store.halt(reason=None, by=BOB, now=2.0, cancel_open=True)
    assert await store.cancel_scope(0, second.cancel_seq) == frozenset({"alice", "bob"})
    third = await HaltStore(cli).halt(reason=None, by=OP, now=3.0, cancel_open=True)
    assert await store.cancel_scope(0, third.cancel_seq) is None  # one asked for everyone's
    await store.record_cancel(third.cancel_seq, {}, 4.0)
    await daemon.execute("UPDATE trading_halt SET cancel_seq = cancel_seq + 1")  # a request from before migration 2
    assert await daemon.run_transaction(lambda c: cancel_scope_in(c, 3, 4)) is None


async def test_migration_2_records_the_holder_of_a_halt_set_before_it(tmp_path: Path) -> None:
    from storage import Migrations

    for by, kind in (("mcp:alice", "principal"), ("cli:op", "operator"), (None, "operator")):
        db = await Database.open(tmp_path / f"{kind}-{by}.db")
        try:
            await db.migrate([Migrations(HALT_MIGRATIONS.package, HALT_MIGRATIONS.steps[:1])])
            await db.execute("UPDATE trading_halt SET halted = 1, halted_by = ?, reason = 'old'", (by,))
            await db.migrate([HALT_MIGRATIONS])
            state = await HaltStore(db).read()
            assert state.holder_kind == kind and state.holder is not None and state.holder.kind == kind
        finally:
            await db.close()


class Owners:
    """A fixed ownership map for cancel_open's scope."""

    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners

    async def order_owner(self, client_order_id: str) -> str | None:
        return self.owners.get(client_order_id)

    async def list_owner(self, list_client_id: str) -> str | None:
        return self.owners.get(list_client_id)


async def test_a_scoped_cancel_open_cancels_only_the_owners_orders_and_lists(order_db: Database) -> None:
    broker = ListBroker(4, 2)
    owners = {"o0": "alice", "o1": "alice", "o2": "bob", "l0": "alice", "l0-tp": "alice", "l0-sl": "alice"}
    owners |= {"l1": "bob", "l1-tp": "bob", "l1-sl": "bob"}  # o3 has no owner (placed elsewhere)
    service = make_service(order_db, broker, LIMITS)
    out = await cancel_open(service, scope=Scope(frozenset({"alice"}), Owners(owners)))
    assert (out.orders, out.lists, out.failures, out.owners) == (2, 1, [], ["alice"])
    assert sorted(o.client_order_id for o in await broker.open_orders()) == ["l1-sl", "l1-tp", "o2", "o3"]
    assert [lst.list_client_id for lst in await broker.open_lists()] == ["l1"]
    nothing = await cancel_open(service, scope=Scope(frozenset({"alice"}), None))  # owners unknown: fail closed
    assert (nothing.orders, nothing.lists) == (0, 0) and len(await broker.open_orders()) == 4


async def test_a_principals_cancel_open_through_the_switch_cancels_only_its_own(
    two: tuple[Database, Database],
) -> None:
    """Regression (issue 36): a ``trade`` token's cancel_open cancelled every principal's orders and lists."""
    daemon, _ = two
    broker = ListBroker(0, 2)
    service = make_service(daemon, broker, LIMITS)
    for cid, owner in (("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("b2", "bob"), ("b3", "bob")):
        await service.place_order({**LIMIT_BUY, "client_order_id": cid}, owner=owner)
    for lst in broker.lists.values():  # two OCO lists learnt from the exchange, then given owners
        await service.lists.on_list_update(lst)
    await daemon.execute("UPDATE order_lists SET owner = 'bob' WHERE list_client_id = 'l0'")
    await daemon.execute("UPDATE order_lists SET owner = 'alice' WHERE list_client_id = 'l1'")
    switch = HaltSwitch(HaltStore(daemon), service)
    answer = await switch.halt(reason="rogue", by=ALICE, cancel_open=True)
    assert answer["cancel_open"]["orders_cancelled"] == 2 and answer["cancel_open"]["lists_cancelled"] == 1
    assert answer["cancel_open"]["owners"] == ["alice"]
    still = sorted(o.client_order_id for o in await broker.open_orders())
    assert still == ["b1", "b2", "b3", "l0-sl", "l0-tp"]  # bob's orders and his OCO's protection stay
    assert [o["id"] for o in await service.get_orders("open", actor=Actor("alice"))] == []
    assert not (await switch.resume(by=ALICE))["halted"]
    everyone = await switch.halt(reason="operator", by=ROOT, cancel_open=True)
    assert everyone["cancel_open"]["orders_cancelled"] == 3 and everyone["cancel_open"]["owners"] is None
    assert await broker.open_orders() == [] and await broker.open_lists() == []


async def test_a_refused_resume_through_the_switch_is_audited_and_changes_nothing(
    two: tuple[Database, Database],
) -> None:
    daemon, cli = two
    lines: list[str] = []

    async def audit(new: Sequence[str]) -> None:
        lines.extend(new)

    await HaltStore(cli).halt(reason="incident", by=OP, now=1.0)
    switch = HaltSwitch(HaltStore(daemon), None, audit=audit)
    with pytest.raises(HaltRefused) as info:
        await switch.resume(by=ALICE)
    assert info.value.holder.name == "cli:op" and switch.halted
    assert lines[-1].endswith("RESUME REFUSED for mcp:alice: halted by cli:op")
    held = await switch.halt(reason="me too", by=ALICE)
    assert held["by"] == "cli:op" and held["reason"] == "incident" and "keeps holding it" in held["note"]
    assert held["holder_kind"] == "operator" and "only the operator" in held["lifted_by"]
