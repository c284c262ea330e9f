"""A channel's rate, digests and fairness, and what the sender refuses to follow (issue 36).

On local receivers and a manual clock: a flood past ``max_per_minute`` is coalesced into digest
messages at the channel's rate — every notification in exactly one delivered message, each
principal's in firing order; a digest's rows are marked delivered only after its 2xx, all in one
``delivered`` call (one transaction); another principal's notification is not delayed behind the
flood by more than one rate interval; a text digest fits Telegram's 4,096 characters; a 3xx fails
its rows at once naming the ``Location``; a receiver on a private address is refused at connect
time unless the channel allows it.  The tests run on the SQLite outbox here and on PostgreSQL's in
tests/cluster/test_pg_outbox.py (the ``backend`` fixture).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from alerts.channels.sender import DIGEST_ROWS, OutboxSender, RateBucket
from alerts.outbox_store import Outbox, OutboxRow
from config import TelegramChannel, WebhookChannel
from testkit.channel_receivers import REDIRECT_TO, Receiver
from tests.alerts import test_outbox_delivery as delivery
from tests.alerts.test_outbox_delivery import SECRET, ManualClock, SqliteOutbox, channels_for

pytestmark = pytest.mark.timeout(90)
backend = delivery.backend
clock = delivery.clock
receivers = delivery.receivers


def frame(alert_id: str, note: str | None = None) -> str:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/alert_triggered",
            "params": {
                "alert_id": alert_id,
                "symbol": "BTCUSDT",
                "interval": "1m",
                "condition": {"type": "price_above", "threshold": 70000.0},
                "value": 70001.5,
                "triggered_at": "2027-01-15T08:00:00+00:00",
                "bar_time": None,
                "note": note,
            },
        }
    ).decode()


async def enqueue(backend: Any, channel: str, principal: str, n: int, now: float, note: str | None = None) -> list[str]:
    ids = []
    for _ in range(n):
        nid = f"{principal}-{uuid.uuid4().hex[:10]}"
        await backend.enqueue(OutboxRow(channel, nid, principal, frame(nid, note), now))
        ids.append(nid)
    return ids


class MarksSpy:
    """The outbox, recording each ``delivered`` call (one call = one transaction)."""

    def __init__(self, inner: Outbox) -> None:
        self.inner = inner
        self.calls: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def delivered(self, row_ids: Sequence[int], now: float) -> None:
        self.calls.append(list(row_ids))
        await self.inner.delivered(row_ids, now)


def make_sender(backend: Any, channels: dict[str, Any], clock: ManualClock, outbox: Any = None) -> OutboxSender:
    return OutboxSender(
        outbox or backend.outbox(), channels, max_age_s=86400.0, clock=clock, sleep=clock.sleep, rng=random.Random(3)
    )


def hook_channel(r: Receiver, per_minute: int | None = None) -> dict[str, Any]:
    return channels_for({"hook": r}, per_minute=per_minute)


async def test_a_flood_goes_as_digests_at_the_channel_rate_nothing_dropped_or_doubled(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    hook = receivers["hook"]
    ids = await enqueue(backend, "hook", "tok_flood", 450, clock(), note="x" * 500)
    start = clock()
    spy = MarksSpy(backend.outbox())
    out = make_sender(backend, hook_channel(hook), clock, spy)  # webhook default: 60 a minute
    await out.run(until_empty=True)
    assert hook.delivered_ids() == ids  # every one once, in firing order
    sent = hook.delivered()
    assert len(sent) < 10 and all(len(hook.covered(r)) <= DIGEST_ROWS["webhook"] for r in sent)
    digest = orjson.loads(sent[0].body)
    assert digest["method"] == "notifications/alerts_digest" and digest["params"]["max_per_minute"] == 60
    bucket = RateBucket(60)
    assert clock() - start <= len(sent) * bucket.interval_s  # at the rate (the burst first)
    status = (await out.status())["hook"]
    assert status["delivered"] == 450 and status["pending"] == 0 and status["digests"] == len(sent)
    # each message's rows were marked in one delivered call (one transaction), none split across calls
    rows_of = await row_ids_by_notification(backend)
    for request in sent:
        covered = {rows_of[i] for i in hook.covered(request)}
        assert any(covered <= set(call) for call in spy.calls)


async def row_ids_by_notification(backend: Any) -> dict[str, int]:
    db = backend.db
    sql = "SELECT id, notification_id FROM outbox"
    rows = await (db.fetchall(sql) if hasattr(db, "fetchall") else db.fetch(sql))
    return {r["notification_id"]: int(r["id"]) for r in rows}


async def test_a_failed_digest_leaves_every_row_pending_then_marks_them_together(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    hook = receivers["hook"]
    hook.forced = ["fail"]
    ids = await enqueue(backend, "hook", "tok_flood", 30, clock())
    spy = MarksSpy(backend.outbox())
    out = make_sender(backend, hook_channel(hook, per_minute=6), clock, spy)  # a burst of one
    await out.run(until_empty=True)
    first = hook.requests[0]
    assert not first.ok and hook.covered(first) == ids  # one digest of all 30, answered 503
    assert hook.delivered_ids() == ids
    assert spy.calls and all(len(c) == 30 for c in spy.calls[:1])  # the retried digest: its 30 rows in one call
    assert (await out.status())["hook"]["delivered"] == 30


async def test_another_principal_is_not_delayed_behind_a_flood(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    hook = receivers["hook"]
    await enqueue(backend, "hook", "tok_flood", 600, clock())
    mine: list[tuple[str, float]] = []
    real_sleep = clock.sleep
    out = make_sender(backend, hook_channel(hook, per_minute=20), clock)  # one message every 3 s past the burst

    async def sleep(seconds: float) -> None:
        await real_sleep(seconds)
        if len(hook.delivered()) >= 3 and not mine:  # mid-flood, the operator's own alert fires
            (nid,) = await enqueue(backend, "hook", "operator", 1, clock())
            mine.append((nid, clock()))
            await enqueue(backend, "hook", "tok_flood", 100, clock())  # and the flood goes on

    out._sleep = sleep
    await out.run(until_empty=True)
    nid, fired_at = mine[0]
    (arrived,) = [r for r in hook.delivered() if hook.covered(r) == [nid]]
    assert arrived.at - fired_at <= RateBucket(20).interval_s
    assert len(hook.delivered_ids()) == 701 and len(set(hook.delivered_ids())) == 701


async def test_a_telegram_digest_fits_one_message(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    tg = receivers["tg"]
    ids = await enqueue(backend, "tg", "tok_flood", 80, clock(), note="n" * 500)
    out = make_sender(backend, channels_for({"tg": tg}, per_minute=None), clock)  # telegram default: 20 a minute
    await out.run(until_empty=True)
    assert tg.delivered_ids() == ids
    texts = [orjson.loads(r.body)["text"] for r in tg.delivered()]
    digests = [t for t in texts if " more alerts fired" in t]
    assert digests and all(len(t) <= 4096 for t in texts)
    assert digests[0].startswith(f"{DIGEST_ROWS['telegram']} more alerts fired (this channel sends at most 20")
    assert "BTCUSDT 1m: price above 70,000 = 70,001.5 at 08:00:00 (nnnn" in digests[0]


async def test_a_redirect_fails_at_once_and_the_next_row_goes(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    """Regression (issue 36): a 3xx was retried as transient until channel_max_age_s."""
    hook = receivers["hook"]
    hook.forced = ["redirect"]
    first, second = await enqueue(backend, "hook", "p", 2, clock())
    start = clock()
    out = make_sender(backend, hook_channel(hook), clock)
    await out.run(until_empty=True)
    assert [hook.covered(r) for r in hook.requests] == [[first], [second]]  # the 3xx once, never again
    assert clock() - start < 1.0
    assert await backend.failed() == [(first, f"HTTP 302: redirect not followed: Location {REDIRECT_TO}")]
    assert (await out.status())["hook"]["failed"] == 1


async def test_a_private_address_is_refused_at_connect_unless_allowed(
    backend: SqliteOutbox, receivers: dict[str, Receiver], clock: ManualClock
) -> None:
    """A channel built without allow_private_address (as a public name resolving to loopback would be)."""
    hook, tg = receivers["hook"], receivers["tg"]
    channels: dict[str, Any] = {
        "hook": WebhookChannel(kind="webhook", url=hook.url, secret=SECRET),
        "tg": TelegramChannel(kind="telegram", api_url=tg.url, bot_token="1:tok", chat_id="42"),
    }
    (a,) = await enqueue(backend, "hook", "p", 1, clock())
    (b,) = await enqueue(backend, "tg", "p", 1, clock())
    await make_sender(backend, channels, clock).run(until_empty=True)
    assert hook.requests == [] and tg.requests == []
    failed = dict(await backend.failed())
    assert set(failed) == {a, b}
    assert "private address 127.0.0.1; set allow_private_address = true" in failed[a]
    assert "1:tok" not in failed[b]
