"""The cluster's event bus (cluster/bus.py) against a real nats-server with JetStream (testkit/nats.py).

Streams created idempotently (twice, concurrently, updated to new limits) and as configured;
publish, durable pull consumers, acks and redelivery; a durable taken over by a second
connection; de-duplication by message id; commands read by every worker; subject tokens for
any text; an outage (server stopped and restarted on the same port and store) and bad URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import nats
import nats.js.errors
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nats.js import api as js_api

from cluster.bus import Bus, Consumer, Message
from cluster.bus_commands import MAX_MARKETS_LISTED, Command, CommandSubscription, send_command
from cluster.bus_errors import BusError, BusUnavailable
from cluster.bus_streams import COMMANDS_STREAM, MARKET_STREAM, NOTIFY_STREAM, TICKS_STREAM, BusLimits
from cluster.bus_subjects import (
    command_subject,
    decode_token,
    encode_token,
    market_of,
    market_subject,
    notify_subject,
    principal_of,
)
from testkit.nats import SMALL_BUS_LIMITS, NatsServer
from testkit.nginx import free_port

pytestmark = [pytest.mark.servers, pytest.mark.process]

TEST_LIMITS = BusLimits(**SMALL_BUS_LIMITS)

Connect = Callable[..., Awaitable[Bus]]


@pytest.fixture
async def connect(nats_server: NatsServer) -> AsyncIterator[Connect]:
    """Bus.connect to the test's server with short timeouts; every bus closed at the end."""
    opened: list[Bus] = []

    async def _connect(name: str = "test", **options: Any) -> Bus:
        options = {
            "limits": TEST_LIMITS,
            "connect_timeout_s": 5.0,
            "publish_timeout_s": 2.0,
            "reconnect_wait_s": 0.1,
            **options,
        }
        bus = await Bus.connect(nats_server.url, name=name, **options)
        opened.append(bus)
        return bus

    try:
        yield _connect
    finally:
        for bus in opened:
            await bus.close()


async def fetch_at_least(consumer: Consumer, count: int, timeout_s: float = 10.0) -> list[Message]:
    """Fetch until ``count`` messages came (bounded)."""
    got: list[Message] = []
    async with asyncio.timeout(timeout_s):
        while len(got) < count:
            got += await consumer.fetch(max_wait_s=0.5)
    return got


async def wait_for_state(bus: Bus, state: str, timeout_s: float = 15.0) -> None:
    """Poll the bus's status (it follows the client's connection callbacks) until ``state``."""
    async with asyncio.timeout(timeout_s):
        while True:
            if bus.status().state == state:
                return
            await asyncio.sleep(0.02)  # polling an external condition, bounded by the timeout


# --- streams ---------------------------------------------------------------------------------------


async def test_streams_are_created_idempotently_and_concurrently_with_the_configured_limits(
    connect: Connect, nats_server: NatsServer
) -> None:
    a = await connect("front-a")
    b = await connect("front-b")
    raw = await nats.connect(nats_server.url)
    try:
        for _ in range(5):  # two processes starting together, from scratch, several times (the creates race)
            for name in (MARKET_STREAM, TICKS_STREAM, NOTIFY_STREAM, COMMANDS_STREAM):
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await raw.jetstream().delete_stream(name)
            await asyncio.gather(a.ensure_streams(), b.ensure_streams())
    finally:
        await raw.close()
    await a.ensure_streams()
    await asyncio.gather(a.ensure_streams(), b.ensure_streams())

    for spec in a.streams:
        assert await b.stream_spec(spec.name) == spec
    market, notify, commands = [await a.stream_spec(n) for n in (MARKET_STREAM, NOTIFY_STREAM, COMMANDS_STREAM)]
    assert market.subjects == ("chartgen.market.bar.>", "chartgen.market.indicator.>")
    assert (market.retention, market.discard) == ("limits", "old")
    assert (market.max_age_s, market.max_bytes, market.max_msgs_per_subject) == (3600.0, 8 << 20, 10_000)
    ticks = await a.stream_spec(TICKS_STREAM)
    assert (ticks.subjects, ticks.max_msgs_per_subject, ticks.max_bytes) == (("chartgen.market.tick.>",), 1, 1 << 20)
    assert (notify.subjects, notify.retention, notify.max_age_s) == (("chartgen.notify.>",), "limits", 3600.0)
    assert (notify.duplicate_window_s, notify.max_msgs_per_subject, notify.storage) == (120.0, 10_000, "file")
    assert (commands.subjects, commands.retention, commands.discard) == (("chartgen.cmd.>",), "limits", "old")


async def test_streams_follow_changed_limits(connect: Connect) -> None:
    first = await connect("old")
    await first.ensure_streams()
    changed = TEST_LIMITS.model_copy(update={"market_max_age_s": 1800.0, "notify_max_msgs_per_subject": 500})
    second = await connect("new", limits=changed)
    await asyncio.gather(second.ensure_streams(), second.ensure_streams())

    market = await first.stream_spec(MARKET_STREAM)
    notify = await first.stream_spec(NOTIFY_STREAM)
    assert (market.max_age_s, notify.max_msgs_per_subject) == (1800.0, 500)
    assert [await first.stream_spec(s.name) for s in second.streams] == list(second.streams)


async def test_an_older_market_stream_gives_the_ticks_to_their_own_stream_which_keeps_the_newest(
    connect: Connect, nats_server: NatsServer
) -> None:
    raw = await nats.connect(nats_server.url)
    try:  # the market stream as an older chartgen made it: every market subject, ticks included
        await raw.jetstream().add_stream(name=MARKET_STREAM, subjects=["chartgen.market.>"], max_msgs_per_subject=10)
    finally:
        await raw.close()
    bus = await connect()
    await bus.ensure_streams()
    assert (await bus.stream_spec(MARKET_STREAM)).subjects == ("chartgen.market.bar.>", "chartgen.market.indicator.>")
    tick = market_subject("tick", "BTCUSDT", None)
    for i in range(5):
        await bus.publish(tick, f"{i}".encode(), msg_id=f"t{i}")
    await bus.publish(market_subject("bar", "BTCUSDT", "1m"), b"bar", msg_id="b0")
    assert await bus.stream_messages(TICKS_STREAM) == 1  # the newest price only
    assert await bus.stream_messages(MARKET_STREAM) == 1


async def test_a_stream_with_another_retention_is_reported_not_changed(
    connect: Connect, nats_server: NatsServer
) -> None:
    raw = await nats.connect(nats_server.url)
    try:
        await raw.jetstream().add_stream(
            name=NOTIFY_STREAM, subjects=["chartgen.notify.>"], retention=js_api.RetentionPolicy.WORK_QUEUE
        )
    finally:
        await raw.close()
    bus = await connect()
    with pytest.raises(BusError, match=r"CHARTGEN_NOTIFY exists with retention workqueue .* cannot change in place"):
        await bus.ensure_streams()


async def test_an_older_work_queue_commands_stream_is_made_again(connect: Connect, nats_server: NatsServer) -> None:
    """Its messages were wake-ups, worth nothing now: replaced, not refused (cluster/bus_streams.py)."""
    raw = await nats.connect(nats_server.url)
    try:
        js = raw.jetstream()
        await js.add_stream(
            name=COMMANDS_STREAM,
            subjects=["chartgen.cmd.>"],
            retention=js_api.RetentionPolicy.WORK_QUEUE,
            discard=js_api.DiscardPolicy.NEW,
        )
        await js.publish("chartgen.cmd.follow", b"old")
    finally:
        await raw.close()
    bus = await connect()
    await bus.ensure_streams()
    commands = await bus.stream_spec(COMMANDS_STREAM)
    assert commands == next(s for s in bus.streams if s.name == COMMANDS_STREAM)
    assert (commands.retention, commands.discard) == ("limits", "old")
    assert await bus.stream_messages(COMMANDS_STREAM) == 0
    await bus.ensure_streams()  # and now as configured: left alone
    assert await bus.stream_spec(COMMANDS_STREAM) == commands


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="duplicate_window_s"):
        BusLimits(notify_max_age_s=60, duplicate_window_s=120)
    with pytest.raises(ValueError):
        BusLimits(market_max_bytes=0)
    with pytest.raises(ValueError):
        BusLimits(surprise=1)  # type: ignore[call-arg]


# --- publish, consume, ack ---------------------------------------------------------------------


async def test_publish_consume_ack_and_redelivery_of_the_unacked(connect: Connect) -> None:
    bus = await connect()
    await bus.ensure_streams()
    subject = notify_subject("alice")
    published = [await bus.publish(subject, f"n{i}".encode(), msg_id=f"alice-{i}") for i in range(3)]
    assert [p.stream for p in published] == [NOTIFY_STREAM] * 3
    assert [p.seq for p in published] == [1, 2, 3]
    assert not any(p.duplicate for p in published)

    consumer = await bus.consume(NOTIFY_STREAM, "front", subject, batch=10, ack_wait_s=1.0)
    async with consumer:
        first = await fetch_at_least(consumer, 3)
        assert [(m.subject, m.data, m.msg_id, m.stream_seq, m.deliveries) for m in first] == [
            (subject, b"n0", "alice-0", 1, 1),
            (subject, b"n1", "alice-1", 2, 1),
            (subject, b"n2", "alice-2", 3, 1),
        ]
        await first[0].ack()
        await first[1].ack()

        again = await fetch_at_least(consumer, 1)  # after ack_wait (1 s), only the unacked one comes back
        assert [(m.data, m.stream_seq, m.deliveries) for m in again] == [(b"n2", 3, 2)]
        await again[0].ack()
        assert await consumer.fetch(max_wait_s=1.5) == []  # longer than ack_wait: nothing acked returns


async def test_a_second_consumer_of_the_durable_continues_where_the_first_stopped(connect: Connect) -> None:
    a = await connect("front-a")
    b = await connect("front-b")
    await a.ensure_streams()
    subject = notify_subject("bob")
    for i in range(6):
        await a.publish(subject, str(i).encode(), msg_id=f"bob-{i}")

    async with await a.consume(NOTIFY_STREAM, "fronts", subject, batch=3) as first:
        taken = await fetch_at_least(first, 3)
        assert [m.data for m in taken] == [b"0", b"1", b"2"]
        for m in taken:
            await m.ack()

    async with await b.consume(NOTIFY_STREAM, "fronts", subject, batch=10) as second:
        rest = await fetch_at_least(second, 3)
        assert [m.data for m in rest] == [b"3", b"4", b"5"]
        for m in rest:
            await m.ack()
        assert await second.fetch(max_wait_s=0.3) == []


async def test_the_same_msg_id_within_the_window_is_stored_once(connect: Connect) -> None:
    bus = await connect()
    await bus.ensure_streams()
    subject = notify_subject("carol")
    first = await bus.publish(subject, b"fired", msg_id="alert-7/push-42")
    second = await bus.publish(subject, b"fired", msg_id="alert-7/push-42")
    other = await bus.publish(subject, b"fired", msg_id="alert-7/push-43")
    assert (first.duplicate, second.duplicate, other.duplicate) == (False, True, False)
    assert second.seq == first.seq
    assert other.seq == first.seq + 1
    assert await bus.stream_messages(NOTIFY_STREAM) == 2


async def test_every_worker_reads_every_command_and_the_stream_keeps_each_once(connect: Connect) -> None:
    """cluster/bus_commands.py: two workers' subscriptions both get every command, in order; a message
    on a command subject that is not a command is counted and not handed on; a command published again
    with its message id (a lost acknowledgement) is stored once."""
    sender = await connect("cli")
    await sender.ensure_streams()
    got: dict[str, list[Command]] = {"worker-1": [], "worker-2": []}
    both = asyncio.Event()
    subscriptions = []
    for name in got:

        def on_command(command: Command, into: list[Command] = got[name]) -> None:
            into.append(command)
            if all(v and v[-1] == sent[-1] for v in got.values()):
                both.set()

        subscription = CommandSubscription(await connect(name), on_command)
        await subscription.open()
        subscriptions.append(subscription)
    sent = [
        Command.of("follow", [("BTCUSDT", "1m"), ("ETHUSDT", "1h")], "cli"),
        Command.of("unfollow", [("BTCUSDT", "1m")], "cli"),
        Command.of("follow", [(f"S{i}USDT", "1m") for i in range(MAX_MARKETS_LISTED + 5)], "cli"),
    ]
    first = await send_command(sender, sent[0])
    again = await send_command(sender, sent[0])
    assert (again.seq, again.duplicate) == (first.seq, True)
    await sender.publish(command_subject("follow"), b'{"name": "follow"}', msg_id="broken-1")
    await sender.publish(command_subject("unfollow"), sent[0].model_dump_json().encode(), msg_id="wrong-subject")
    for command in sent[1:]:
        await send_command(sender, command)
    async with asyncio.timeout(10):
        await both.wait()
    # the duplicate reached subscribers (a plain subscription sees every publish); the stream kept it once
    for received in got.values():
        assert [c for i, c in enumerate(received) if i == 0 or c != received[i - 1]] == sent
    assert len(sent[2].markets) == MAX_MARKETS_LISTED
    assert all(s.invalid == 2 and s.subscribed for s in subscriptions)
    assert await sender.stream_messages(COMMANDS_STREAM) == 5
    for subscription in subscriptions:
        await subscription.close()


async def test_market_subjects_carry_awkward_symbols_through_the_server(connect: Connect) -> None:
    bus = await connect()
    await bus.ensure_streams()
    bar = market_subject("bar", "BTC/USDT.P *perp*", "1h")
    tick = market_subject("tick", "ÉTH >", None)
    await bus.publish(bar, b"bar", msg_id="bar-1")
    await bus.publish(tick, b"tick", msg_id="tick-1")
    async with await bus.consume(MARKET_STREAM, "bars", "chartgen.market.bar.>") as bars:
        got = await fetch_at_least(bars, 1)
        assert [(market_of(m.subject), m.data) for m in got] == [(("bar", "BTC/USDT.P *perp*", "1h"), b"bar")]
        await got[0].ack()
    assert market_of(tick) == ("tick", "ÉTH >", None)


# --- subjects --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1))
@example("alice.bob")
@example("*")
@example(">")
@example("with space\tand tab\n")
@example("ünïcødé 🚀 通知")
@example("\ud800 lone surrogate")
@example("\x00")
def test_tokens_round_trip_and_are_one_valid_subject_token(text: str) -> None:
    token = encode_token(text)
    assert decode_token(token) == text
    assert re.fullmatch(r"[a-z2-7]+", token)
    assert not any(c in token for c in ".*>") and not any(c.isspace() for c in token)
    subject = notify_subject(text)
    assert subject.split(".") == ["chartgen", "notify", token]
    assert principal_of(subject) == text
    assert market_of(market_subject("indicator", text, text)) == ("indicator", text, text)


def test_subject_helpers_refuse_what_they_cannot_encode() -> None:
    for bad in ("", "A", "a.b", "1", "a=", "ab"):  # "ab": a length base32 never produces
        with pytest.raises(ValueError):
            decode_token(bad)
    with pytest.raises(ValueError):
        encode_token("")
    with pytest.raises(ValueError):
        market_subject("trade", "BTCUSDT", "1m")
    with pytest.raises(ValueError):
        market_subject("tick", "BTCUSDT", "1m")
    with pytest.raises(ValueError):
        market_subject("bar", "BTCUSDT", None)
    with pytest.raises(ValueError):
        command_subject("follow.all")
    with pytest.raises(ValueError):
        principal_of("chartgen.market.x")


# --- outage ----------------------------------------------------------------------------------


async def test_outage_refuses_publishes_degrades_and_recovers_by_itself(
    connect: Connect, nats_server: NatsServer
) -> None:
    bus = await connect("worker", publish_timeout_s=1.0)
    await bus.ensure_streams()
    subject = notify_subject("dave")
    for i in range(1, 6):
        await bus.publish(subject, f"m{i}".encode(), msg_id=f"dave-{i}")
    consumer = await bus.consume(NOTIFY_STREAM, "front", subject, batch=2, ack_wait_s=1.0)
    async with consumer:
        one_two = await fetch_at_least(consumer, 2)
        for m in one_two:
            await m.ack()
        three_four = await fetch_at_least(consumer, 2)
        await three_four[0].ack()  # m4 stays delivered and unacked; m5 is never delivered before the outage
        assert [m.data for m in one_two + three_four] == [b"m1", b"m2", b"m3", b"m4"]

        await nats_server.stop()
        started = time.monotonic()
        with pytest.raises(BusUnavailable):
            # the client may not have noticed yet: then the publish waits for its ack, at most publish_timeout_s
            await bus.publish(notify_subject("probe"), b"lost?", msg_id="probe-1")
        assert time.monotonic() - started < bus.publish_timeout_s + 1.0
        await wait_for_state(bus, "degraded")
        status = bus.status()
        assert status.reason is not None and "disconnected" in status.reason
        assert (datetime.now(UTC) - status.since).total_seconds() < 30
        started = time.monotonic()
        with pytest.raises(BusUnavailable, match="unavailable"):
            await bus.publish(subject, b"refused", msg_id="dave-refused")
        assert time.monotonic() - started < 0.5  # refused at once while disconnected
        with pytest.raises(BusUnavailable):
            await consumer.fetch(max_wait_s=0.5)

        await nats_server.start()
        await wait_for_state(bus, "connected")
        assert bus.status().reason is None
        sixth = await bus.publish(subject, b"m6", msg_id="dave-6")
        assert sixth.stream == NOTIFY_STREAM and not sixth.duplicate

        after: list[Message] = []
        async with asyncio.timeout(15):
            while {m.data for m in after} != {b"m4", b"m5", b"m6"}:
                for m in await consumer.fetch(max_wait_s=0.5):
                    after.append(m)
                    await m.ack()
        assert sorted(m.data for m in after) == [b"m4", b"m5", b"m6"]  # nothing acked came back
        assert next(m for m in after if m.data == b"m4").deliveries >= 2
        assert await consumer.fetch(max_wait_s=1.5) == []

    async with await bus.consume(NOTIFY_STREAM, "audit", subject, batch=10) as audit:
        everything = await fetch_at_least(audit, 6)  # acked or not, all stored messages survived the restart
        assert [m.data for m in everything] == [b"m1", b"m2", b"m3", b"m4", b"m5", b"m6"]
        for m in everything:
            await m.ack()


async def test_an_unanswered_publish_degrades_and_its_retry_with_the_same_msg_id_is_stored_once(
    connect: Connect, nats_server: NatsServer
) -> None:
    bus = await connect("worker", publish_timeout_s=0.5)
    await bus.ensure_streams()
    subject = notify_subject("frank")
    nats_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BusUnavailable, match="did not answer"):
            await bus.publish(subject, b"fired", msg_id="frank-1")
        assert time.monotonic() - started < bus.publish_timeout_s + 1.0
        status = bus.status()
        assert status.state == "degraded" and status.reason is not None and "did not answer" in status.reason
    finally:
        nats_server.resume()
    retried = await bus.publish(subject, b"fired", msg_id="frank-1")  # the first was sent, so it is stored
    assert retried.duplicate
    assert bus.status().state == "connected"
    assert await bus.stream_messages(NOTIFY_STREAM) == 1


async def test_a_bus_closes_promptly_while_nats_is_down(connect: Connect, nats_server: NatsServer) -> None:
    bus = await connect()
    await bus.ensure_streams()
    consumer = await bus.consume(NOTIFY_STREAM, "front", notify_subject("gina"))
    await nats_server.stop()
    await wait_for_state(bus, "degraded")
    async with asyncio.timeout(5):
        await consumer.close()
        await bus.close()
    assert bus.status().reason == "closed"


# --- bad configuration -----------------------------------------------------------------------


async def test_a_bad_url_names_the_setting() -> None:
    for url in ("http://127.0.0.1:4222", "nats://", "nats://host:notaport", "", "nats://127.0.0.1:4222/path"):
        with pytest.raises(BusError, match="nats_url"):
            await Bus.connect(url, name="test")
    unreachable = f"nats://someone:s3cret@127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(BusError, match="nats_url") as caught:
        await Bus.connect(unreachable, name="test", connect_timeout_s=1.0, reconnect_wait_s=0.1)
    assert time.monotonic() - started < 3.0
    assert "s3cret" not in str(caught.value)
    assert not isinstance(caught.value, BusUnavailable)


async def test_a_url_of_something_that_is_not_nats_names_the_setting() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # accepts and never says INFO, like a service on the wrong port

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        with pytest.raises(BusError, match="nats_url"):
            await Bus.connect(f"nats://127.0.0.1:{port}", name="test", connect_timeout_s=1.0, reconnect_wait_s=0.1)
        assert time.monotonic() - started < 3.0
        assert accepted
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_closed_bus_refuses_clearly(connect: Connect) -> None:
    bus = await connect()
    await bus.ensure_streams()
    await bus.close()
    await bus.close()
    assert bus.status().state == "degraded" and bus.status().reason == "closed"
    with pytest.raises(BusError, match="closed"):
        await bus.publish(notify_subject("erin"), b"x", msg_id="x")
