"""Charts defined from the left edge: warm-up history is fetched, computed over and cut away.

A chart of ``bars`` bars fetches the largest warm-up its indicators need before the first
shown bar, computes each indicator over its own warm-up plus the shown bars, and shows and
lists only the shown bars.  Values are checked against an independent computation over the
longer series (TA-Lib directly, or the indicator on the longer slice) cut to the shown bars.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import talib

from engine.bars import Bars
from engine.charts.pool import InlineRenderer
from engine.charts.service import ChartRequest, ChartService
from engine.engine_bars import EngineFirstBars
from engine.indicators.model import DivLine, Dot, Fill, Histogram, Line, PanelResult
from engine.indicators.registry import IndicatorRequest, all_indicators, parse_requests
from engine.indicators.runner import compute_sync
from engine.indicators.warmup import MAX_WARMUP_BARS, needed_warmup, shown_part, warmup_of
from engine.market_data.errors import MarketDataError
from engine.market_data.source import MarketData
from engine.sample_data import sample_bars
from tests.engine.fake_binance import FakeBinance
from tests.engine.test_feed_fake_exchange import engine_for, fake, settle  # noqa: F401 - fixture

T0 = 1_767_225_600
HOUR = 3600


def timed(bars: Bars, lift: float = 0.0) -> Bars:
    """Hourly times, prices lifted by ``lift`` (the sample walk drifts below zero after a few hundred bars)."""
    times = np.arange(len(bars), dtype=np.int64) * HOUR + T0
    return Bars(bars.open + lift, bars.high + lift, bars.low + lift, bars.close + lift, bars.volume, times)


HISTORY = timed(sample_bars(3000), lift=1000.0)


class StubSource:
    """A BarsSource over a fixed series: the newest ``n`` of what it has; records each request."""

    def __init__(self, bars: Bars) -> None:
        self.bars = bars
        self.asked: list[int] = []

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        self.asked.append(bars)
        return self.bars.tail(bars)


def service(source: Any) -> ChartService:
    return ChartService(source, InlineRenderer())


def values(raw: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


async def series(src: Any, names: list[Any], bars: int = 200) -> dict[str, Any]:
    req = ChartRequest("BTCUSDT", "1h", parse_requests(names), bars=bars, format="series")
    out = await service(src).chart(req)
    assert out.text is not None
    return json.loads(out.text)


def req(name: Any) -> IndicatorRequest:
    return parse_requests([name])[0]


# --- the rule ----------------------------------------------------------------------------


def test_warmup_per_indicator_family_follows_the_documented_rule() -> None:
    """EMA 4n, Wilder 7n, windows n−1, chains add, composites take the max, windowed profiles none."""
    interval = "1h"
    assert warmup_of(req("ema_stack"), interval) == 800  # EMA 200: seed + 3·200
    assert warmup_of(req("rsi"), interval) == 98  # Wilder 14: 7·14
    assert warmup_of(req({"name": "rsi", "length": 21}), interval) == 147
    assert warmup_of(req("macd"), interval) == 4 * 26 + 4 * 9
    assert warmup_of(req("bbands"), interval) == 19
    assert warmup_of(req("cipher_b"), interval) == 2 * 36 + 48 + 2  # its WaveTrend part is the longest
    assert warmup_of(req("vwap"), "1h") == 23 and warmup_of(req("vwap"), "1d") == 0
    for name in ("volume_profile", "obv", "cvd", "funding"):
        assert warmup_of(req(name), interval) == 0
    assert warmup_of(req({"name": "rsi", "length": 5000}), interval) == MAX_WARMUP_BARS
    assert needed_warmup(parse_requests(["ema_stack", "cipher_b", "macd"]), interval) == 800
    for d in all_indicators():
        assert 0 <= warmup_of(IndicatorRequest(d.name, d, d.configure(None)), interval) <= MAX_WARMUP_BARS


# --- values on the shown bars ------------------------------------------------------------


async def test_a_200_bar_ema_stack_chart_has_every_line_defined_from_the_first_bar() -> None:
    src = StubSource(HISTORY)
    payload = await series(src, ["ema_stack"])
    assert src.asked == [1000]
    assert len(payload["bars"]) == 200 and payload["warmup_bars"] == 800
    assert payload["bars"][0]["t"] == int(HISTORY.times[-200])
    for line in payload["indicators"]["ema_stack"]["lines"]:
        assert len(line["values"]) == 200
        assert all(v is not None for v in line["values"]), line["label"]
    ema200 = values(payload["indicators"]["ema_stack"]["lines"][3]["values"])
    independent = talib.EMA(HISTORY.close[-1000:], timeperiod=200)[-200:]
    np.testing.assert_array_equal(ema200, independent)


@pytest.mark.parametrize(
    ("name", "warmup"),
    [("ema_stack", 800), ("rsi", 98), ("macd", 140), ("bbands", 19), ("cipher_b", 122)],
)
async def test_shown_values_equal_a_computation_over_warmup_plus_shown_bars_cut(name: str, warmup: int) -> None:
    payload = await series(StubSource(HISTORY), [name, "ema_stack"])  # ema_stack makes the fetch the longest
    assert payload["warmup_bars"] == 800
    full = compute_sync(req(name), HISTORY.tail(200 + warmup))
    got = payload["indicators"][name]
    for line, expected in zip(got["lines"], full.lines, strict=True):
        np.testing.assert_array_equal(values(line["values"]), expected.y[-200:])
    for hist, expected_h in zip(got.get("histogram", []), full.histograms, strict=True):
        np.testing.assert_array_equal(values(hist["values"]), expected_h.y[-200:])
    for line in got["lines"]:
        assert line["values"][0] is not None, line["label"]


async def test_rsi_and_macd_equal_ta_lib_on_the_longer_series() -> None:
    payload = await series(StubSource(HISTORY), ["rsi", "macd"])
    rsi = talib.RSI(HISTORY.close[-(200 + 98) :], timeperiod=14)[-200:]
    np.testing.assert_array_equal(values(payload["indicators"]["rsi"]["lines"][0]["values"]), rsi)
    close = HISTORY.close[-(200 + 140) :]
    macd = talib.EMA(close, timeperiod=12) - talib.EMA(close, timeperiod=26)
    np.testing.assert_array_equal(values(payload["indicators"]["macd"]["lines"][0]["values"]), macd[-200:])


async def test_signals_and_divergences_are_listed_only_on_shown_bars() -> None:
    payload = await series(StubSource(HISTORY), ["cipher_b"])
    full = compute_sync(req("cipher_b"), HISTORY.tail(322))
    start = 122
    expected = [(d.x - start, d.label) for d in full.signals() if d.x >= start]
    got = payload["indicators"]["cipher_b"]
    assert [(s["x"], s["label"]) for s in got["signals"]] == expected
    assert any(d.x < start for d in full.signals())  # the warm-up had signals, and they are gone
    assert all(0 <= s["x"] < 200 and s["t"] == int(HISTORY.times[-200 + s["x"]]) for s in got["signals"])
    assert all(0 <= d["x1"] <= d["x2"] < 200 for d in got.get("divlines", []))


async def test_summary_and_get_indicators_report_the_shown_bars_and_the_warmup_used() -> None:
    svc = service(StubSource(HISTORY))
    req_ = ChartRequest("BTCUSDT", "1h", parse_requests(["ema_stack", "rsi"]), bars=200, format="summary")
    out = await svc.chart(req_)
    assert out.text is not None
    summary = json.loads(out.text)
    assert summary["price"]["bars"] == 200 and summary["warmup_bars"] == 800
    assert summary["price"]["first"]["date"] == str(int(HISTORY.times[-200]))
    ema200 = talib.EMA(HISTORY.close[-1000:], timeperiod=200)
    assert summary["indicators"]["ema_stack"]["lines"][3]["last_value"] == float(ema200[-1])

    text = await svc.indicators_text("BTCUSDT", "1h", parse_requests(["rsi", "cipher_b"]), bars=300)
    payload = json.loads(text)
    assert payload["bars"] == 300 and payload["warmup_bars"] == 122 and payload["source"] == "fetched"
    full = compute_sync(req("cipher_b"), HISTORY.tail(422))
    signals = payload["indicators"]["cipher_b"]["signals"]
    assert signals and all(0 <= s["x"] < 300 for s in signals)
    assert signals[-1]["x"] == full.signals()[-1].x - 122


async def test_large_jobs_follow_the_same_rule_as_inline_summaries() -> None:
    """A summary big enough for the renderer (a job) equals the inline one's values."""
    names = ["ema_stack", "rsi", "macd", "bbands", "cipher_b", "stoch", "atr", "adx", "cci", "mfi", "wavetrend"]
    svc = service(StubSource(HISTORY))
    out = await svc.chart(ChartRequest("BTCUSDT", "1h", parse_requests(names), bars=900, format="summary"))
    payload = json.loads(out.text or "")
    assert payload["price"]["bars"] == 900 and payload["warmup_bars"] == 800
    rsi = talib.RSI(HISTORY.close[-(900 + 98) :], timeperiod=14)
    assert payload["indicators"]["rsi"]["lines"][0]["last_value"] == float(rsi[-1])


# --- short history -----------------------------------------------------------------------


async def test_short_history_uses_what_exists_and_lines_start_where_they_become_defined() -> None:
    src = StubSource(HISTORY.tail(250))
    payload = await series(src, ["ema_stack"])
    assert src.asked == [1000]
    assert len(payload["bars"]) == 200 and payload["warmup_bars"] == 50
    lines = {ln["label"]: values(ln["values"]) for ln in payload["indicators"]["ema_stack"]["lines"]}
    for label in ("EMA 8", "EMA 21", "EMA 50"):
        assert np.isfinite(lines[label]).all(), label
    ema200 = lines["EMA 200"]
    assert np.flatnonzero(np.isfinite(ema200))[0] == 199 - 50
    np.testing.assert_array_equal(ema200, talib.EMA(HISTORY.close[-250:], timeperiod=200)[-200:])


async def test_fewer_bars_than_shown_is_no_error() -> None:
    payload = await series(StubSource(HISTORY.tail(150)), ["ema_stack", "rsi"])
    assert len(payload["bars"]) == 150 and payload["warmup_bars"] == 0
    assert payload["indicators"]["rsi"]["lines"][0]["values"][14] is not None


async def test_sample_data_has_no_history_before_its_first_bar() -> None:
    req_ = ChartRequest(None, "4h", parse_requests(["ema_stack"]), bars=300, format="series")
    payload = json.loads((await service(None).chart(req_)).text or "")
    assert len(payload["bars"]) == 300 and "warmup_bars" not in payload  # chartgen's shape for sample data
    expected = compute_sync(req("ema_stack"), sample_bars(300)).lines[3].y
    np.testing.assert_array_equal(values(payload["indicators"]["ema_stack"]["lines"][3]["values"]), expected)


# --- sources and caching -----------------------------------------------------------------


class CountingKlines:
    """Stands in for BinanceRest under MarketData: serves HISTORY's rows and counts requests."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def latest_klines(self, symbol: str, interval: str, count: int, **_: Any) -> list[list[Any]]:
        self.calls.append(count)
        tail = HISTORY.tail(count)
        assert tail.times is not None
        return [
            [int(t) * 1000, str(o), str(h), str(lo), str(c), str(v)]
            for t, o, h, lo, c, v in zip(
                tail.times.tolist(), tail.open, tail.high, tail.low, tail.close, tail.volume, strict=True
            )
        ]


async def test_repeated_charts_hit_the_market_data_cache() -> None:
    klines = CountingKlines()
    market = MarketData(None, binance_rest_url="http://127.0.0.1:9", yahoo_url="http://127.0.0.1:9", binance=klines)  # type: ignore[arg-type]
    svc = service(market)
    chart = ChartRequest("BTCUSDT", "1h", parse_requests(["ema_stack", "macd"]), bars=200, format="summary")
    first = await svc.chart(chart)
    second = await svc.chart(chart)
    text = await svc.indicators_text("BTCUSDT", "1h", parse_requests(["ema_stack"]), bars=200)
    assert klines.calls == [1000]
    assert first.text == second.text and json.loads(text)["warmup_bars"] == 800


class StubEngine:
    """What EngineFirstBars reads of a LiveEngine: whether it follows a market and its window."""

    def __init__(self, window: Bars) -> None:
        self.window = window

    def follows(self, symbol: str, interval: str) -> bool:
        return True

    def window_bars(self, symbol: str, interval: str, n: int | None = None, *, include_open: bool = False) -> Bars:
        return self.window if n is None else self.window.tail(n)


class FailingSource:
    def __init__(self) -> None:
        self.asked: list[int] = []

    async def fetch(self, symbol: str, interval: str, bars: int, source: str = "auto") -> Bars:
        self.asked.append(bars)
        raise MarketDataError("HTTP 429 from api.binance.com")


async def test_the_engine_window_serves_the_warmup_when_it_holds_it() -> None:
    fallback = StubSource(HISTORY)
    source = EngineFirstBars(StubEngine(HISTORY.tail(1001)), fallback)  # type: ignore[arg-type]
    payload = await series(source, ["ema_stack"])
    assert fallback.asked == [] and payload["warmup_bars"] == 800


async def test_a_short_window_asks_rest_and_falls_back_to_the_window_when_rest_fails() -> None:
    fallback = StubSource(HISTORY)
    source = EngineFirstBars(StubEngine(HISTORY.tail(500)), fallback)  # type: ignore[arg-type]
    payload = await series(source, ["ema_stack"])
    assert fallback.asked == [1000] and payload["warmup_bars"] == 800

    failing = FailingSource()
    source = EngineFirstBars(StubEngine(HISTORY.tail(500)), failing)  # type: ignore[arg-type]
    payload = await series(source, ["ema_stack"])
    assert failing.asked == [1000] and len(payload["bars"]) == 200 and payload["warmup_bars"] == 300
    with pytest.raises(MarketDataError):
        await EngineFirstBars(StubEngine(HISTORY.tail(100)), failing).fetch_history("BTCUSDT", "1h", 200, 800)  # type: ignore[arg-type]


# --- the live engine's get_indicators ----------------------------------------------------


async def test_engine_payload_computes_over_the_window_and_returns_the_last_n(fake: FakeBinance) -> None:  # noqa: F811
    async with engine_for(fake, [("BTCUSDT", "1m")], window=300) as engine:
        await settle(engine)
        requests = parse_requests(["rsi", "cipher_b", "obv"])
        payload = await engine.indicator_payload("BTCUSDT", "1m", requests, bars=100)
        again = await engine.indicator_payload("BTCUSDT", "1m", requests, bars=100)
        assert payload is not None and payload == again
        window = engine.window_bars("BTCUSDT", "1m")
        assert window is not None and len(window) == 300
        assert payload["bars"] == 100 and payload["warmup_bars"] == 122
        assert payload["last_bar_time"] == int(window.times[-1])
        rsi = talib.RSI(window.close[-198:], timeperiod=14)
        assert payload["indicators"]["rsi"]["lines"][0]["last_value"] == float(rsi[-1])
        obv = compute_sync(requests[2], window.tail(100)).lines[0].y  # no warm-up: from the first shown bar
        assert payload["indicators"]["obv"]["lines"][0]["last_value"] == float(obv[-1])
        full = compute_sync(requests[1], window.tail(222))
        expected = [(d.x - 122, d.label) for d in full.signals() if d.x >= 122]
        got = payload["indicators"]["cipher_b"].get("signals", [])
        assert [(s["x"], s["label"]) for s in got] == expected[-20:]  # the summary lists the newest 20
        assert all(0 <= s["x"] < 100 for s in got)
        whole = await engine.indicator_payload("BTCUSDT", "1m", requests)
        assert whole is not None and whole["bars"] == 300 and whole["warmup_bars"] == 0


# --- the cut itself ----------------------------------------------------------------------


def test_shown_part_cuts_every_channel_and_leaves_the_original_alone() -> None:
    y = np.arange(10.0)
    result = PanelResult(
        label="X",
        is_overlay=False,
        lines=[Line(y, "w")],
        fills=[Fill(y, y + 1, "w")],
        histograms=[Histogram(y, [str(i) for i in range(10)])],
        dots=[Dot(2, 1.0, "w", label="buy"), Dot(7, 2.0, "w", label="sell", confirmed_at=9), Dot(8, 3.0, "w")],
        divlines=[DivLine(1, 0.0, 8, 1.0, "w"), DivLine(5, 0.0, 9, 1.0, "w")],
    )
    cut = shown_part(result, 10, 4)
    assert cut.lines[0].y.tolist() == [6.0, 7.0, 8.0, 9.0]
    assert cut.fills[0].y2.tolist() == [7.0, 8.0, 9.0, 10.0]
    assert cut.histograms[0].colors == ["6", "7", "8", "9"]
    assert [(d.x, d.label, d.confirmed_at) for d in cut.dots] == [(1, "sell", 3), (2, None, None)]
    assert cut.divlines == []
    assert [(d.x1, d.x2) for d in shown_part(result, 10, 6).divlines] == [(1, 5)]
    assert result.dots[1].x == 7 and len(result.lines[0].y) == 10
    assert shown_part(result, 10, 10) is result


async def test_a_png_with_its_summary_shows_the_requested_bars() -> None:
    req_ = ChartRequest("BTCUSDT", "1h", parse_requests(["ema_stack", "cipher_b", "macd"]), 200, 640, 360, "both")
    out = await service(StubSource(HISTORY)).chart(req_)
    assert out.png is not None and out.png.startswith(b"\x89PNG")
    summary = json.loads(out.text or "")
    assert summary["price"]["bars"] == 200 and summary["warmup_bars"] == 800


def test_every_definition_and_a_job_with_warmup_stay_picklable_for_render_workers() -> None:
    import pickle

    from engine.charts.jobs import ChartJob, run_chart_job

    defs = all_indicators()
    assert [d.name for d in pickle.loads(pickle.dumps(defs))] == [d.name for d in defs]
    requests = tuple(parse_requests(["ema_stack", "cipher_b", "kalman_volume"]))
    job = ChartJob(HISTORY.tail(1000), requests, (None,) * 3, "BTCUSDT", "1h", "series", shown=200)
    copy = pickle.loads(pickle.dumps(job))
    assert run_chart_job(copy).text == run_chart_job(job).text


async def test_engine_payload_text_is_built_once_per_bar_and_request(fake: FakeBinance) -> None:  # noqa: F811
    """The tool's text is cached per request until the next bar: the same object, then a new one."""
    async with engine_for(fake, [("BTCUSDT", "1m")], window=300) as engine:
        await settle(engine)
        requests = parse_requests(["rsi", "cipher_b"])
        text = await engine.indicator_text("BTCUSDT", "1m", requests, bars=100)
        assert text is not None
        assert json.loads(text) == await engine.indicator_payload("BTCUSDT", "1m", requests, bars=100)
        assert await engine.indicator_text("BTCUSDT", "1m", requests, bars=100) is text
        other = await engine.indicator_text("BTCUSDT", "1m", parse_requests(["rsi", "cb"]), bars=100)
        assert other is not text and json.loads(other)["indicators"].keys() == {"rsi", "cb"}
        assert await engine.indicator_text("BTCUSDT", "1m", requests, bars=50) is not text
        assert await engine.indicator_text("BTCUSDT", "1m", requests, bars=100, all_signals=True) is not text
        window = engine.sync.windows[("BTCUSDT", "1m")].window
        last = window.last_time
        assert last is not None
        window.apply_closed(last + 60, 1.0, 2.0, 0.5, 1.5, 10.0)
        newer = await engine.indicator_text("BTCUSDT", "1m", requests, bars=100)
        assert newer is not None and newer != text and json.loads(newer)["last_bar_time"] == last + 60
