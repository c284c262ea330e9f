"""generate_chart under load: per-client render limits, refusals with a retry hint, heavy work off the loop.

The limiter tests drive the tool router with a renderer whose jobs hold their gate slot
until the test releases them (events, no timings); the off-loop test renders through the
real process pool and probes where the series payload is built.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine import (
    Bars,
    ChartJob,
    ChartJobOutput,
    ChartService,
    ProcessPoolRenderer,
    RenderGate,
    sample_bars,
    series_payload,
)
from mcp_bridge.identity import current_principal
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services

SMALL = {"bars": 30, "width": 200, "height": 150, "indicators": ["rsi"]}


class HeldRenderer:
    """A renderer whose jobs take their caller's turn at the gate and then wait for ``release(principal)``."""

    def __init__(self, gate: RenderGate) -> None:
        self.gate = gate
        self.started: list[str | None] = []
        self._changed = asyncio.Event()
        self._release: dict[str | None, asyncio.Event] = {}

    async def run(self, job: ChartJob) -> ChartJobOutput:
        who = current_principal()
        async with self.gate.slot(who):
            self.started.append(who)
            self._changed.set()
            await self._release.setdefault(who, asyncio.Event()).wait()
            return ChartJobOutput(text=json.dumps({"who": who}))

    async def wait_started(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.started) < count:
                self._changed.clear()
                await self._changed.wait()

    def release(self, who: str) -> None:
        self._release.setdefault(who, asyncio.Event()).set()


class SampleMarket:
    """Market data without a network: chartgen's sample bars under any symbol."""

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        return sample_bars(bars)


def chart(router: ToolRouter, principal: str, fmt: str = "series") -> asyncio.Task[Any]:
    return asyncio.create_task(router.call("generate_chart", {**SMALL, "format": fmt}, principal))


async def test_a_third_render_from_one_client_waits_while_anothers_goes_through() -> None:
    """max_renders_per_principal = 2: A's third chart starts only when one of A's first two ends."""
    renderer = HeldRenderer(RenderGate(3, per_key=2))
    router = ToolRouter(Services(charts=ChartService(None, renderer)))
    a1, a2, a3 = chart(router, "A"), chart(router, "A", "png"), chart(router, "A")
    await renderer.wait_started(2)
    b1 = chart(router, "B")
    await renderer.wait_started(3)
    assert renderer.started == ["A", "A", "B"]
    assert not a3.done()
    renderer.release("B")
    result = await b1
    assert not result.is_error and json.loads(result.content[0].text) == {"who": "B"}
    assert not a3.done()
    renderer.release("A")
    for task in (a1, a2, a3):
        assert not (await task).is_error
    assert renderer.started == ["A", "A", "B", "A"]


async def test_past_the_queue_depth_a_chart_is_refused_with_a_retry_hint() -> None:
    """A client with a full queue gets an isError naming the limit and when to retry; others are unaffected."""
    renderer = HeldRenderer(RenderGate(1, per_key=1, max_queued=1))
    router = ToolRouter(Services(charts=ChartService(None, renderer)))
    running, waiting = chart(router, "A", "png"), chart(router, "A", "both")
    await renderer.wait_started(1)
    refused = await router.call("generate_chart", {**SMALL, "format": "series"}, "A")
    assert refused.is_error
    text = refused.content[0].text
    assert text.startswith("generate_chart refused: too many charts in progress for this client")
    assert "1 rendering and 1 waiting" in text and "max_renders_per_principal" in text and "retry in about" in text
    error = refused.structured_content["error"]
    assert error["code"] == -32001 and error["data"]["retry_after_secs"] >= 1
    summary = await router.call("generate_chart", {**SMALL, "format": "summary"}, "A")
    assert not summary.is_error  # a small summary needs no render worker and is never queued
    other = chart(router, "B")
    renderer.release("A")
    renderer.release("B")
    for task in (running, waiting, other):
        assert not (await task).is_error


async def test_large_summaries_and_indicator_payloads_take_their_turn_like_charts() -> None:
    """5000 bars of three indicators (a summary, or get_indicators without the engine) is built by a worker."""
    renderer = HeldRenderer(RenderGate(2, per_key=1))
    router = ToolRouter(Services(charts=ChartService(SampleMarket(), renderer)))
    small = await router.call("generate_chart", {**SMALL, "format": "summary"}, "A")
    assert not small.is_error and renderer.started == []
    big = {"bars": 5000, "format": "summary"}
    summary = asyncio.create_task(router.call("generate_chart", big, "A"))
    await renderer.wait_started(1)
    args = {"symbol": "BTCUSDT", "interval": "1h", "indicators": ["rsi", "macd", "bbands"], "bars": 5000}
    indicators = asyncio.create_task(router.call("get_indicators", args, "B"))
    await renderer.wait_started(2)
    assert renderer.started == ["A", "B"]
    renderer.release("A")
    renderer.release("B")
    assert json.loads((await summary).content[0].text) == {"who": "A"}
    assert json.loads((await indicators).content[0].text) == {"who": "B"}


@pytest.fixture
async def pool() -> AsyncIterator[ProcessPoolRenderer]:
    async with ProcessPoolRenderer(1) as renderer:
        yield renderer


@pytest.mark.process
async def test_series_payloads_are_built_off_the_event_loop(
    pool: ProcessPoolRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 5000-bar series payload (and its JSON) is built in a render worker, never on the loop's thread."""
    calls: list[int] = []

    def probe(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.get_ident())
        return original(*args, **kwargs)

    original = series_payload
    for module in ("engine.charts.series", "engine.charts.service", "engine.charts.jobs"):
        monkeypatch.setattr(f"{module}.series_payload", probe, raising=False)
    router = ToolRouter(Services(charts=ChartService(None, pool)))
    result = await router.call("generate_chart", {"bars": 5000, "format": "series"}, "A")
    assert not result.is_error, result.content[0].text
    payload = json.loads(result.content[0].text)
    assert len(payload["bars"]) == 5000 and set(payload["indicators"]) == {"ema_stack", "cipher_b", "macd"}
    assert calls == [], "the series payload was built in the daemon's process"
    both = await router.call("generate_chart", {**SMALL, "format": "both"}, "A")
    assert [c.type for c in both.content] == ["image", "text"]
    assert json.loads(both.content[1].text)["price"]["bars"] == 30


@pytest.mark.process
async def test_a_cold_pool_starts_its_workers_with_the_first_chart() -> None:
    """``render_warm_start = false``: entering the pool starts no process; the first chart starts the
    workers and is drawn (matplotlib imported there), and two charts at once start the pool once."""
    async with ProcessPoolRenderer(2, warm=False) as cold:
        assert multiprocessing.active_children() == []
        router = ToolRouter(Services(charts=ChartService(None, cold)))
        first, second = await asyncio.gather(
            router.call("generate_chart", {**SMALL, "format": "both"}, "A"),
            router.call("generate_chart", {**SMALL, "format": "png"}, "B"),
        )
        assert [c.type for c in first.content] == ["image", "text"], first.content[0]
        assert [c.type for c in second.content] == ["image"], second.content[0]
        assert 1 <= len(multiprocessing.active_children()) <= 2
    assert multiprocessing.active_children() == []
