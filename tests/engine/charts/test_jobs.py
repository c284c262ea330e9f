"""Chart jobs (what a render worker runs): the same bytes as building in place, and background priority."""

from __future__ import annotations

import io
import os
import sys
import threading
from typing import Any

import pytest
from PIL import Image

from engine.charts import jobs
from engine.charts.jobs import ChartJob, run_chart_job, run_in_worker
from engine.charts.jsonout import pretty
from engine.charts.series import series_payload
from engine.charts.summary import fetched_indicators_payload, summary_payload
from engine.indicators.registry import parse_requests
from engine.indicators.runner import compute_sync
from engine.sample_data import sample_bars

BARS = sample_bars(300)
REQUESTS = tuple(parse_requests(["ema_stack", "rsi", "volume_profile", "funding"]))


def job(fmt: Any, **kw: Any) -> ChartJob:
    fetched = tuple(None for _ in REQUESTS)
    return ChartJob(BARS, REQUESTS, fetched, symbol=None, interval="1h", format=fmt, **kw)


def panels() -> list[tuple[str, Any]]:
    return [(r.key, compute_sync(r, BARS)) for r in REQUESTS]


def test_a_series_job_gives_the_payload_text_built_in_place() -> None:
    out = run_chart_job(job("series"))
    assert out.png is None
    assert out.text == pretty(series_payload(BARS, panels(), symbol=None, interval="1h"))


def test_a_both_job_gives_the_png_and_the_summary_text() -> None:
    out = run_chart_job(job("both", width=320, height=200, max_signals=3))
    assert out.png is not None
    with Image.open(io.BytesIO(out.png)) as img:
        assert img.size == (320, 200)
    assert out.text == pretty(summary_payload(BARS, panels(), symbol=None, interval="1h", max_signals=3))


def test_summary_and_indicator_jobs_give_the_payload_texts_built_in_place() -> None:
    """Large summaries and get_indicators payloads are built by workers: the same bytes."""
    out = run_chart_job(job("summary", all_signals=True))
    assert out.png is None
    assert out.text == pretty(summary_payload(BARS, panels(), symbol=None, interval="1h", all_signals=True))
    out = run_chart_job(job("indicators", max_signals=2))
    expected = fetched_indicators_payload(BARS, panels(), symbol=None, interval="1h", max_signals=2)
    assert out.text == pretty(expected) and expected["source"] == "fetched" and expected["bars"] == 300


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_background_job_runs_at_a_lower_priority_and_the_next_normal_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client with a backlog yields the CPU; the worker's own priority is untouched for the next client."""
    seen: list[int] = []

    def probe(j: ChartJob) -> Any:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return jobs.ChartJobOutput()

    monkeypatch.setattr(jobs, "run_chart_job", probe)
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    run_in_worker(job("series"), background=True)
    run_in_worker(job("series"), background=False)
    run_in_worker(job("series"), background=True)
    assert seen == [min(19, base + jobs.BACKGROUND_NICE), base, min(19, base + jobs.BACKGROUND_NICE)]
