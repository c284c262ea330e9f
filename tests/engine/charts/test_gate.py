"""The render gate: per-client limits, round-robin between clients, bounded queues, cancellation.

Jobs are tasks holding a slot until the test lets them finish (events, no timings).  Tasks
started in one step run their first steps in creation order, so when a later task has
started, every earlier one has already asked the gate for a slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from engine.charts.gate import RenderBusy, RenderGate


class Job:
    """One render holding a gate slot from ``started`` until ``finish()``."""

    def __init__(self, gate: RenderGate, key: Hashable, order: list[str], name: str) -> None:
        self.started = asyncio.Event()
        self._finish = asyncio.Event()
        self._order, self._name = order, name
        self.task = asyncio.create_task(self._run(gate, key))

    async def _run(self, gate: RenderGate, key: Hashable) -> None:
        async with gate.slot(key):
            self._order.append(self._name)
            self.started.set()
            await self._finish.wait()

    async def finish(self) -> None:
        self._finish.set()
        async with asyncio.timeout(5):
            await self.task


async def started(*jobs: Job) -> None:
    async with asyncio.timeout(5):
        for job in jobs:
            await job.started.wait()


async def test_a_third_render_waits_while_another_clients_goes_through() -> None:
    """Two renders per client: A's third waits for one of A's first two; B's starts at once."""
    gate = RenderGate(3, per_key=2)
    order: list[str] = []
    a1, a2, a3 = (Job(gate, "A", order, f"a{i}") for i in (1, 2, 3))
    b1 = Job(gate, "B", order, "b1")
    await started(a1, a2, b1)
    assert not a3.started.is_set()
    assert gate.stats().queued == {"A": 1}
    assert gate.crowded("A") and not gate.crowded("B")  # A's jobs are bulk work, B's one job is not
    await a2.finish()
    await started(a3)
    assert order == ["a1", "a2", "b1", "a3"]
    for job in (a1, a3, b1):
        await job.finish()
    assert gate.stats() == type(gate.stats())(busy=0, running={}, queued={})


async def test_a_freed_slot_goes_to_the_other_client_not_to_the_older_backlog() -> None:
    """One worker: A's backlog was queued first, but B (not yet served) goes next, then they alternate."""
    gate = RenderGate(1, per_key=2)
    order: list[str] = []
    jobs = [Job(gate, "A", order, f"a{i}") for i in range(1, 4)]
    jobs += [Job(gate, "B", order, f"b{i}") for i in range(1, 3)]
    a1, a2, a3, b1, b2 = jobs
    await started(a1)
    await a1.finish()
    await started(b1)
    await b1.finish()
    await started(a2)
    await a2.finish()
    await started(b2)
    await b2.finish()
    await started(a3)
    await a3.finish()
    assert order == ["a1", "b1", "a2", "b2", "a3"]


async def test_with_several_workers_one_client_leaves_one_free() -> None:
    """Two workers and two renders allowed: a lone client still gets one worker, the other waits for others."""
    gate = RenderGate(2, per_key=2)
    order: list[str] = []
    a1, a2 = Job(gate, "A", order, "a1"), Job(gate, "A", order, "a2")
    b1 = Job(gate, "B", order, "b1")
    await started(a1, b1)
    assert not a2.started.is_set()
    await b1.finish()
    assert not a2.started.is_set()  # B's worker is free, but A may hold only one of two
    await a1.finish()
    await started(a2)
    await a2.finish()
    assert gate.cap == 1 and RenderGate(2, per_key=2, reserve=False).cap == 2


async def test_past_the_queue_depth_a_render_is_refused_with_a_retry_hint() -> None:
    """One rendering and two waiting: A's fourth is refused at once; B is not affected."""
    gate = RenderGate(1, per_key=1, max_queued=2)
    order: list[str] = []
    jobs = [Job(gate, "A", order, f"a{i}") for i in range(1, 4)]
    await started(jobs[0])
    with pytest.raises(RenderBusy) as refused:
        await gate.acquire("A")
    message = str(refused.value)
    assert "1 rendering and 2 waiting" in message
    assert "max_renders_per_principal" in message
    assert f"retry in about {refused.value.retry_after_s} s" in message and refused.value.retry_after_s >= 1
    assert gate.stats().queued == {"A": 2}
    b1 = Job(gate, "B", order, "b1")
    for job in (jobs[0], b1, jobs[1], jobs[2]):  # the order the gate starts them in
        await started(job)
        await job.finish()
    assert order == ["a1", "b1", "a2", "a3"]


async def test_a_cancelled_waiter_gives_up_its_place_and_a_cancelled_holder_its_slot() -> None:
    """A client that disconnects while waiting leaves the queue; one that held a slot frees it."""
    gate = RenderGate(1, per_key=1, max_queued=1)
    order: list[str] = []
    a1, a2 = Job(gate, "A", order, "a1"), Job(gate, "A", order, "a2")
    await started(a1)
    a2.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a2.task
    assert gate.stats().queued == {}
    a3 = Job(gate, "A", order, "a3")  # the queue has room again
    a1.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a1.task
    await started(a3)
    await a3.finish()
    assert order == ["a1", "a3"]
    assert gate.stats().busy == 0


async def test_a_waiter_cancelled_as_the_slot_frees_is_skipped() -> None:
    """Holder and waiter cancelled together (a shutdown): the slot is not handed to the dead waiter."""
    gate = RenderGate(1, per_key=1)
    order: list[str] = []
    a1, a2 = Job(gate, "A", order, "a1"), Job(gate, "A", order, "a2")
    await started(a1)
    a1.task.cancel()  # the holder's clean-up runs first and frees the slot
    a2.task.cancel()
    results = await asyncio.gather(a1.task, a2.task, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert gate.stats() == type(gate.stats())(busy=0, running={}, queued={})
    assert order == ["a1"]


@pytest.mark.parametrize("bad", [{"slots": 0}, {"per_key": 0}, {"max_queued": -1}])
def test_bad_sizes_are_refused(bad: dict[str, int]) -> None:
    args = {"slots": 1, "per_key": 1, "max_queued": 1} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        RenderGate(args["slots"], per_key=args["per_key"], max_queued=args["max_queued"])
