"""External indicators against a loopback server: alignment, HTTP errors, timeouts, no-request cases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from engine.bars import Bars
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.external.fear_greed import FEAR_GREED
from engine.indicators.external.funding import FUNDING
from engine.indicators.external.long_short import LONG_SHORT
from engine.indicators.external.open_interest import OPEN_INTEREST
from engine.indicators.external.sources import ExternalSources
from engine.indicators.model import PanelResult
from engine.indicators.registry import IndicatorRequest
from engine.indicators.runner import compute_requests
from engine.sample_data import sample_bars

HOUR = 3600
T0 = 1_704_067_200  # 2024-01-01 00:00 UTC, a funding settlement time
EXTERNALS = (FUNDING, OPEN_INTEREST, LONG_SHORT, FEAR_GREED)


@dataclass
class FakeApis:
    """Canned Binance futures and alternative.me answers; ``status``/``hang`` per path, every hit recorded."""

    payloads: dict[str, Any]
    status: dict[str, int] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    hits: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits.append((path, dict(request.query)))
        if path in self.hang:
            await asyncio.wait_for(self.release.wait(), timeout=10)
        status = self.status.get(path, 200)
        if status != 200:
            return web.json_response({"code": -1, "msg": ""}, status=status)
        return web.json_response(self.payloads[path])


def canned() -> dict[str, Any]:
    ms = 1000
    return {
        "/fapi/v1/fundingRate": [
            {"symbol": "BTCUSDT", "fundingTime": (T0 + 8 * HOUR) * ms + 3, "fundingRate": "-0.00020000"},
            {"symbol": "BTCUSDT", "fundingTime": T0 * ms + 1, "fundingRate": "0.00010000"},
            {"symbol": "BTCUSDT", "fundingTime": (T0 + 16 * HOUR) * ms + 2, "fundingRate": "0.00030000"},
        ],
        "/futures/data/openInterestHist": [
            {
                "symbol": "BTCUSDT",
                "sumOpenInterest": "1",
                "sumOpenInterestValue": f"{1000 + h}",
                "timestamp": (T0 + h * HOUR) * ms,
            }
            for h in (0, 1, 2, 3, 9, 10)
        ],
        "/futures/data/globalLongShortAccountRatio": [
            {
                "symbol": "BTCUSDT",
                "longShortRatio": "1.5",
                "longAccount": "0.6",
                "shortAccount": "0.4",
                "timestamp": T0 * ms,
            },
            {
                "symbol": "BTCUSDT",
                "longShortRatio": "1",
                "longAccount": "0.5",
                "shortAccount": "0.5",
                "timestamp": (T0 + 4 * HOUR) * ms,
            },
        ],
        "/fng/": {
            "name": "Fear and Greed Index",
            "data": [  # newest first, as alternative.me sends it
                {"value": "80", "value_classification": "Extreme Greed", "timestamp": str(T0 + 86_400)},
                {"value": "20", "value_classification": "Extreme Fear", "timestamp": str(T0)},
            ],
            "metadata": {"error": None},
        },
    }


@pytest.fixture
async def apis() -> AsyncIterator[tuple[FakeApis, ExternalSources]]:
    """A loopback server with the canned APIs and an ExternalSources (0.3 s timeout) pointed at it."""
    fake = FakeApis(canned())
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.handle)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    base = str(server.make_url("")).rstrip("/")
    try:
        async with aiohttp.ClientSession() as session:
            yield fake, ExternalSources(session, futures_url=base, fear_greed_url=base, timeout_s=0.3)
    finally:
        fake.release.set()
        await server.close()


def hourly_bars(n: int, start: int, hours: int = 1) -> Bars:
    rows = [(100.0, 101.0, 99.0, 100.0, 1.0)] * n
    return Bars.from_rows(rows, times=list(start + hours * HOUR * np.arange(n)))


async def compute(
    d: IndicatorDef, bars: Bars, sources: Any, symbol: str | None = "BTCUSDT", interval: str = "1h"
) -> PanelResult:
    [(_, result)] = await compute_requests(
        [IndicatorRequest(d.name, d, d.configure(None))], bars, symbol=symbol, interval=interval, sources=sources
    )
    return result


async def test_funding_is_aligned_to_bar_open_times_with_gaps_as_nan(apis: tuple[FakeApis, ExternalSources]) -> None:
    """Settlements at 00:00, 08:00, 16:00 fill the hourly bars after them; bars before the first are NaN, not 0."""
    fake, sources = apis
    r = await compute(FUNDING, hourly_bars(26, T0 - 2 * HOUR), sources)
    assert r.label == "Funding" and not r.is_overlay
    assert [h.y for h in r.hlines] == [0.0]
    (hist,) = r.histograms
    assert np.isnan(hist.y[:2]).all()
    np.testing.assert_allclose(hist.y[2:10], 0.01)
    np.testing.assert_allclose(hist.y[10:18], -0.02)
    np.testing.assert_allclose(hist.y[18:], 0.03)
    assert len(hist.colors) == 26
    assert fake.hits == [("/fapi/v1/fundingRate", {"symbol": "BTCUSDT", "limit": "1000"})]


async def test_open_interest_and_long_short_align_and_leave_stale_gaps_empty(
    apis: tuple[FakeApis, ExternalSources],
) -> None:
    """OI samples older than two periods leave NaN; L/S gives Long/Short fractions with hline 0.5 and y_range."""
    fake, sources = apis
    bars = hourly_bars(12, T0)
    oi = await compute(OPEN_INTEREST, bars, sources)
    assert oi.label == "OI" and [ln.label for ln in oi.lines] == ["OI"] and len(oi.fills) == 1
    y = oi.lines[0].y
    np.testing.assert_allclose(y[:6], [1000, 1001, 1002, 1003, 1003, 1003])
    assert np.isnan(y[6:9]).all()
    np.testing.assert_allclose(y[9:], [1009, 1010, 1010])
    assert fake.hits[0] == ("/futures/data/openInterestHist", {"symbol": "BTCUSDT", "period": "1h", "limit": "500"})

    ls = await compute(LONG_SHORT, hourly_bars(6, T0, hours=4), sources, symbol="btcusdt", interval="4h")
    assert ls.label == "L/S" and [ln.label for ln in ls.lines] == ["Long", "Short"]
    assert [h.y for h in ls.hlines] == [0.5] and ls.y_range == (0.0, 1.0) and len(ls.fills) == 1
    np.testing.assert_allclose(ls.lines[0].y, [0.6, 0.5, 0.5, 0.5, np.nan, np.nan])
    np.testing.assert_allclose(ls.lines[1].y, [0.4, 0.5, 0.5, 0.5, np.nan, np.nan])
    assert fake.hits[1][1]["period"] == "4h" and fake.hits[1][1]["symbol"] == "BTCUSDT"


async def test_fear_greed_ignores_the_symbol_and_sorts_newest_first_data(
    apis: tuple[FakeApis, ExternalSources],
) -> None:
    """A stock symbol still gets F&G: day one reads 20, day two 80, with one decorative dot per new reading."""
    fake, sources = apis
    r = await compute(FEAR_GREED, hourly_bars(48, T0), sources, symbol="AAPL")
    assert r.label == "F&G" and r.y_range == (0.0, 100.0)
    assert [h.y for h in r.hlines] == [25.0, 50.0, 75.0]
    y = r.lines[0].y
    np.testing.assert_allclose(y[:24], 20)
    np.testing.assert_allclose(y[24:], 80)
    assert [(d.x, d.y, d.label) for d in r.dots] == [(0, 20.0, None), (24, 80.0, None)]
    assert fake.hits[0] == ("/fng/", {"limit": "365", "format": "json"})


async def test_an_http_error_becomes_a_labelled_empty_result(apis: tuple[FakeApis, ExternalSources]) -> None:
    """HTTP 451 from Binance → 'Funding (no data: HTTP 451)' with nothing drawn."""
    fake, sources = apis
    fake.status["/fapi/v1/fundingRate"] = 451
    r = await compute(FUNDING, hourly_bars(10, T0), sources)
    assert r.label == "Funding (no data: HTTP 451)"
    assert not (r.lines or r.histograms or r.hlines or r.fills or r.dots)


async def test_a_slow_server_times_out_into_a_labelled_empty_result(apis: tuple[FakeApis, ExternalSources]) -> None:
    """A server that never answers within the 0.3 s budget → 'OI (no data: timeout after 0.3s)'."""
    fake, sources = apis
    fake.hang.add("/futures/data/openInterestHist")
    r = await compute(OPEN_INTEREST, hourly_bars(10, T0), sources)
    assert r.label == "OI (no data: timeout after 0.3s)"
    assert not r.lines


async def test_a_malformed_body_is_reported_as_an_unexpected_response(apis: tuple[FakeApis, ExternalSources]) -> None:
    """A JSON object where Binance sends a list → labelled no data, nothing cached."""
    fake, sources = apis
    fake.payloads["/futures/data/globalLongShortAccountRatio"] = {"rows": []}
    r = await compute(LONG_SHORT, hourly_bars(10, T0), sources)
    assert r.label == "L/S (no data: unexpected response from Binance)"


@pytest.mark.parametrize("symbol", [None, "AAPL", "USDT", "^GSPC"])
async def test_non_crypto_or_missing_symbols_make_no_request(
    apis: tuple[FakeApis, ExternalSources], symbol: str | None
) -> None:
    """Funding, OI and L/S for a stock or no symbol say 'not a crypto symbol' without touching the network."""
    fake, sources = apis
    for d, label in ((FUNDING, "Funding"), (OPEN_INTEREST, "OI"), (LONG_SHORT, "L/S")):
        r = await compute(d, hourly_bars(10, T0), sources, symbol=symbol)
        assert r.label == f"{label} (no data: not a crypto symbol)"
    assert fake.hits == []


async def test_sample_data_without_times_has_no_data_and_makes_no_request(
    apis: tuple[FakeApis, ExternalSources],
) -> None:
    """Sample bars cannot be aligned: every external indicator is labelled no data, no request is made."""
    fake, sources = apis
    for d in EXTERNALS:
        r = await compute(d, sample_bars(30), sources)
        assert r.label.endswith("(no data: sample data has no bar times)")
    assert fake.hits == []


async def test_repeated_charts_reuse_the_cached_response(apis: tuple[FakeApis, ExternalSources]) -> None:
    """Two charts within the TTL, and two indicators in one call, share one request per URL."""
    fake, sources = apis
    bars = hourly_bars(10, T0)
    await compute_requests(
        [IndicatorRequest(k, FUNDING, {}) for k in ("funding", "funding_rate")],
        bars,
        symbol="BTCUSDT",
        interval="1h",
        sources=sources,
    )
    await compute(FUNDING, bars, sources)
    assert len(fake.hits) == 1


async def test_disabled_sources_degrade_without_a_session() -> None:
    """ExternalSources(session=None), or no sources at all, yields 'external data disabled'."""
    bars = hourly_bars(5, T0)
    r = await compute(FEAR_GREED, bars, ExternalSources(session=None))
    assert r.label == "F&G (no data: external data disabled)"
    r = await compute(FUNDING, bars, None)
    assert r.label == "Funding (no data: external data disabled)"


def test_compute_without_a_fetch_says_the_data_was_not_fetched() -> None:
    """Calling compute directly (no runner) on a crypto symbol degrades instead of failing."""
    r = FUNDING.compute(hourly_bars(5, T0), {}, ComputeContext(symbol="BTCUSDT", interval="1h"))
    assert r.label == "Funding (no data: not fetched)"


def test_external_definitions_follow_the_contract_names_and_kinds() -> None:
    """Names, aliases and kind 'external' as contract §3.4 rows 35-38; every one has a fetch."""
    assert [(d.name, d.aliases) for d in EXTERNALS] == [
        ("funding", ("funding_rate",)),
        ("oi", ("open_interest",)),
        ("long_short", ("ls_ratio",)),
        ("fear_greed", ("fng",)),
    ]
    assert all(d.kind == "external" and not d.is_overlay and d.fetch is not None for d in EXTERNALS)
    assert all("Formula" in d.description for d in EXTERNALS)
