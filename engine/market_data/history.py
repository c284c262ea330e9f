"""Price history over a Yahoo-style period and interval, for crypto pairs (Binance) and stocks (Yahoo).

This module owns the period/interval vocabulary of get_history (:data:`PERIODS`,
:data:`INTERVALS`, :func:`default_interval`, :func:`binance_interval`), its row cap
(:data:`MAX_ROWS`) and :class:`HistorySource`, which fetches the rows:

- Crypto pairs: Binance klines from the period's start to now, paged forward 1000 at a time
  with ``startTime`` (``max``: paged backwards from now, the newest :data:`MAX_ROWS` rows).
  "Now" is the exchange's clock (``/api/v3/time``, its offset to ours kept a few minutes).
  When the live engine follows the pair at that interval and its window reaches back to
  the period's start, the rows come from the engine's window instead (no request).
  ``adjusted_close`` equals ``close``.  Intervals Binance does not have (2m, 90m, 5d, 3mo)
  are refused naming the alternatives.
- Stocks: Yahoo's chart with ``range=period&interval=interval``; ``adjusted_close`` from
  ``indicators.adjclose`` (``close`` when Yahoo sends none, which is said in a note).  Rows
  with a null price are dropped.  Yahoo's own intraday limits (1m: 7 days; 2m–90m: 60 days;
  1h: 2 years) are checked first so the error names a working combination.

Any request that would give more than :data:`MAX_ROWS` rows is refused with
:class:`HistoryArgumentError` suggesting a coarser interval (except ``max``, which is
truncated to the newest rows and says so).  The last row may be a bar still forming.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlencode

from engine.market_data.binance_rest import KLINES_MAX_LIMIT, KlineRow
from engine.market_data.errors import MarketDataError
from engine.market_data.intervals import BINANCE_INTERVALS
from engine.market_data.quotes import iso_utc, normalise, yahoo_chart_json
from engine.market_data.source import MarketData, is_crypto

Period = Literal["1d", "5d", "1mo", "3mo", "6mo", "1y", "2y", "5y", "10y", "ytd", "max"]
Interval = Literal["1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk", "1mo", "3mo"]
PERIODS: tuple[str, ...] = ("1d", "5d", "1mo", "3mo", "6mo", "1y", "2y", "5y", "10y", "ytd", "max")
INTERVALS: tuple[str, ...] = ("1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk", "1mo", "3mo")

MAX_ROWS = 5000
"""The most rows one answer holds (``max`` keeps the newest this many)."""

DEFAULT_INTERVALS: dict[str, str] = {
    "1d": "5m",
    "5d": "15m",
    "1mo": "1h",
    "3mo": "1d",
    "6mo": "1d",
    "ytd": "1d",
    "1y": "1d",
    "2y": "1d",
    "5y": "1wk",
    "10y": "1wk",
    "max": "1wk",
}
"""The interval used when none is given: 1d→5m, 5d→15m, 1mo→1h, 3mo–2y and ytd→1d, 5y/10y/max→1wk."""

BINANCE_OF: dict[str, str] = {
    "1m": "1m",
    "5m": "5m",
    "15m": "15m",
    "30m": "30m",
    "60m": "1h",
    "1h": "1h",
    "1d": "1d",
    "1wk": "1w",
    "1mo": "1M",
}
_NO_BINANCE: dict[str, str] = {"2m": "1m or 5m", "90m": "1h", "5d": "1d or 1wk", "3mo": "1mo"}

_DAY = 86_400
_PERIOD_DAYS: dict[str, int] = {"1d": 1, "5d": 5}
_PERIOD_MONTHS: dict[str, int] = {"1mo": 1, "3mo": 3, "6mo": 6, "1y": 12, "2y": 24, "5y": 60, "10y": 120}
# Yahoo's intraday limits: the longest span (days) each interval can be fetched over
_YAHOO_MAX_DAYS: dict[str, int] = {"1m": 7, "2m": 60, "5m": 60, "15m": 60, "30m": 60, "90m": 60, "60m": 730, "1h": 730}
_YAHOO_SECONDS: dict[str, int] = {"2m": 120, "60m": 3600, "90m": 5400, "5d": 5 * _DAY, "3mo": 91 * _DAY}
_COARSER = ("1m", "5m", "15m", "30m", "1h", "1d", "1wk", "1mo")


class HistoryArgumentError(ValueError):
    """A period/interval combination that cannot be answered; the message names a working one."""


@dataclass(frozen=True, slots=True)
class HistoryRow:
    timestamp: float
    """The bar's open time, epoch seconds."""
    open: float
    high: float
    low: float
    close: float
    volume: float
    adjusted_close: float


@dataclass(frozen=True, slots=True)
class History:
    symbol: str
    period: str
    interval: str
    rows: list[HistoryRow]
    refs: tuple[str, ...]
    """The requests (or the engine window) the rows came from, and notes (``note:…``)."""


def default_interval(period: str) -> str:
    return DEFAULT_INTERVALS[period]


def binance_interval(interval: str) -> str:
    """Binance's spelling of a Yahoo-style interval; HistoryArgumentError naming alternatives if none."""
    if interval in BINANCE_OF:
        return BINANCE_OF[interval]
    alt = _NO_BINANCE.get(interval, ", ".join(BINANCE_OF))
    raise HistoryArgumentError(f"interval {interval!r} does not exist for crypto pairs (Binance); use {alt} instead")


def interval_seconds(interval: str) -> int:
    """Nominal length of a Yahoo-style interval (months 30 days)."""
    if interval in BINANCE_OF:
        return BINANCE_INTERVALS[BINANCE_OF[interval]]
    return _YAHOO_SECONDS[interval]


def _months_back(t: datetime, months: int) -> datetime:
    y, m = divmod(t.year * 12 + (t.month - 1) - months, 12)
    month = m + 1
    days_in = [31, 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return t.replace(year=y, month=month, day=min(t.day, days_in[m]))


def period_start(period: str, now_s: float) -> float | None:
    """Epoch seconds where ``period`` begins before ``now_s`` (None for ``max``)."""
    if period == "max":
        return None
    if period in _PERIOD_DAYS:
        return now_s - _PERIOD_DAYS[period] * _DAY
    now = datetime.fromtimestamp(now_s, UTC)
    if period == "ytd":
        return now_s - (now - datetime(now.year, 1, 1, tzinfo=UTC)).total_seconds()
    if period in _PERIOD_MONTHS:  # the exact calendar span, subtracted from now_s (no float round trip)
        return now_s - (now - _months_back(now, _PERIOD_MONTHS[period])).total_seconds()
    raise HistoryArgumentError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")


def expected_rows(period: str, interval: str, now_s: float) -> int:
    """How many bars ``period`` at ``interval`` spans around the clock (crypto), the forming one included."""
    start = period_start(period, now_s)
    if start is None:
        return MAX_ROWS
    return math.ceil((now_s - start) / interval_seconds(interval)) + 1


def _suggest(period: str, now_s: float) -> str:
    fits = [iv for iv in _COARSER if expected_rows(period, iv, now_s) <= MAX_ROWS]
    return fits[0] if fits else "1mo"


def aligned_start_ms(start_s: float, binance_iv: str) -> int:
    """The open time of the bar containing ``start_s`` (intervals up to a day; weeks and months as given)."""
    step = BINANCE_INTERVALS[binance_iv]
    if step > _DAY:
        return int(start_s) * 1000
    return int(start_s // step * step) * 1000


def check_cap(period: str, interval: str, now_s: float) -> None:
    """Refuse a crypto request beyond :data:`MAX_ROWS` rows, suggesting the finest interval that fits."""
    if period == "max":
        return
    n = expected_rows(period, interval, now_s)
    if n > MAX_ROWS:
        raise HistoryArgumentError(
            f"period {period} at interval {interval} is about {n} rows, more than the cap of {MAX_ROWS}; "
            f"use a coarser interval (e.g. interval={_suggest(period, now_s)}) or a shorter period"
        )


def check_yahoo_limits(period: str, interval: str, now_s: float) -> None:
    """Refuse intraday intervals over spans Yahoo does not serve, naming what works."""
    max_days = _YAHOO_MAX_DAYS.get(interval)
    if max_days is None:
        return
    start = period_start(period, now_s)
    span = math.inf if start is None else (now_s - start) / _DAY
    if span > max_days + 0.5:
        ok = [p for p in PERIODS if p != "max" and (now_s - (period_start(p, now_s) or 0)) / _DAY <= max_days + 0.5]
        raise HistoryArgumentError(
            f"Yahoo serves {interval} bars only for the last {max_days} days; use period {' or '.join(ok[-2:])} "
            f"with {interval}, or a coarser interval (1d) for period {period}"
        )


class HistorySource:
    """Fetches history rows; create one per daemon (it keeps the exchange clock's offset)."""

    def __init__(
        self, market: MarketData, engine: Any | None, *, max_rows: int = MAX_ROWS, clock_ttl_s: float = 300.0
    ) -> None:
        self.market = market
        self.engine = engine
        self.max_rows = max_rows
        self.clock_ttl_s = clock_ttl_s
        self._offset: tuple[float, float] | None = None  # (expires monotonic, server minus local seconds)

    async def history(self, symbol: str, period: str, interval: str | None = None) -> History:
        if period not in PERIODS:
            raise HistoryArgumentError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
        iv = interval or default_interval(period)
        if iv not in INTERVALS:
            raise HistoryArgumentError(f"unknown interval {iv!r}; use one of {', '.join(INTERVALS)}")
        sym = normalise(symbol)
        if is_crypto(sym):
            return await self._crypto(sym, period, iv)
        return await self._stock(sym, period, iv)

    # --- crypto ------------------------------------------------------------------------
    async def exchange_now(self) -> float:
        """The exchange's clock in epoch seconds (its offset to ours refreshed every ``clock_ttl_s``)."""
        mono = time.monotonic()
        if self._offset is None or mono >= self._offset[0]:
            server_ms = await self.market.binance.server_time_ms()
            self._offset = (mono + self.clock_ttl_s, server_ms / 1000 - time.time())
        return time.time() + self._offset[1]

    async def _crypto(self, symbol: str, period: str, interval: str) -> History:
        bi = binance_interval(interval)
        now = await self.exchange_now()
        check_cap(period, interval, now)
        start = period_start(period, now)
        engine_rows = self._from_engine(symbol, bi, start)
        if engine_rows is not None:
            rows, ref = engine_rows
            return History(symbol, period, interval, rows, (ref,))
        refs: list[str] = []
        if start is None:
            raw = await self._newest(symbol, bi, refs)
            if len(raw) >= self.max_rows:
                refs.append(f"note:period max is capped at the newest {self.max_rows} rows")
        else:
            raw = await self._forward(symbol, bi, aligned_start_ms(start, bi), int(now * 1000), refs)
        return History(symbol, period, interval, _kline_rows(raw), tuple(refs))

    async def _klines(self, symbol: str, bi: str, refs: list[str], **bounds: int) -> list[KlineRow]:
        params = {"symbol": symbol, "interval": bi, "limit": KLINES_MAX_LIMIT}
        names = {"start_ms": "startTime", "end_ms": "endTime"}
        query = {**params, **{names[k]: v for k, v in bounds.items()}}
        refs.append(f"binance:GET /api/v3/klines?{urlencode(query)}@{iso_utc(time.time())}")
        try:
            return await self.market.binance.klines(symbol, bi, limit=KLINES_MAX_LIMIT, **bounds)
        except MarketDataError as exc:
            if exc.status == 400 and "symbol" in str(exc).lower():
                raise MarketDataError(
                    f"unknown symbol {symbol}: Binance has no such spot pair; check the spelling (e.g. BTCUSDT) "
                    "or list pairs with get_symbols exchange=BINANCE",
                    status=400,
                ) from exc
            raise

    async def _forward(self, symbol: str, bi: str, start_ms: int, now_ms: int, refs: list[str]) -> list[KlineRow]:
        rows: list[KlineRow] = []
        cursor = start_ms
        while len(rows) < self.max_rows:
            page = await self._klines(symbol, bi, refs, start_ms=cursor)
            rows.extend(page)
            if len(page) < KLINES_MAX_LIMIT or int(page[-1][0]) >= now_ms:
                break
            cursor = int(page[-1][0]) + 1
        return rows[: self.max_rows]

    async def _newest(self, symbol: str, bi: str, refs: list[str]) -> list[KlineRow]:
        rows = await self._klines(symbol, bi, refs)
        while rows and len(rows) < self.max_rows:
            first = int(rows[0][0])
            older = [r for r in await self._klines(symbol, bi, refs, end_ms=first - 1) if int(r[0]) < first]
            if not older:
                break
            rows = older + rows
            if len(older) < KLINES_MAX_LIMIT:
                break
        return rows[-self.max_rows :]

    def _from_engine(self, symbol: str, bi: str, start: float | None) -> tuple[list[HistoryRow], str] | None:
        """The engine window's rows since ``start`` when it follows the market and reaches back that far."""
        engine = self.engine
        if engine is None or start is None or not engine.follows(symbol, bi) or engine.is_stale(symbol, bi):
            return None
        bars = engine.window_bars(symbol, bi, include_open=True)
        first = aligned_start_ms(start, bi) / 1000
        if bars is None or len(bars) == 0 or bars.times is None or int(bars.times[0]) > first:
            return None
        times = bars.times.tolist()
        cols = [c.tolist() for c in (bars.open, bars.high, bars.low, bars.close, bars.volume)]
        rows = [
            HistoryRow(float(t), o, h, lo, c, v, c)
            for t, o, h, lo, c, v in zip(times, *cols, strict=True)
            if t >= first  # as the REST path: from the bar containing the period's start
        ]
        return rows, f"engine:{symbol}/{bi}@{iso_utc(times[-1])}"

    # --- stocks ------------------------------------------------------------------------
    async def _stock(self, symbol: str, period: str, interval: str) -> History:
        check_yahoo_limits(period, interval, time.time())
        try:
            result, ref = await yahoo_chart_json(self.market, symbol, {"range": period, "interval": interval})
        except MarketDataError as exc:
            if exc.status in (400, 422):
                raise HistoryArgumentError(str(exc)) from exc
            raise
        rows, adjusted = parse_yahoo_rows(result)
        refs = [ref]
        if not adjusted:
            refs.append("note:Yahoo sent no adjclose for this interval; adjusted_close equals close")
        if len(rows) > self.max_rows:
            if period != "max":
                raise HistoryArgumentError(
                    f"period {period} at interval {interval} is {len(rows)} rows, more than the cap of "
                    f"{self.max_rows}; use a coarser interval (e.g. 1wk) or a shorter period"
                )
            rows = rows[-self.max_rows :]
            refs.append(f"note:period max is capped at the newest {self.max_rows} rows")
        return History(symbol, period, interval, rows, tuple(refs))


def _kline_rows(raw: list[KlineRow]) -> list[HistoryRow]:
    out: list[HistoryRow] = []
    try:
        for r in raw:
            close = float(r[4])
            out.append(HistoryRow(int(r[0]) / 1000, float(r[1]), float(r[2]), float(r[3]), close, float(r[5]), close))
    except (TypeError, ValueError, IndexError) as exc:
        raise MarketDataError(f"Binance kline rows are malformed: {exc}") from exc
    return out


def parse_yahoo_rows(result: dict[str, Any]) -> tuple[list[HistoryRow], bool]:
    """Rows of a Yahoo chart ``result`` (null-price rows dropped) and whether adjclose was present."""
    try:
        stamps = result.get("timestamp") or []
        quote = result["indicators"]["quote"][0]
        cols = [quote.get(k) or [] for k in ("open", "high", "low", "close", "volume")]
        adj_list = result["indicators"].get("adjclose") or []
        adj = adj_list[0].get("adjclose") if adj_list else None
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MarketDataError("Yahoo chart answer has an unexpected shape") from exc
    rows: list[HistoryRow] = []
    for i, t in enumerate(stamps):
        o, h, lo, c, v = (col[i] if i < len(col) else None for col in cols)
        if o is None or h is None or lo is None or c is None:
            continue  # Yahoo pads halted or future slots with nulls
        a = adj[i] if adj is not None and i < len(adj) and adj[i] is not None else c
        rows.append(HistoryRow(float(t), float(o), float(h), float(lo), float(c), float(v or 0.0), float(a)))
    return rows, adj is not None
