"""A default-scope token granted a channel floods it; the operator's own alert still gets through (issue 36).

The probe: 1,000 alerts fired by one price move sent 1,000 messages, each with the token's
500-character note, and the operator's alert waited behind them.  Here, on the real clock and a
local webhook receiver at 30 messages a minute (one every 2 s past a burst of five): a principal
granted the channel (``subscribers``) fires 1,000 alerts, 200 a second, while the sender runs;
mid-flood the operator's alert fires (the channel is in ``notify_all_channels``) and must reach
the receiver within one rate interval of its firing commit.  Every flood notification arrives
exactly once (digests expanded), in firing order; the channel sends at most its burst plus one
message per interval.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from alerts import Alert, AlertStore, ChannelRouting, Firing, OutboxSender, OutboxStore, RateBucket, Subscription
from config import WebhookChannel
from storage import Database
from testkit.channel_receivers import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
FLOOD = 1000
PER_MINUTE = 30
"""One message every 2 s past a burst of five: 50 notifications a second in digests, under the flood's 200."""
SLACK_S = 0.5
"""Scheduling allowance on a loaded 2-core runner, on top of the one interval."""


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver("webhook", clock=time.time).start()
    try:
        yield r
    finally:
        await r.close()


def alert(principal: str, note: str | None = None) -> Alert:
    return Alert(
        id=f"{principal}-{uuid.uuid4().hex[:12]}",
        principal=principal,
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=70_000.0,
        created_at=time.time(),
        note=note,
    )


async def fire(store: AlertStore, alerts: list[Alert]) -> None:
    for a in alerts:
        await store.insert(a)
    await store.fire([Firing(alert_id=a.id, value=70_001.0, triggered_at=time.time()) for a in alerts])


async def flood_task(store: AlertStore, fired: list[str], stop: asyncio.Event) -> None:
    """The flooder: 50 alerts with 500-character notes every 0.25 s (200 a second) until ``FLOOD`` fired."""
    while len(fired) < FLOOD and not stop.is_set():
        batch = [alert("tok_flood", note="n" * 500) for _ in range(50)]
        await fire(store, batch)
        fired += [a.id for a in batch]
        await asyncio.sleep(0.25)  # the flood's own pace, not synchronisation


async def test_a_granted_flood_does_not_delay_the_operators_alert(db: Database, receiver: Receiver) -> None:
    channel = WebhookChannel(
        kind="webhook",
        url=receiver.url,
        secret="s",
        subscribers=["flooder"],
        allow_private_address=True,
        max_per_minute=PER_MINUTE,
    )
    routing = ChannelRouting(known=frozenset({"ops"}), all_principals=("ops",), subscribable=frozenset({"ops"}))
    store = AlertStore(db, routing=routing)
    await store.subscribe(Subscription(principal="tok_flood", channels=("ops",)), time.time())
    sender = OutboxSender(OutboxStore(db), {"ops": channel}, max_age_s=3600.0)
    store.on_enqueued = sender.wake
    bucket = RateBucket(PER_MINUTE)
    task = asyncio.create_task(sender.run())
    flood: list[str] = []
    stop = asyncio.Event()
    flooder = asyncio.create_task(flood_task(store, flood, stop))
    deadline = time.monotonic() + 90
    try:
        while len(receiver.delivered()) <= bucket.burst:  # the burst is spent: the channel is at its rate
            assert time.monotonic() < deadline, "the flood was not being delivered"
            await asyncio.sleep(0.05)
        assert not flooder.done(), "the flood should still be going"
        mine = alert("operator")
        await fire(store, [mine])
        row = await db.fetchone("SELECT created_at FROM outbox WHERE notification_id = ?", (mine.id,))
        assert row is not None
        fired_at = float(row["created_at"])
        while not any(receiver.covered(r) == [mine.id] for r in receiver.delivered()):
            assert time.monotonic() < deadline, "the operator's alert never arrived"
            await asyncio.sleep(0.02)
        (arrived,) = [r for r in receiver.delivered() if receiver.covered(r) == [mine.id]]
        backlog = len(flood) - len(receiver.delivered_ids())
        assert arrived.at - fired_at <= bucket.interval_s + SLACK_S, f"waited {arrived.at - fired_at:.2f} s"
        assert backlog > 100, f"the flood's backlog was only {backlog} when the operator's alert arrived"
        await flooder
        while len(receiver.delivered_ids()) < FLOOD + 1:
            assert time.monotonic() < deadline, "the flood was not delivered in full"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        for t in (flooder, task):
            t.cancel()
        await asyncio.gather(flooder, task, return_exceptions=True)
    delivered = receiver.delivered_ids()
    assert len(delivered) == len(set(delivered)) == FLOOD + 1  # nothing dropped, nothing doubled
    assert [i for i in delivered if i.startswith("tok_flood")] == flood  # in firing order
    sent = receiver.delivered()
    assert len(sent) <= bucket.burst + (sent[-1].at - sent[0].at) / bucket.interval_s + 1  # at most the rate
