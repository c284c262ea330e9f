"""Alert actions inside the evaluator and the store, with a recording executor (no broker).

What is checked here is the alerts package's half of the contract (alerts.actions): the intent
is committed by the executor inside the firing transaction, a refusal there leaves nothing
half-written and is reported, the send happens after the commit and its outcome replaces the
provisional entry in the poll notification and the push frame, reservations are released
when an alert does not fire, and pending outcomes are settled after a restart.  The order
path's half (guard, send once, reconciliation) is tested through the daemon in
test_alert_actions_daemon.py.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.action_runner import ActionRunner
from alerts.action_store import ActionOutcomes
from alerts.actions import ActionRefused, action_client_id
from alerts.evaluator import AlertEvaluator
from alerts.models import Alert, Subscription
from alerts.push import PushHub
from alerts.requests import AlertInputError, parse_set_alert
from alerts.store import AlertStore
from daemon import ALL_MIGRATIONS
from engine import Tick
from storage import Database
from testkit.null_market import NullMarket


class RecordingExecutor:
    """Records intents in its own table inside the firing transaction; answers sends as told."""

    def __init__(self) -> None:
        self.refuse_prepare: set[str] = set()
        self.refuse_commit: set[str] = set()
        self.reserved: set[str] = set()
        self.sent: list[str] = []
        self.known: dict[str, dict[str, Any] | None] = {}

    async def validate(self, principal: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        return args, []

    async def prepare(self, principal: str, alert_id: str, args: dict[str, Any]) -> str:
        if alert_id in self.refuse_prepare:
            raise ActionRefused("trading is halted by the operator")
        return action_client_id(alert_id)

    def reserve(self, token: str) -> None:
        self.reserved.add(token)

    def release(self, token: str) -> None:
        self.reserved.discard(token)

    def commit_in(self, conn: sqlite3.Connection, token: str) -> None:
        conn.execute("INSERT INTO intents VALUES (?)", (token,))
        if token in self.refuse_commit:
            raise ActionRefused("order refused: over the daily limit")

    async def send(self, token: str) -> dict[str, Any]:
        self.sent.append(token)
        self.reserved.discard(token)
        return {"type": "place_order", "order_id": token, "status": "Filled", "fill_price": 101.0}

    async def outcome(self, client_order_id: str) -> dict[str, Any] | None:
        return self.known.get(client_order_id)


@pytest.fixture
async def db() -> AsyncIterator[Database]:
    database = await Database.open(":memory:")
    await database.migrate(ALL_MIGRATIONS)
    async with database.transaction() as tx:
        await tx.execute("CREATE TABLE intents (cid TEXT PRIMARY KEY)")
    try:
        yield database
    finally:
        await database.close()


def _alert(level: float, *, action: bool = True) -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal="p",
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=level,
        created_at=time.time(),
        action={"place_order": {"symbol": "BTCUSDT", "side": "buy", "quantity": "0.001"}} if action else None,
    )


async def _setup(db: Database, alerts: list[Alert]) -> tuple[AlertEvaluator, RecordingExecutor, list[str]]:
    store = AlertStore(db)
    published: list[str] = []
    hub = PushHub()
    hub.publish = lambda principal, seq, data: published.append(data)  # type: ignore[method-assign]
    executor = RecordingExecutor()
    runner = ActionRunner(executor, ActionOutcomes(db), hub)
    evaluator = AlertEvaluator(store, NullMarket(), hub, actions=runner)
    await store.subscribe(Subscription(principal="p"), time.time())
    await store.insert_many(alerts)
    evaluator.index_many(alerts)
    return evaluator, executor, published


async def test_the_intent_commits_with_the_firing_and_the_outcome_replaces_the_pending_entry(db: Database) -> None:
    a = _alert(100.0)
    evaluator, executor, published = await _setup(db, [a])
    fired = await evaluator.on_tick(Tick("BTCUSDT", "1m", 101.0, 0, 0))
    cid = action_client_id(a.id)
    assert fired[0].action == {"type": "place_order", "order_id": cid, "status": "Pending"}
    assert published == []  # the frame waits for the outcome
    assert evaluator.actions is not None
    await evaluator.actions.drain()
    assert executor.sent == [cid] and executor.reserved == set()
    (frame,) = published
    assert orjson.loads(frame)["params"]["action"]["status"] == "Filled"
    (note,) = await AlertStore(db).drain("p")
    assert note["action"] == {"type": "place_order", "order_id": cid, "status": "Filled", "fill_price": 101.0}
    rows = await db.fetchall("SELECT cid FROM intents")
    assert [r["cid"] for r in rows] == [cid]
    # A second crossing cannot fire it again, so no second send.
    assert await evaluator.on_tick(Tick("BTCUSDT", "1m", 102.0, 0, 0)) == []
    assert executor.sent == [cid]


async def test_a_refusal_in_the_transaction_leaves_no_intent_and_is_reported(db: Database) -> None:
    a, b = _alert(100.0), _alert(100.5)
    evaluator, executor, published = await _setup(db, [a, b])
    executor.refuse_commit.add(action_client_id(b.id))
    executor.refuse_prepare.add(a.id)
    fired = await evaluator.on_tick(Tick("BTCUSDT", "1m", 101.0, 0, 0))
    assert {f.alert.id for f in fired} == {a.id, b.id}
    assert executor.sent == [] and executor.reserved == set()
    notes = {n["alert_id"]: n["action"] for n in await AlertStore(db).drain("p")}
    assert notes[a.id]["status"] == "Refused" and "halted" in notes[a.id]["reason"]
    assert notes[b.id]["status"] == "Refused" and "daily limit" in notes[b.id]["reason"]
    assert await db.fetchall("SELECT cid FROM intents") == []  # rolled back to the savepoint
    assert len(published) == 2  # refusals are final: their frames go at once
    assert await ActionOutcomes(db).pending() == []


async def test_notification_only_alerts_are_untouched(db: Database) -> None:
    a = _alert(100.0, action=False)
    evaluator, executor, published = await _setup(db, [a])
    (fired,) = await evaluator.on_tick(Tick("BTCUSDT", "1m", 101.0, 0, 0))
    assert fired.action is None and len(published) == 1 and executor.sent == []
    (note,) = await AlertStore(db).drain("p")
    assert "action" not in note


async def test_a_failed_firing_transaction_releases_the_reservation(db: Database) -> None:
    a = _alert(100.0)
    evaluator, executor, _ = await _setup(db, [a])

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    evaluator.store.fire = broken  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError):
        await evaluator.on_tick(Tick("BTCUSDT", "1m", 101.0, 0, 0))
    assert executor.reserved == set() and executor.sent == []


async def test_pending_outcomes_are_settled_after_a_restart(db: Database) -> None:
    """A crash between commit and send: the order service resolves the order; the outcome follows."""
    a = _alert(100.0)
    evaluator, executor, _ = await _setup(db, [a])
    cid = action_client_id(a.id)

    async def crash(token: str) -> dict[str, Any]:
        raise RuntimeError("killed")

    executor.send = crash  # type: ignore[method-assign]
    await evaluator.on_tick(Tick("BTCUSDT", "1m", 101.0, 0, 0))
    assert evaluator.actions is not None
    await evaluator.actions.drain()
    assert await ActionOutcomes(db).pending() == [(a.id, cid)]
    restarted, executor2, _ = await _setup(db, [])
    assert restarted.actions is not None
    executor2.known[cid] = None  # still unresolved: stays pending
    assert await restarted.actions.finish_pending() == 0
    executor2.known[cid] = {"type": "place_order", "order_id": cid, "status": "Filled"}
    assert await restarted.actions.finish_pending() == 1
    assert await ActionOutcomes(db).pending() == []
    (note,) = await AlertStore(db).drain("p")
    assert note["action"]["status"] == "Filled"


def test_action_client_ids_are_derived_and_fit_binance() -> None:
    a = str(uuid.uuid4())
    assert action_client_id(a) == action_client_id(a)
    assert action_client_id(a) != action_client_id(str(uuid.uuid4()))
    assert len(action_client_id(a)) <= 36
    assert all(c.isalnum() or c in "-_" for c in action_client_id(a))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(action=_json | st.fixed_dictionaries({"place_order": _json}))
def test_any_action_argument_is_accepted_or_refused_with_a_message(action: Any) -> None:
    args = {"symbol": "BTCUSDT", "condition": {"price_above": 70000}, "action": action}
    try:
        spec = parse_set_alert(args, time.time())
    except AlertInputError as exc:
        assert "action" in str(exc)
        return
    assert action is None or isinstance(spec.order, dict)
