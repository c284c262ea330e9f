"""EventBus: bounded per-subscriber queues, drop-oldest with a lag notice, filters."""

from __future__ import annotations

import asyncio

import pytest

from engine.events import BarClosed, EventBus, IndicatorsUpdated, Lagged, SubscriptionClosed, Tick


def _tick(i: int, symbol: str = "BTCUSDT") -> Tick:
    return Tick(symbol, "1m", float(i), i, 0)


async def test_every_subscriber_receives_published_events_in_order() -> None:
    """Two subscribers each see all events, oldest first."""
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    for i in range(3):
        bus.publish(_tick(i))
    assert [(await a.get()).price for _ in range(3)] == [0.0, 1.0, 2.0]  # type: ignore[union-attr]
    assert [(await b.get()).price for _ in range(3)] == [0.0, 1.0, 2.0]  # type: ignore[union-attr]


async def test_a_slow_subscriber_loses_oldest_events_and_is_told_how_many() -> None:
    """A full queue drops the oldest; the reader gets Lagged(n) before what is left."""
    bus = EventBus()
    slow = bus.subscribe(maxsize=3)
    for i in range(10):
        bus.publish(_tick(i))
    assert await slow.get() == Lagged(7)
    assert [(await slow.get()).price for _ in range(3)] == [7.0, 8.0, 9.0]  # type: ignore[union-attr]
    assert slow.get_nowait() is None


async def test_publishing_never_waits_for_a_consumer() -> None:
    """publish() is synchronous and returns even when nobody reads."""
    bus = EventBus(default_queue_size=1)
    sub = bus.subscribe()
    for i in range(10_000):
        bus.publish(_tick(i))
    assert sub.qsize() == 1 and sub.dropped_pending == 9_999


async def test_kind_and_symbol_filters_select_events() -> None:
    """A subscriber only receives the kinds and symbols it asked for."""
    bus = EventBus()
    closes = bus.subscribe([BarClosed], symbols=["ethusdt"])
    bus.publish(_tick(1, "ETHUSDT"))
    bus.publish(BarClosed("BTCUSDT", "1m", 0, 1, 1, 1, 1, 1))
    ev = BarClosed("ETHUSDT", "1m", 60, 1, 2, 0.5, 1.5, 3)
    bus.publish(ev)
    bus.publish(IndicatorsUpdated("ETHUSDT", "1m", 60, ("rsi",)))
    assert await closes.get() == ev
    assert closes.get_nowait() is None


async def test_a_waiting_reader_wakes_on_publish_and_ends_on_close() -> None:
    """get() waits for the next event; closing ends iteration."""
    bus = EventBus()
    sub = bus.subscribe()
    reader = asyncio.create_task(anext(aiter(sub)))
    await asyncio.sleep(0)
    bus.publish(_tick(5))
    assert (await asyncio.wait_for(reader, 1)).price == 5.0  # type: ignore[union-attr]
    sub.close()
    with pytest.raises(SubscriptionClosed):
        await sub.get()
    assert bus.subscriber_count == 0
    assert [e async for e in sub] == []


def test_events_are_immutable() -> None:
    """Events are frozen."""
    t = _tick(1)
    with pytest.raises(AttributeError):
        t.price = 2.0  # type: ignore[misc]


def test_unknown_event_kinds_are_rejected_with_a_clear_error() -> None:
    """Subscribing to something that is not an engine event fails loudly."""
    with pytest.raises(ValueError, match="kinds must be among"):
        EventBus().subscribe([int])
