"""The HTTP seam of the external indicators: Binance USD-M futures data and alternative.me.

:class:`ExternalSources` GETs funding rates, open-interest history, the global long/short
account ratio and the Fear & Greed index, validates each response's shape and turns it
into a :class:`TimedSeries` (ascending unix-second times plus named float columns).  Any
failure raises :class:`ExternalDataError` whose message is a short reason fit for a chart
label ("HTTP 451", "timeout after 10s").  Parsed results are cached per URL for a short
TTL, and concurrent identical requests share one fetch; nothing holds a lock while the
request is in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import numpy as np
import orjson

from engine.bars import FloatArray, IntArray
from engine.market_data.ttl_cache import TtlCache

DEFAULT_FUTURES_URL = "https://fapi.binance.com"
DEFAULT_FEAR_GREED_URL = "https://api.alternative.me"
FUNDING_LIMIT = 1000
HISTORY_LIMIT = 500
FEAR_GREED_LIMIT = 365
_MAX_MSG = 60


class ExternalDataError(Exception):
    """An external series could not be fetched; ``str(exc)`` is a short reason."""


@dataclass(frozen=True, slots=True)
class TimedSeries:
    """Samples in ascending time order: ``times`` in unix seconds, one array per column."""

    times: IntArray
    columns: Mapping[str, FloatArray]

    def __len__(self) -> int:
        return len(self.times)


Row = Mapping[str, Any]


def _series(rows: list[tuple[int, dict[str, float]]], names: tuple[str, ...]) -> TimedSeries:
    rows.sort(key=lambda r: r[0])
    times = np.array([t for t, _ in rows], dtype=np.int64)
    cols = {name: np.array([vals[name] for _, vals in rows], dtype=np.float64) for name in names}
    return TimedSeries(times, cols)


def _parse_rows(data: Any, time_key: str, time_scale: int, fields: Mapping[str, str], where: str) -> TimedSeries:
    """Binance-style list of objects → TimedSeries; ``fields`` maps column → JSON key."""
    if not isinstance(data, list):
        raise ExternalDataError(f"unexpected response from {where}")
    rows: list[tuple[int, dict[str, float]]] = []
    try:
        for item in data:
            t = int(item[time_key]) // time_scale
            rows.append((t, {col: float(item[key]) for col, key in fields.items()}))
    except (KeyError, TypeError, ValueError) as exc:
        raise ExternalDataError(f"unexpected response from {where}") from exc
    return _series(rows, tuple(fields))


class ExternalSources:
    """Fetches the external indicators' data over one shared aiohttp session.

    ``session=None`` disables external data: every call raises ExternalDataError.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None,
        futures_url: str = DEFAULT_FUTURES_URL,
        fear_greed_url: str = DEFAULT_FEAR_GREED_URL,
        timeout_s: float = 10.0,
        cache_ttl_s: float = 60.0,
    ) -> None:
        self._session = session
        self.futures_url = futures_url.rstrip("/")
        self.fear_greed_url = fear_greed_url.rstrip("/")
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._cache: TtlCache[TimedSeries] = TtlCache(ttl_s=cache_ttl_s, max_entries=128)

    async def funding_rate(self, symbol: str) -> TimedSeries:
        """Recent funding settlements of a perpetual: column ``rate`` (a fraction, 0.0001 = 0.01 %)."""
        url = self._url(self.futures_url, "/fapi/v1/fundingRate", {"symbol": symbol, "limit": FUNDING_LIMIT})
        return await self._fetch(url, lambda d: _parse_rows(d, "fundingTime", 1000, {"rate": "fundingRate"}, "Binance"))

    async def open_interest(self, symbol: str, period: str) -> TimedSeries:
        """Open-interest history: column ``value`` (sumOpenInterestValue, in the quote asset)."""
        params = {"symbol": symbol, "period": period, "limit": HISTORY_LIMIT}
        url = self._url(self.futures_url, "/futures/data/openInterestHist", params)
        return await self._fetch(
            url, lambda d: _parse_rows(d, "timestamp", 1000, {"value": "sumOpenInterestValue"}, "Binance")
        )

    async def long_short_ratio(self, symbol: str, period: str) -> TimedSeries:
        """Global long/short account ratio: columns ``long`` and ``short`` (account fractions)."""
        params = {"symbol": symbol, "period": period, "limit": HISTORY_LIMIT}
        url = self._url(self.futures_url, "/futures/data/globalLongShortAccountRatio", params)
        fields = {"long": "longAccount", "short": "shortAccount"}
        return await self._fetch(url, lambda d: _parse_rows(d, "timestamp", 1000, fields, "Binance"))

    async def fear_greed(self) -> TimedSeries:
        """The daily Crypto Fear & Greed index (0-100): column ``value``."""
        url = self._url(self.fear_greed_url, "/fng/", {"limit": FEAR_GREED_LIMIT, "format": "json"})
        return await self._fetch(url, _parse_fear_greed)

    @staticmethod
    def _url(base: str, path: str, params: Mapping[str, Any]) -> str:
        return f"{base}{path}?{urlencode(params)}"

    async def _fetch(self, url: str, parse: Callable[[Any], TimedSeries]) -> TimedSeries:
        async def load() -> TimedSeries:
            return parse(await self._get_json(url))

        return await self._cache.get_or_fetch(url, load)

    async def _get_json(self, url: str) -> Any:
        if self._session is None:
            raise ExternalDataError("external data disabled")
        try:
            async with self._session.get(url, timeout=self._timeout) as resp:
                status = resp.status
                body = await resp.read()
        except TimeoutError as exc:
            raise ExternalDataError(f"timeout after {self.timeout_s:g}s") from exc
        except aiohttp.ClientConnectionError as exc:
            raise ExternalDataError("connection failed") from exc
        except aiohttp.ClientError as exc:
            raise ExternalDataError(f"request failed ({type(exc).__name__})") from exc
        try:
            data = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            data = None
        if status != 200:
            msg = data.get("msg") if isinstance(data, dict) else None
            if isinstance(msg, str) and msg:
                raise ExternalDataError(f"HTTP {status}: {msg[:_MAX_MSG]}")
            raise ExternalDataError(f"HTTP {status}")
        if data is None:
            raise ExternalDataError("response is not JSON")
        return data


def _parse_fear_greed(data: Any) -> TimedSeries:
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ExternalDataError("unexpected response from alternative.me")
    try:
        rows = [(int(item["timestamp"]), {"value": float(item["value"])}) for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise ExternalDataError("unexpected response from alternative.me") from exc
    return _series(rows, ("value",))
