"""The CPU-heavy half of a chart request, as one picklable job for a render worker process.

A job carries the bars, the indicator requests and their pre-fetched external data (all
I/O is done by then); :func:`run_chart_job` computes the indicators and builds what was
asked for — the PNG, the summary next to it (``both``), the full series payload, or a
large summary or get_indicators payload — including the JSON text, so the daemon's event
loop only copies the finished bytes.  ``bars`` may hold warm-up history before the
``shown`` bars: each indicator is computed over its own warm-up plus the shown bars, and
only the shown bars are drawn and listed (engine.indicators.warmup).  A job of a client
with a backlog runs at a lower CPU priority (:func:`run_in_worker`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from engine.bars import Bars
from engine.charts.jsonout import pretty
from engine.charts.series import series_payload
from engine.charts.summary import fetched_indicators_payload, summary_payload
from engine.indicators.registry import IndicatorRequest
from engine.indicators.runner import compute_shown, warm_inputs

JobFormat = Literal["png", "both", "series", "summary", "indicators"]
"""What a job builds: a PNG (with a summary for ``both``), a series, a summary, or get_indicators' payload."""


@dataclass(frozen=True, slots=True)
class ChartJob:
    """Everything a worker needs for one chart (no sockets, no services: it is pickled)."""

    bars: Bars
    requests: Sequence[IndicatorRequest]
    fetched: Sequence[Any]
    """External data per request (None where the indicator fetches nothing)."""
    symbol: str | None
    interval: str
    format: JobFormat
    width: int = 1920
    height: int = 1080
    max_signals: int = 20
    all_signals: bool = False
    shown: int | None = None
    """How many of the newest ``bars`` are shown (None: all of them, no warm-up)."""


@dataclass(frozen=True, slots=True)
class ChartJobOutput:
    """PNG bytes and/or the payload's JSON text (chartgen's pretty form)."""

    png: bytes | None = None
    text: str | None = None


def run_chart_job(job: ChartJob) -> ChartJobOutput:
    """Compute and build one chart (synchronous; runs in a render worker, or inline in the one-shot CLI)."""
    shown = len(job.bars) if job.shown is None else min(job.shown, len(job.bars))
    inputs = warm_inputs(job.requests, job.bars, shown, job.interval)
    results = compute_shown(job.requests, inputs, shown, symbol=job.symbol, interval=job.interval, fetched=job.fetched)
    panels = [(req.key, result) for req, result in zip(job.requests, results, strict=True)]
    bars = job.bars.tail(shown)
    warmup = None if job.symbol is None else len(job.bars) - shown  # sample data: chartgen's shape
    png = None
    text = None
    if job.format in ("png", "both"):
        from engine.charts import render  # matplotlib: see warm_up

        png = render.render_png(
            bars, panels, symbol=job.symbol, interval=job.interval, width=job.width, height=job.height
        )
    if job.format in ("both", "summary"):
        payload = summary_payload(
            bars,
            panels,
            symbol=job.symbol,
            interval=job.interval,
            max_signals=job.max_signals,
            all_signals=job.all_signals,
            warmup_bars=warmup,
        )
        text = pretty(payload)
    elif job.format == "series":
        text = pretty(series_payload(bars, panels, symbol=job.symbol, interval=job.interval, warmup_bars=warmup))
    elif job.format == "indicators":
        payload = fetched_indicators_payload(
            bars,
            panels,
            symbol=job.symbol,
            interval=job.interval,
            max_signals=job.max_signals,
            all_signals=job.all_signals,
            warmup_bars=warmup,
        )
        text = pretty(payload)
    return ChartJobOutput(png=png, text=text)


BACKGROUND_NICE = 10
"""How much nicer than the worker a background job's thread runs (it yields the CPU to other clients' charts)."""

_background: ThreadPoolExecutor | None = None


def run_in_worker(job: ChartJob, background: bool = False) -> ChartJobOutput:
    """A render worker's entry point: ``job`` on the worker's main thread, or a background job on a
    lower-priority thread.

    A background job belongs to a client with a backlog (engine.charts.gate).  Linux gives
    each thread its own nice value, and an unprivileged process can raise it but never lower
    it again, so background jobs run on one long-lived thread niced once, and the main
    thread keeps normal priority for everyone else's charts.
    """
    global _background
    if not background:
        return run_chart_job(job)
    if _background is None:
        _background = ThreadPoolExecutor(1, thread_name_prefix="background-chart", initializer=_lower_priority)
    return _background.submit(run_chart_job, job).result()


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: one niceness per process, so none
        if sys.platform.startswith("linux"):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))


def warm_up() -> None:
    """Worker start-up: import the indicators and matplotlib, and draw once (the first job is then fast).

    matplotlib is imported here and in :func:`run_chart_job`, not at the top: the daemon's own process
    imports this module to build jobs and never draws, and matplotlib with what it pulls in costs about
    0.65 s of every daemon start (python -X importtime, 2-core VM)."""
    from engine.charts import render

    render.warm_up()
