"""Yahoo Finance's chart API for stocks and indices (contract §5.1), with honest 4h bars.

chartgen maps ``4h`` to hourly bars aggregated in fixed chunks of four from the first bar,
so its "4h" candles straddle sessions.  We aggregate hourly bars into 4-hour buckets that
restart at each trading day's first bar, so no candle mixes two sessions.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import numpy as np
import orjson

from engine.bars import Bars
from engine.market_data.errors import MarketDataError

# interval → (Yahoo interval, range)
_YAHOO_MAP: dict[str, tuple[str, str]] = {
    "1m": ("1m", "5d"),
    "2m": ("2m", "5d"),
    "5m": ("5m", "5d"),
    "15m": ("15m", "5d"),
    "30m": ("30m", "5d"),
    "1h": ("1h", "1mo"),
    "60m": ("60m", "1mo"),
    "90m": ("90m", "1mo"),
    "4h": ("1h", "6mo"),
    "1d": ("1d", "1y"),
    "1wk": ("1wk", "5y"),
    "1w": ("1wk", "5y"),
    "1mo": ("1mo", "max"),
    "1M": ("1mo", "max"),
}
_USER_AGENT = "Mozilla/5.0 (compatible; chartgen)"


def _range_for(interval: str, bars: int) -> tuple[str, str]:
    yi, yr = _YAHOO_MAP.get(interval, (interval, "1y"))
    if yi == "1d" and bars > 250:
        yr = "5y" if bars <= 1250 else "max"
    if interval == "4h" and bars > 300:
        yr = "2y"
    return yi, yr


def _aggregate_4h(times: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hourly rows → 4-hour rows, buckets restarting at the first bar of each UTC day."""
    out_t: list[int] = []
    out_r: list[list[float]] = []
    day_start = None
    bucket_key = None
    for t, (o, h, l, c, v) in zip(times.tolist(), rows.tolist(), strict=True):
        day = t // 86400
        if day != day_start:
            day_start, first_of_day = day, t
        key = (day, (t - first_of_day) // 14400)
        if key != bucket_key:
            bucket_key = key
            out_t.append(t)
            out_r.append([o, h, l, c, v])
        else:
            cur = out_r[-1]
            cur[1] = max(cur[1], h)
            cur[2] = min(cur[2], l)
            cur[3] = c
            cur[4] += v
    return np.asarray(out_t, dtype=np.int64), np.asarray(out_r, dtype=np.float64).reshape(-1, 5)


class YahooChart:
    """Client of ``{base_url}/v8/finance/chart/{symbol}``."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout_s: float = 10.0) -> None:
        self._session = session
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s

    async def get(self, path: str, params: dict[str, str]) -> tuple[int, bytes]:
        """GET ``{base_url}{path}`` (any Yahoo endpoint: chart, search): status and body.

        A timeout or an unreachable host raises MarketDataError naming it (no status)."""
        try:
            async with self._session.get(
                f"{self.base_url}{path}", params=params, headers={"User-Agent": _USER_AGENT}, timeout=self._timeout
            ) as resp:
                return resp.status, await resp.read()
        except TimeoutError as exc:
            raise MarketDataError(f"Yahoo did not answer within {self._timeout_s:g} s ({path})") from exc
        except aiohttp.ClientError as exc:
            raise MarketDataError(f"cannot reach Yahoo Finance at {self.base_url}: {exc}") from exc

    async def fetch(self, symbol: str, interval: str, bars: int) -> Bars:
        """Up to the newest ``bars`` bars (Yahoo's range bounds how many exist)."""
        yi, yr = _range_for(interval, bars)
        status, body = await self.get(f"/v8/finance/chart/{symbol}", {"interval": yi, "range": yr})
        data = self._decode(status, body)
        times, rows = self._rows(data)
        if interval == "4h":
            times, rows = _aggregate_4h(times, rows)
        if len(times) == 0:
            raise MarketDataError(f"Yahoo returned zero bars for {symbol}")
        times, rows = times[-bars:], rows[-bars:]
        return Bars(
            open=np.ascontiguousarray(rows[:, 0]),
            high=np.ascontiguousarray(rows[:, 1]),
            low=np.ascontiguousarray(rows[:, 2]),
            close=np.ascontiguousarray(rows[:, 3]),
            volume=np.ascontiguousarray(rows[:, 4]),
            times=times,
        )

    @staticmethod
    def _decode(status: int, body: bytes) -> dict[str, Any]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        err = data.get("chart", {}).get("error") if isinstance(data, dict) else None
        if status != 200 or err:
            detail = err.get("description") if isinstance(err, dict) else None
            raise MarketDataError(f"Yahoo API returned status {status}" + (f": {detail}" if detail else ""))
        if not isinstance(data, dict):
            raise MarketDataError("Yahoo returned a body that is not JSON")
        return data

    @staticmethod
    def _rows(data: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        try:
            result = data["chart"]["result"][0]
            stamps = result.get("timestamp") or []
            quote = result["indicators"]["quote"][0]
            cols = [quote.get(k) or [] for k in ("open", "high", "low", "close", "volume")]
        except (KeyError, IndexError, TypeError) as exc:
            raise MarketDataError("Yahoo chart answer has an unexpected shape") from exc
        times: list[int] = []
        rows: list[list[float]] = []
        for i, t in enumerate(stamps):
            vals = [c[i] if i < len(c) else None for c in cols]
            if any(v is None for v in vals[:4]):
                continue  # Yahoo pads halted minutes with nulls
            vals[4] = vals[4] or 0.0
            times.append(int(t))
            rows.append([0.0 if v is None else float(v) for v in vals])  # None: none left, see above
        return np.asarray(times, dtype=np.int64), np.asarray(rows, dtype=np.float64).reshape(-1, 5)
