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

from brokers.guard import SafetyLimits
from brokers.halt import HALTED_MESSAGE, HaltStore, TradingHalted
from brokers.halt import MIGRATIONS as HALT_MIGRATIONS
from brokers.halt_switch import HaltSwitch, cancel_open
from brokers.models import BrokerError, ExchangeList, ExchangeOrder, OrderRequest
from brokers.order_admission import admit_in
from brokers.order_args import OrderInputError
from brokers.order_store import MIGRATIONS as ORDER_MIGRATIONS
from config.database import Database
from tests.brokers.test_order_guard import PricedBroker, make_service

LIMITS = SafetyLimits(max_order_notional=D(1_000_000), max_daily_notional=D(10_000_000))
LIMIT_BUY = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.01, "price": 60000}


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
    state = await theirs.halt(reason="exchange incident", by="cli:op", now=100.0, cancel_open=True)
    assert state.halted and state.cancel_seq == 1 and state.cancel_pending
    assert await mine.data_version() != version  # the daemon's cheap change detector moved
    seen = await mine.read()
    assert (seen.halted, seen.reason, seen.by, seen.since) == (True, "exchange incident", "cli:op", 100.0)
    again = await theirs.halt(reason="still", by="cli:op", now=200.0)
    assert again.since == 100.0 and again.reason == "still" and again.cancel_seq == 1  # halted since the first
    done = await mine.record_cancel(1, {"orders_cancelled": 3}, 150.0)
    assert not done.cancel_pending and done.cancel_result == {"orders_cancelled": 3}
    resumed = await theirs.resume()
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
    await HaltStore(cli).halt(reason="incident", by="cli:op", now=1.0)
    before, sent = await _count(daemon), list(broker.placed)
    with pytest.raises(TradingHalted) as refused:
        await service.place_order(dict(LIMIT_BUY), owner="alice")
    assert str(refused.value) == HALTED_MESSAGE == "trading is halted by the operator"
    assert isinstance(refused.value, OrderInputError)  # the tools show it as a clear isError text
    assert await _count(daemon) == before and broker.placed == sent  # nothing recorded, nothing sent
    await HaltStore(cli).resume()
    assert (await service.place_order(dict(LIMIT_BUY), owner="alice"))["status"] == "Open"


async def test_admit_in_checks_the_flag_inside_the_callers_transaction(two: tuple[Database, Database]) -> None:
    """Paths that commit an intent with their own rows (alert actions, schedules) call admit_in directly."""
    daemon, cli = two
    await HaltStore(cli).halt(reason=None, by="cli", now=1.0)
    req = OrderRequest("BTCUSDT", "BUY", "MARKET", "halted-1", quantity=D("0.01"))

    def in_tx(conn: sqlite3.Connection) -> Any:
        return admit_in(conn, "fake", req, D(650), 2.0, daily_limit=None, since=0.0)

    with pytest.raises(TradingHalted, match=r"^trading is halted by the operator$"):
        await daemon.run_transaction(in_tx)
    await HaltStore(cli).resume()
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
    answer = await switch.halt(reason="fat finger", by="mcp:alice", cancel_open=True)
    assert answer["halted"] and answer["cancel_open"]["orders_cancelled"] == 3
    assert answer["cancel_open"]["lists_cancelled"] == 1
    assert switch.note() is not None and switch.note().startswith("HALTED by operator: fat finger")  # type: ignore[union-attr]
    assert lines[0].endswith("HALT by mcp:alice: fat finger")
    assert lines[-1].endswith("HALT cancel-open: 3 orders, 1 lists cancelled")
    assert not (await HaltStore(daemon).read()).cancel_pending
    assert not (await switch.resume(by="mcp:alice"))["halted"] and switch.note() is None


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
        state = await HaltStore(cli).halt(reason="cli", by="cli:op", now=1.0, cancel_open=True)
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
    await HaltStore(cli).halt(reason="overnight", by="cli:op", now=1.0, cancel_open=True)
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
    """OCO/OTOCO lists and bracket entries are admitted by brokers.list_store, not admit_in: same check."""
    from brokers.list_store import BracketPlan, admit_bracket_in, admit_list_in
    from brokers.models import ListRequest

    daemon, cli = two
    await HaltStore(cli).halt(reason=None, by="cli", now=1.0)
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
    await HaltStore(cli).resume()
    admitted = await daemon.run_transaction(
        lambda c: admit_list_in(c, "fake", oco, {}, D(700), 2.0, daily_limit=None, since=0.0)
    )
    assert admitted.recorded
