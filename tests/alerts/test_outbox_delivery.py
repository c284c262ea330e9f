"""The outbox sender against local receivers that fail, stall, answer 429 and go down: every
notification reaches every channel at least once, in firing order per channel, duplicates with the
same idempotency key; an hour-long outage (manual clock) is caught up; rows past the age limit are
marked failed and reported; Retry-After and Telegram's retry_after are honoured.  The tests run on
the SQLite outbox here and on PostgreSQL's in tests/cluster/test_pg_outbox.py (the ``backend``
fixture)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from alerts.channels.messages import verify_signature
from alerts.channels.sender import ACTION_HOLD_S, OutboxSender
from alerts.models import Alert, Firing
from alerts.outbox_store import ChannelRouting, Outbox, OutboxRow, OutboxStore, enqueue_in, set_action_in
from alerts.store import AlertStore
from config import NtfyChannel, TelegramChannel, WebhookChannel
from storage import Database
from testkit.channel_receivers import Receiver

pytestmark = pytest.mark.timeout(90)
SECRET = "whsec-test"


class ManualClock:
    """Time that moves only when the sender sleeps (and an outage that ends at a set time)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.back: list[tuple[float, Receiver]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        for at, receiver in list(self.back):
            if self.now >= at:
                await receiver.come_back()
                self.back.remove((at, receiver))
        await asyncio.sleep(0)


FAILED_SQL = "SELECT notification_id, last_error FROM outbox WHERE state = 'failed' ORDER BY id"


class SqliteOutbox:
    """What the tests do to the outbox, on SQLite (tests/cluster/test_pg_outbox.py: PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def alert_store(self, routing: ChannelRouting) -> Any:
        return AlertStore(self.db, routing=routing)

    def outbox(self) -> Outbox:
        return OutboxStore(self.db)

    async def failed(self) -> list[tuple[str, str]]:
        rows = await self.db.fetchall(FAILED_SQL)
        return [(r["notification_id"], r["last_error"]) for r in rows]

    async def enqueue(self, row: OutboxRow) -> None:
        await self.db.run_transaction(lambda conn: enqueue_in(conn, [row]))

    async def set_action(self, alert_id: str, outcome: dict[str, object]) -> None:
        await self.db.run_transaction(lambda conn: set_action_in(conn, alert_id, outcome))

    @contextlib.asynccontextmanager
    async def waking(self, store: Any, sender: OutboxSender) -> AsyncIterator[None]:
        """The firing commits wake ``sender``."""
        store.on_enqueued = sender.wake
        yield


@pytest.fixture
def backend(db: Database) -> SqliteOutbox:
    return SqliteOutbox(db)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def receivers(clock: ManualClock) -> AsyncIterator[dict[str, Receiver]]:
    made = {
        "hook": await Receiver("webhook", clock=clock, seed=1).start(),
        "tg": await Receiver("telegram", clock=clock, seed=2).start(),
        "topic": await Receiver("ntfy", clock=clock, seed=3).start(),
    }
    try:
        yield made
    finally:
        for r in made.values():
            await r.close()


def channels_for(
    receivers: dict[str, Receiver], timeout_s: float = 0.3, per_minute: int | None = 60_000
) -> dict[str, object]:
    """The channels of local receivers (loopback: ``allow_private_address``); ``per_minute`` high enough
    that the rate never coalesces (None: each kind's default, as tests/alerts/test_channels_rate.py uses)."""
    common: dict[str, Any] = {"timeout_s": timeout_s, "allow_private_address": True, "max_per_minute": per_minute}
    out: dict[str, object] = {}
    for name, r in receivers.items():
        if r.kind == "webhook":
            out[name] = WebhookChannel(kind="webhook", url=r.url, secret=SECRET, **common)
        elif r.kind == "telegram":
            out[name] = TelegramChannel(kind="telegram", api_url=r.url, bot_token="1:tok", chat_id="42", **common)
        else:
            out[name] = NtfyChannel(kind="ntfy", url=r.url, **common)
    return out


async def fire_alerts(backend: SqliteOutbox, names: list[str], n: int, clock: ManualClock) -> list[str]:
    """``n`` alerts fired one by one (firing order = id order), routed to every channel in ``names``."""
    store = backend.alert_store(ChannelRouting(known=frozenset(names), all_principals=tuple(names)))
    ids = []
    for i in range(n):
        a = Alert(
            id=f"{i:04d}-{uuid.uuid4().hex[:8]}",
            principal=f"p{i % 3}",
            symbol="BTCUSDT",
            interval="1m",
            kind="price_above",
            threshold=70_000.0 + i,
            created_at=clock(),
            note=f"note {i}",
        )
        await store.insert(a)
        await store.fire([Firing(alert_id=a.id, value=70_001.0 + i, triggered_at=clock())])
        ids.append(a.id)
    return ids


def sender(backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock, **kw: object) -> OutboxSender:
    return OutboxSender(
        backend.outbox(),
        channels_for(receivers),  # type: ignore[arg-type]
        max_age_s=float(kw.pop("max_age_s", 86400.0)),  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(7),
    )


async def test_every_notification_reaches_every_channel_once_or_more_in_order(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    for r in receivers.values():
        r.chaos = 0.3  # fail, stall or 429 at random (seeded)
    ids = await fire_alerts(backend, list(receivers), 40, clock)
    out = sender(backend, receivers, clock)
    await out.run(until_empty=True)
    for name, r in receivers.items():
        assert r.first_delivery_order() == ids, name  # all of them, in firing order
        assert {x.key for x in r.requests} <= set(ids)  # every attempt carries its notification id
        assert len(r.requests) > len(ids), "the chaos should have caused retries"
    hook = receivers["hook"]
    for req in hook.delivered():
        assert verify_signature(SECRET, req.headers["X-Chartgen-Signature"], req.body, clock(), tolerance_s=10**9)
        assert orjson.loads(req.body)["params"]["alert_id"] == req.key
    status = await out.status()
    assert all(s["pending"] == 0 and s["delivered"] == 40 and s["failed"] == 0 for s in status.values())


async def test_a_receiver_down_for_an_hour_gets_everything_afterwards(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    hook = {"hook": receivers["hook"]}
    await hook["hook"].go_down()  # connection refused
    clock.back.append((clock() + 3600, hook["hook"]))
    ids = await fire_alerts(backend, ["hook"], 5, clock)
    start = clock()
    await sender(backend, hook, clock).run(until_empty=True)
    assert hook["hook"].first_delivery_order() == ids
    assert clock() - start >= 3600
    assert clock() - start < 3600 + 600, "backoff is capped at 5 minutes"


async def test_rows_past_the_age_limit_are_marked_failed_and_the_next_ones_go(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    hook = {"hook": receivers["hook"]}
    hook["hook"].down_until = clock() + 700  # 503 for 700 s
    old = await fire_alerts(backend, ["hook"], 2, clock)
    later = clock() + 300
    new: list[str] = []
    real_sleep = clock.sleep

    async def sleep(seconds: float) -> None:
        await real_sleep(seconds)
        if clock() >= later and not new:  # another alert fires while the receiver is still down
            new.extend(await fire_alerts(backend, ["hook"], 1, clock))

    out = sender(backend, hook, clock, max_age_s=600.0)
    out._sleep = sleep
    await out.run(until_empty=True)
    assert hook["hook"].first_delivery_order() == new
    status = (await out.status())["hook"]
    assert status["failed"] == 2 and status["delivered"] == 1 and status["pending"] == 0
    assert status["last_error"] == "HTTP 503"
    failed = await backend.failed()
    assert [nid for nid, _ in failed] == old
    # the head was tried until it aged out; the one behind it was never tried (the head blocks the rest)
    assert [err for _, err in failed] == ["HTTP 503", "not delivered within 600 s"]


@pytest.mark.parametrize("name", ["hook", "tg"])
async def test_retry_after_is_honoured(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock, name: str
) -> None:
    one = {name: receivers[name]}
    one[name].retry_after_s = 30
    one[name].forced = ["429"]
    await fire_alerts(backend, [name], 1, clock)
    await sender(backend, one, clock).run(until_empty=True)
    first, second = one[name].requests
    assert not first.ok and second.ok
    assert second.at - first.at >= 30


async def test_an_action_alert_waits_for_its_order_outcome(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    frame = {
        "jsonrpc": "2.0",
        "method": "notifications/alert_triggered",
        "params": {
            "alert_id": "a1",
            "symbol": "BTCUSDT",
            "interval": "1m",
            "condition": {"type": "price_below", "threshold": 60000.0},
            "value": 59990.0,
            "triggered_at": "2027-01-15T08:00:00+00:00",
            "bar_time": None,
            "note": None,
            "action": {"type": "place_order", "order_id": "cg-a1", "status": "Pending"},
        },
    }
    row = OutboxRow("tg", "a1", "p", orjson.dumps(frame).decode(), clock())
    await backend.enqueue(row)
    filled = {"type": "place_order", "order_id": "cg-a1", "status": "Filled", "filled_quantity": "0.01"}
    real_sleep = clock.sleep

    async def outcome_arrives(seconds: float) -> None:
        await backend.set_action("a1", filled)
        await real_sleep(seconds)

    out = sender(backend, {"tg": receivers["tg"]}, clock)
    out._sleep = outcome_arrives
    start = clock()
    await out.run(until_empty=True)
    (req,) = receivers["tg"].requests
    assert clock() - start == pytest.approx(ACTION_HOLD_S)
    text = orjson.loads(req.body)["text"]
    assert "Order Filled 0.01" in text and "price below 60,000" in text and text.endswith("id: a1")


async def test_wake_delivers_new_rows_without_polling(backend: SqliteOutbox, receivers: dict[str, Receiver]) -> None:
    """With the real clock: an idle sender delivers a row as soon as the firing commit wakes it."""
    hook = {"hook": receivers["hook"]}
    store = backend.alert_store(ChannelRouting(known=frozenset({"hook"}), all_principals=("hook",)))
    out = OutboxSender(backend.outbox(), channels_for(hook), max_age_s=3600.0)  # type: ignore[arg-type]
    async with backend.waking(store, out):
        task = asyncio.create_task(out.run())
        try:
            a = Alert(id="w1", principal="p", symbol="ETHUSDT", interval="1m", kind="price_above", threshold=1.0,
                      created_at=time.time())  # fmt: skip
            await store.insert(a)
            await store.fire([Firing(alert_id="w1", value=2.0, triggered_at=time.time())])
            async with asyncio.timeout(5):
                await hook["hook"].arrived.wait()
            assert hook["hook"].requests[0].key == "w1"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_wake_idle_wakes_the_channels_waiting_for_rows_not_those_backing_off(
    backend: SqliteOutbox, receivers: dict[str, Receiver]
) -> None:
    out = OutboxSender(backend.outbox(), channels_for(receivers), max_age_s=3600.0)  # type: ignore[arg-type]
    out.states["tg"].next_attempt_at = time.time() + 60  # waiting out a backoff
    out.wake_idle()
    assert out.states["hook"].wake.is_set() and out.states["topic"].wake.is_set()
    assert not out.states["tg"].wake.is_set()
