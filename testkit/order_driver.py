"""A driver process for the order procedure's crash suite (tests/brokers/test_order_journal_crash.py): the one
procedure (record an intent, send it once, release a bracket's exit, settle what is in doubt) run on either
journal — a node's SQLite (an :class:`~brokers.orders.service.OrderService`) or a cluster's PostgreSQL (an
:class:`~cluster.order_leader.OrderLeader` with the fronts' intents) — against the exchange simulator.

    python -m testkit.order_driver {sqlite|postgres} TARGET SIM_URL order RUN COUNT
    python -m testkit.order_driver {sqlite|postgres} TARGET SIM_URL settle RUN 0
    python -m testkit.order_driver {sqlite|postgres} TARGET SIM_URL {halt|resume} RUN 0

``TARGET`` is the SQLite file or the PostgreSQL DSN (its cluster schema migrated).  ``order``: record
``COUNT`` intents named ``r<RUN>-<i>`` (the even ones market entries with a bracket), send them and
release their exits, printing a line before and after each step (a node: ``placing`` / ``answered``; a
cluster: ``recorded`` at the front, ``step`` / ``stepped N`` for the leader's rounds) so the test can SIGKILL
it at a chosen moment; like a daemon starting, a node reconciles first and a cluster's leader settles what
its predecessor left.  ``settle``: settle everything a killed driver left, then print ``summary <json>``: every intent's
end (``placed`` / ``rejected`` / what else it still is) and every exit's state with its entry.  ``halt`` /
``resume``: the operator's halt switch in the journal's store (``chartgen trading halt`` on a node,
``halt_trading`` at a cluster's front).
"""

from __future__ import annotations

import asyncio
import sys
import time
from decimal import Decimal
from typing import Any

import orjson
import structlog

from brokers import (
    HALT_MIGRATIONS,
    ORDER_MIGRATIONS,
    BinanceBroker,
    BrokerError,
    HaltAuthority,
    HaltStore,
    OrderInputError,
    OrderRequest,
    OrderService,
    OrderStore,
    SafetyLimits,
    exit_request,
)
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import Database, PostgresDatabase

SYMBOL = "BTCUSDT"
ACCOUNT = "main"
QUANTITY = Decimal("0.002")
RECV_WINDOW_S = 1.0
LEASE_TTL_S = 1.0
SETTLE_DEADLINE_S = 60.0
OPERATOR = HaltAuthority.operator("cli")


def say(*words: object) -> None:
    print(*words, flush=True)


def intents(run: int, count: int) -> list[tuple[OrderRequest, bool]]:
    """The run's intents: market buys, every other one (the first, the third …) with a bracket."""
    return [(OrderRequest(SYMBOL, "BUY", "MARKET", f"r{run}-{i}", quantity=QUANTITY), i % 2 == 0) for i in range(count)]


def bracket_at(price: Decimal) -> dict[str, Decimal | None]:
    """Exits far from the market: they rest (neither leg fills while the suite runs)."""
    return {"take_profit": (price * 2).quantize(Decimal("0.01")), "stop_loss": (price / 2).quantize(Decimal("0.01"))}


async def broker_on(sim_url: str) -> BinanceBroker:
    broker = BinanceBroker(
        api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim_url,
        recv_window_ms=int(RECV_WINDOW_S * 1000),
    )  # fmt: skip
    await broker.sync_time()
    return broker


# --- a node: SQLite ---------------------------------------------------------------------------------
async def node(path: str, broker: BinanceBroker, mode: str, run: int, count: int) -> None:
    db = await Database.open(path)
    await db.migrate([ORDER_MIGRATIONS, HALT_MIGRATIONS])
    if mode in ("halt", "resume"):
        halts = HaltStore(db)
        if mode == "halt":
            await halts.halt(reason="suite", by=OPERATOR, now=time.time())
        else:
            await halts.resume(by=OPERATOR)
        say(mode)
        await db.close()
        return
    svc = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
    svc.unresolved_grace_s = 0.0
    svc.unknown_lookup_delays_s = (0.2,)
    try:
        await svc.reconcile()  # as a daemon starts: what a killed one left is settled first
        if mode == "order":
            price = await broker.last_price(SYMBOL)
            assert price is not None
            for req, bracketed in intents(run, count):
                say("placing", req.client_order_id)
                try:
                    await svc.place_parsed(req, bracket_at(price) if bracketed else None, owner="driver")
                except (BrokerError, OrderInputError) as exc:  # a refusal is an answer too: the journal holds it
                    say("refused", req.client_order_id, type(exc).__name__)
                say("answered", req.client_order_id)
            say("done")
            return
        for _ in range(4):  # a pass can release what the pass before settled (an exit after its entry)
            await svc.reconcile()
        say("summary", orjson.dumps(await node_summary(db)).decode())
    finally:
        await db.close()


async def node_summary(db: Database) -> dict[str, Any]:
    ends: dict[str, str] = {}
    for r in await db.fetchall("SELECT client_order_id, status, list_client_id FROM orders"):
        if r["list_client_id"] and r["list_client_id"].startswith("bk-"):
            continue  # an exit's legs: the exit's state says it
        status = r["status"]
        ends[r["client_order_id"]] = {"REJECTED": "rejected", "PENDING_SUBMIT": "pending", "UNKNOWN": "unknown"}.get(
            status, "placed"
        )
    exits = {
        r["list_client_id"]: {"entry": r["entry_client_id"], "state": r["bracket_state"]}
        for r in await db.fetchall("SELECT * FROM order_lists WHERE entry_client_id IS NOT NULL")
    }
    return {"intents": ends, "exits": exits}


# --- a cluster: PostgreSQL --------------------------------------------------------------------------
async def cluster(dsn: str, broker: BinanceBroker, mode: str, run: int, count: int) -> None:
    from cluster import INTENTS_CHANNEL, AccountMirror, ClusterHalt, OrderIntents, OrderLeader, bracket_exits

    db = await PostgresDatabase.open(dsn, min_size=1, max_size=3)
    if mode in ("halt", "resume"):
        switch = ClusterHalt(db, ACCOUNT, wake_channel=INTENTS_CHANNEL)
        await (switch.halt(reason="suite", by=OPERATOR) if mode == "halt" else switch.resume(by=OPERATOR))
        await switch.close()
        say(mode)
        await db.close()
        return
    limits = SafetyLimits(None, None)
    leader = OrderLeader(
        db, broker, account=ACCOUNT, member_id=f"driver-{run}", ttl_s=LEASE_TTL_S, settle_margin_s=0.2, limits=limits
    )
    mirror = AccountMirror(db, broker, ACCOUNT, limits=limits)
    """The leader role's account mirror: an entry settled by a lookup has no fills in its answer, and its
    exit is sized from the trades the mirror stores (cluster/pg_order_journal.py ``entry_fills``)."""
    try:
        if mode == "order":
            front = OrderIntents(db)
            price = await broker.last_price(SYMBOL)
            assert price is not None
            try:
                for req, bracketed in intents(run, count):
                    if bracketed:
                        oco = exit_request(req, bracket_at(price), working=False)
                        await bracket_exits.submit_bracket(front, ACCOUNT, req, oco)
                    else:
                        await front.submit(ACCOUNT, req)
                    say("recorded", req.client_order_id)
            finally:
                await front.close()
        async with asyncio.timeout(SETTLE_DEADLINE_S):
            while not await cluster_idle(db):
                if not leader.leading:  # the killed driver's lease runs out first
                    await leader.step()
                    await asyncio.sleep(0.05)  # pacing between lease attempts, not a synchronisation
                    continue
                say("step")
                handled = await leader.step()
                await mirror.refresh()
                say("stepped", handled)
                if not handled:
                    await asyncio.sleep(0.05)  # an inherited intent waits out recvWindow + margin
        if mode == "order":
            say("done")
        else:
            say("summary", orjson.dumps(await cluster_summary(db)).decode())
    finally:
        await leader.resign()
        await db.close()


async def cluster_idle(db: PostgresDatabase) -> bool:
    """Nothing left in doubt: no intent queued, sending or unknown, no exit waiting on an ended entry
    (while trading is halted such an exit waits for the resume)."""
    from cluster import read_in

    busy = await db.fetchval(
        "SELECT count(*) FROM cluster_order_intents x WHERE x.account = $1 AND (x.state IN ('queued', 'sending',"
        " 'unknown') OR (NOT $2 AND x.state = 'waiting' AND EXISTS (SELECT 1 FROM cluster_order_intents e"
        "  WHERE e.client_order_id = x.entry_client_order_id AND e.state IN ('placed', 'rejected'))))",
        ACCOUNT,
        (await read_in(db, ACCOUNT)).halted,
    )
    return int(busy) == 0


async def cluster_summary(db: PostgresDatabase) -> dict[str, Any]:
    ends: dict[str, str] = {}
    exits: dict[str, dict[str, Any]] = {}
    for r in await db.fetch("SELECT client_order_id, state, entry_client_order_id FROM cluster_order_intents"):
        if r["entry_client_order_id"] is not None:
            exits[r["client_order_id"]] = {"entry": r["entry_client_order_id"], "state": r["state"]}
        else:
            ends[r["client_order_id"]] = r["state"]
    return {"intents": ends, "exits": exits}


async def main(journal: str, target: str, sim_url: str, mode: str, run: int, count: int) -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout is the progress
    broker = await broker_on(sim_url)
    try:
        await (node if journal == "sqlite" else cluster)(target, broker, mode, run, count)
    finally:
        await broker.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], int(a[4]), int(a[5])))
