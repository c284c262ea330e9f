"""Channel routing into the outbox: rows written in the firing transaction, per channel, exactly once;
a principal's own channels follow its subscription's filters; an action's outcome reaches the
undelivered rows; subscribe_notifications refuses a channel the operator did not configure or did not
grant the principal (``subscribers``), and a stored subscription reaches no ungranted channel."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.action_store import ActionOutcomes, PlannedAction
from alerts.models import Alert, Firing, Subscription
from alerts.outbox_store import ChannelRouting
from alerts.requests import AlertInputError
from alerts.service import AlertService
from alerts.store import AlertStore
from config import NtfyChannel
from storage import Database

ROUTING = ChannelRouting(known=frozenset({"ops", "phone", "team"}), all_principals=("ops",))


def alert(principal: str = "a", symbol: str = "BTCUSDT") -> Alert:
    return Alert(
        id=str(uuid.uuid4()),
        principal=principal,
        symbol=symbol,
        interval="1m",
        kind="price_above",
        threshold=100.0,
        created_at=time.time(),
    )


def firing(a: Alert) -> Firing:
    return Firing(alert_id=a.id, value=101.0, triggered_at=time.time())


async def rows(db: Database) -> list[tuple[str, str, str]]:
    found = await db.fetchall("SELECT channel, notification_id, principal FROM outbox ORDER BY id")
    return [(r["channel"], r["notification_id"], r["principal"]) for r in found]


async def test_every_fired_alert_gets_one_row_per_operator_channel(db: Database) -> None:
    store = AlertStore(db, routing=ROUTING)
    alerts = [alert("a"), alert("b")]
    for a in alerts:
        await store.insert(a)
    await store.fire([firing(a) for a in alerts])
    await store.fire([firing(a) for a in alerts])  # fired again: nothing more (exactly once)
    assert await rows(db) == [("ops", alerts[0].id, "a"), ("ops", alerts[1].id, "b")]
    payload = orjson.loads((await db.fetchone("SELECT payload FROM outbox LIMIT 1"))["payload"])
    assert payload["method"] == "notifications/alert_triggered"
    assert payload["params"]["alert_id"] == alerts[0].id


async def test_own_channels_follow_the_subscription_filters(db: Database) -> None:
    store = AlertStore(db, routing=ROUTING)
    await store.subscribe(Subscription(principal="a", symbols=("ETHUSDT",), channels=("phone", "ops")), time.time())
    btc, eth = alert("a", "BTCUSDT"), alert("a", "ETHUSDT")
    for a in (btc, eth):
        await store.insert(a)
    await store.fire([firing(btc), firing(eth)])
    assert await rows(db) == [("ops", btc.id, "a"), ("ops", eth.id, "a"), ("phone", eth.id, "a")]


async def test_without_channels_nothing_is_written(db: Database) -> None:
    store = AlertStore(db)
    a = alert()
    await store.insert(a)
    await store.fire([firing(a)])
    assert await rows(db) == []


async def test_a_failed_firing_writes_no_outbox_row(db: Database) -> None:
    """The rows are part of the firing transaction: a firing that rolls back leaves none."""
    store = AlertStore(db, routing=ROUTING)
    a = alert()
    await store.insert(a)

    def broken(conn: Any, token: Any) -> None:
        raise RuntimeError("disk full")

    with_action = a.model_copy(update={"action": {"place_order": {"symbol": "BTCUSDT"}}})
    await db.execute("DELETE FROM alerts")
    await store.insert(with_action)
    with pytest.raises(RuntimeError):
        await store.fire([firing(with_action)], {with_action.id: PlannedAction("cid", token="t")}, broken)
    assert await rows(db) == []
    assert await store.outcome(with_action.id) is None


async def test_an_action_outcome_reaches_the_undelivered_rows(db: Database) -> None:
    store = AlertStore(db, routing=ROUTING)
    a = alert()
    await store.insert(a)
    await store.fire([firing(a)])
    await db.execute(
        "INSERT INTO alert_actions (alert_id, principal, client_order_id, state, outcome, at)"
        " VALUES (?, 'a', 'cid', 'pending', '{}', 0)",
        (a.id,),
    )
    await ActionOutcomes(db).record(a.id, {"type": "place_order", "status": "FILLED", "order_id": "cid"})
    payload = orjson.loads((await db.fetchone("SELECT payload FROM outbox"))["payload"])
    assert payload["params"]["action"]["status"] == "FILLED"


class _Evaluator:
    active_count = 0


def _channels(**subscribers: list[str]) -> dict[str, Any]:
    return {
        name: NtfyChannel(kind="ntfy", url=f"https://ntfy.example/{name}", subscribers=subscribers.get(name, []))
        for name in ("ops", "phone", "team")
    }


async def test_subscribe_refuses_an_unknown_channel_and_names_the_known_ones(db: Database) -> None:
    store = AlertStore(db, routing=ROUTING)
    service = AlertService(store, _Evaluator(), None, default_interval="1h", channels=_channels(phone=["a"]))  # type: ignore[arg-type]
    with pytest.raises(AlertInputError, match=r"channels: unknown channel\(s\) \['pager'\].*ops, phone, team"):
        await service.subscribe_to("a", None, None, ("pager",))
    answer = await service.subscribe_to("a", None, None, ("phone",))
    assert answer["channels"] == ["phone"]
    sub = await store.subscription("a")
    assert sub is not None and sub.channels == ("phone",)


async def test_subscribe_refuses_a_channel_not_granted_and_names_the_setting(db: Database) -> None:
    """Regression (issue 36): any principal could route its notifications to any configured channel."""
    store = AlertStore(db, routing=ROUTING)
    channels = _channels(phone=["alice-bot"], team=["*"])
    service = AlertService(store, _Evaluator(), None, default_interval="1h", channels=channels)  # type: ignore[arg-type]
    with pytest.raises(AlertInputError, match=r"'ops' is not granted.*channels\.ops\.subscribers"):
        await service.subscribe_to("tok_b", None, None, ("ops",))
    with pytest.raises(AlertInputError, match=r"'phone' is not granted.*channels\.phone\.subscribers"):
        await service.subscribe_to("tok_b", None, None, ("team", "phone"))
    assert await store.subscription("tok_b") is None
    assert (await service.subscribe_to("tok_b", None, None, ("team",)))["channels"] == ["team"]  # "*"
    granted = await service.subscribe_to("tok_a", None, None, ("phone",), names=frozenset({"alice-bot"}))
    assert granted["channels"] == ["phone"]


async def test_an_ungranted_channel_in_a_stored_subscription_gets_no_row(db: Database) -> None:
    """Fail closed at firing time: a subscription stored before the grant was taken away reaches nothing."""
    routing = ChannelRouting(
        known=frozenset({"ops", "phone", "team"}), all_principals=("ops",), subscribable=frozenset({"team"})
    )
    store = AlertStore(db, routing=routing)
    await store.subscribe(Subscription(principal="a", channels=("phone", "team")), time.time())
    a = alert("a")
    await store.insert(a)
    await store.fire([firing(a)])
    assert await rows(db) == [("ops", a.id, "a"), ("team", a.id, "a")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    own=st.lists(st.sampled_from(["ops", "phone", "team", "gone"]), max_size=4),
    everyone=st.lists(st.sampled_from(["ops", "phone", "team"]), max_size=3, unique=True),
)
def test_routing_lists_each_known_channel_once_operator_channels_first(own: list[str], everyone: list[str]) -> None:
    routing = ChannelRouting(known=frozenset({"ops", "phone", "team"}), all_principals=tuple(everyone))
    out = routing.for_alert(own)
    assert out[: len(everyone)] == everyone
    assert len(out) == len(set(out))
    assert set(out) == set(everyone) | ({"ops", "phone", "team"} & set(own))
